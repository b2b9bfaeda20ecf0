package pebblefs

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/zns"
)

// TestH25DRemovedFilesComeBackWholeAfterGC: a file removed without a
// flush (Remove defers it, as Pebble's deletions of obsolete tables are
// until a directory or file Sync) comes back after a power cut whole,
// even when GC has had to reclaim zones meanwhile: on a device of 16
// zones of 1 MiB, each round writes and syncs tables of up to 900 KiB,
// removes older ones, and then, flushing nothing, writes unsynced data
// until the engine has to write back and collect; after the cut every
// file there reads exactly as it was synced (H25D_SEED: another seed).
func TestH25DRemovedFilesComeBackWholeAfterGC(t *testing.T) {
	cfg := engine.Config{CacheBytes: 4 << 20, DirtyLimit: 1 << 20}
	name, dev, fd, e := openFrozen(t, 16, "1M", cfg)
	defer func() { _ = e.Close() }()
	y := New(e)
	rng := rand.New(rand.NewPCG(h25dSeed(), 16))
	content := map[string][]byte{} // every file ever synced, by name (names are not reused)
	var live []string
	next := 0
	back, rounds := 0, 16
	removeDownTo := func(n int) (removed []string) {
		for len(live) > n {
			if err := y.Remove(live[0]); err != nil {
				t.Fatal(err)
			}
			removed = append(removed, live[0])
			live = live[1:]
		}
		return removed
	}
	var resets int64
	for round := range rounds {
		removeDownTo(2) // durable with the next table's Sync
		for range 3 {
			next++
			n := fmt.Sprintf("t%04d.sst", next)
			b := make([]byte, 200<<10+rng.IntN(700<<10))
			for i := range b {
				b[i] = byte(1 + rng.IntN(255))
			}
			f, err := y.Create(n, "pebble-compaction")
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			if _, err := f.Write(b); err != nil {
				t.Fatalf("round %d: write %s: %v", round, n, err)
			}
			if err := f.Sync(); err != nil {
				t.Fatalf("round %d: sync %s: %v", round, n, err)
			}
			f.Close()
			content[n] = b
			live = append(live, n)
		}
		removed := removeDownTo(2) // not durable: nothing flushes from here to the cut
		before := e.Stats().GCResets
		// Unsynced data, up to twice the device's free room over a
		// round, written back as the dirty limit says, GC collecting
		// zones of the removed tables to make room. The amount is
		// counted on the device (Stats.DevData), not as written: what
		// a scratch file still has dirty when it is removed is never
		// written back, and how much that is depends on how long the
		// remove takes. On a device of format 3 a deferred remove
		// writes nothing (its record is held for a pack): counted as
		// written, half the junk never reached the device, GC reset
		// 1-16 zones a run against ~30 on format 2, and a run could
		// reset none (the check below). The writes are bounded, in
		// case writeback stalls.
		s, err := y.Create("scratch", vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		junk := bytes.Repeat([]byte{0xee}, 64<<10)
		target, data0 := int64(rng.IntN(160))*int64(len(junk)), e.Stats().DevData
		for i := 0; e.Stats().DevData-data0 < target && i < 4*160; i++ {
			if _, err := s.Write(junk); err != nil {
				t.Logf("round %d: unsynced write %d: %v", round, i, err)
				break
			}
			if i%32 == 31 {
				if err := y.Remove("scratch"); err != nil {
					t.Fatal(err)
				}
				s.Close()
				if s, err = y.Create("scratch", vfs.WriteCategoryUnspecified); err != nil {
					t.Fatal(err)
				}
			}
		}
		s.Close()
		resets += e.Stats().GCResets - before

		// One cut in eight (every cut with PEBBLEFS_CUT_KEEP), each zone
		// keeps some of what it took since the last flush (cutKeeping):
		// a removal may then be durable, and the scratch file's data
		// partly there; the synced files must still read whole.
		fd.frozen.Store(true)
		if round%8 == 6 || cutKeepAll() {
			if _, err := cutKeeping(dev.(*zns.Emu), h25dSeed()<<8^uint64(round)); err != nil {
				t.Fatal(err)
			}
		} else if err := dev.(*zns.Emu).PowerCut(); err != nil {
			t.Fatal(err)
		}
		_ = e.Close()
		if dev, err = zns.Open(name, zns.Options{}); err != nil {
			t.Fatal(err)
		}
		fd = &frozenDevice{Device: dev}
		if e, err = engine.OpenDevice(fd, cfg); err != nil {
			t.Fatalf("round %d: reopen after the cut: %v", round, err)
		}
		y = New(e)

		names, err := y.List("")
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range live {
			if !slices.Contains(names, n) {
				t.Fatalf("round %d: %s, synced and not removed, is gone", round, n)
			}
		}
		live = live[:0]
		for _, n := range names {
			want, ok := content[n]
			if !ok {
				if n != "scratch" {
					t.Fatalf("round %d: %q was never synced", round, n)
				}
				continue
			}
			f, err := y.Open(n)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(f)
			f.Close()
			if err != nil {
				t.Fatalf("round %d: read %s: %v", round, n, err)
			}
			if !bytes.Equal(got, want) {
				i := 0
				for i < min(len(got), len(want)) && got[i] == want[i] {
					i++
				}
				t.Fatalf("round %d: %s (removed in this round: %v) reads %d bytes, first differing at %d, want its %d synced bytes",
					round, n, slices.Contains(removed, n), len(got), i, len(want))
			}
			if slices.Contains(removed, n) {
				back++
			}
			live = append(live, n)
		}
		slices.Sort(live)
		if err := y.RemoveAll("scratch"); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d rounds; %d zones reset by GC in the rounds' unflushed phases; %d removed tables came back whole after the cut", rounds, resets, back)
	// A keeping cut may keep a removal's record (it was written, only
	// not flushed): with every cut keeping (PEBBLEFS_CUT_KEEP), rounds
	// where no removed table comes back are no failure, and all of them
	// may be such rounds.
	if (back == 0 && !cutKeepAll()) || resets == 0 {
		t.Fatal("no removed table came back: the cuts tested nothing deferred")
	}
}
