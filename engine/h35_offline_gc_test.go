package engine

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// TestAcceptedOfflineZoneLosesGCCopiesNotTheVictim: GC relocates a
// victim's live data into a zone, logs the victim's reset and resets it;
// the zone the copies went to goes offline unnoticed, and the daemon is
// killed. Opened with AcceptOfflineZones, recovery drops what the offline
// zone held that is newer than its checkpoint, the copies' records too,
// so the relocated files' extents were left pointing into the victim,
// reset since: its valid bytes counted data it no longer held (GC then
// took it as a victim with live data it failed to read, and retried with
// backoff for as long as the daemon ran), fsck reported extents "where
// no record carries it" instead of the data lost in the offline zone,
// and LostBytes did not count them. Those extents are lost in the
// offline zone, where GC put them: reads of them fail, the victim holds
// nothing, LostBytes counts them, and fsck names their files there.
func TestAcceptedOfflineZoneLosesGCCopiesNotTheVictim(t *testing.T) {
	devName := emuDevice(t, 12, "256K", "")
	cfg := Config{CacheBytes: 2 << 20, DirtyLimit: 1 << 20}
	cfg.GC.Disabled = true
	e := formatOpen(t, devName, cfg)
	const size = 100000
	names := fillWithFiles(t, e, size)
	// A full zone holding a file wholly, beside others' data: the file
	// goes, and what is left there is GC's to relocate.
	var victim *zone
	var gone string
	for _, n := range names {
		z := e.zoneAt(devOf(t, e, n, 0).dev)
		if z.state.Load() == zoneFull && e.zoneAt(devOf(t, e, n, size-1).dev) == z {
			victim, gone = z, n
			break
		}
	}
	if victim == nil {
		t.Fatal("set-up: no full zone with a file wholly in it")
	}
	if err := e.Remove(gone); err != nil {
		t.Fatal(err)
	}
	// The checkpoint recovery will start from: the copies are newer.
	if err := e.checkpoint(); err != nil {
		t.Fatal(err)
	}
	inVictim := map[string]int64{} // bytes of each file GC will move
	movedAt := map[string]int64{}  // a file offset of each among them
	for _, n := range names {
		if n == gone {
			continue
		}
		f := e.byName[n]
		f.mu.RLock()
		f.ext.each(func(x extent) bool {
			if e.zoneAt(x.dev) == victim {
				inVictim[n] += x.len
				movedAt[n] = x.off
			}
			return true
		})
		f.mu.RUnlock()
	}
	if len(inVictim) == 0 {
		t.Fatal("set-up: nothing live beside the removed file in the victim")
	}
	ok, err := collectVictim(e, victim)
	if err != nil || !ok {
		t.Fatalf("set-up: collect zone %d: %v, %v", victim.idx, ok, err)
	}
	// The zones the copies went to (GC follows each file's stream):
	// all go offline. Files that mapped data there before lose it too.
	dests := map[*zone]bool{}
	for n := range inVictim {
		z := e.zoneAt(devOf(t, e, n, movedAt[n]).dev)
		if z == victim {
			t.Fatalf("set-up: GC of zone %d left %s's bytes at %d there", victim.idx, n, movedAt[n])
		}
		dests[z] = true
	}
	if victim.state.Load() == zoneFull {
		t.Fatalf("set-up: victim zone %d not reset", victim.idx)
	}
	emu := emuOf(t, e)
	touched := map[string]bool{}
	var wantLost int64 // what files map into the zones as they go offline
	for z := range dests {
		if err := emu.ZoneOffline(z.idx); err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if f := e.byName[n]; f != nil {
				f.mu.RLock()
				f.ext.each(func(x extent) bool {
					if e.zoneAt(x.dev) == z {
						touched[n] = true
						wantLost += x.len
					}
					return true
				})
				f.mu.RUnlock()
			}
		}
	}
	if err := emu.Flush(); err != nil {
		t.Fatal(err)
	}
	e.crashForTest()
	emu.Close()

	rep := fsckOfWith(t, devName, FsckOptions{AcceptOfflineZones: true})
	t.Logf("fsck: problems %q", rep.Problems)
	var offlineProblems string
	for _, p := range rep.Problems {
		if strings.Contains(p, "no record carries it") {
			t.Errorf("fsck: %q: the relocated data is lost in an offline zone, not missing from zone %d", p, victim.idx)
		}
		if strings.Contains(p, " is offline") {
			offlineProblems += p
		}
	}
	for n := range inVictim {
		if !strings.Contains(offlineProblems, fmt.Sprintf("%q", n)) {
			t.Errorf("fsck does not name %s among the files with data in offline zones: %q", n, offlineProblems)
		}
	}

	acc := cfg
	acc.AcceptOfflineZones = true
	for round, c := range []Config{acc, cfg} { // the second Open needs no option
		e, err = Open(devName, c)
		if err != nil {
			t.Fatalf("open %d: %v", round, err)
		}
		for n, moved := range inVictim {
			f := e.byName[n]
			f.mu.RLock()
			f.ext.each(func(x extent) bool {
				if e.zoneAt(x.dev) == victim {
					t.Errorf("open %d: %s maps %d bytes at file offset %d into zone %d, reset after GC moved them", round, n, x.len, x.off, victim.idx)
				}
				return true
			})
			f.mu.RUnlock()
			h, err := e.Open(n)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := h.ReadAt(make([]byte, size), 0); err == nil {
				t.Errorf("open %d: %s reads whole, though GC moved %d of its bytes into an offline zone", round, n, moved)
			}
			h.Close()
		}
		if v := e.zones[victim.idx].valid.Load(); v != 0 {
			t.Errorf("open %d: zone %d, reset after GC, counts %d valid bytes", round, victim.idx, v)
		}
		if st := e.Stats(); st.LostBytes != wantLost {
			t.Errorf("open %d: %d bytes lost counted, want the %d files mapped into the offline zones, GC's copies included", round, st.LostBytes, wantLost)
		}
		for i, n := range names {
			if touched[n] || n == gone {
				continue
			}
			if got := readAll(t, e, n); !bytes.Equal(got, bytes.Repeat([]byte{byte(i)}, size)) {
				t.Errorf("open %d: %s differs", round, n)
			}
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
