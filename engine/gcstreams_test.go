package engine

import (
	"slices"
	"strings"
	"testing"
)

// zonesOf lists the zones that hold a file's data in the byte range
// [lo, hi), keyed by zone number.
func zonesOf(e *Engine, name string, lo, hi int64) map[int]bool {
	e.nsMu.RLock()
	f := e.byName[name]
	e.nsMu.RUnlock()
	out := map[int]bool{}
	f.mu.RLock()
	defer f.mu.RUnlock()
	f.ext.lookup(lo, hi-lo, func(x extent) {
		if z := e.zoneAt(x.dev); z != nil {
			out[z.idx] = true
		}
	})
	return out
}

// collectVictim has GC collect zone z as a pass would: z taken for GC
// under the collector's lock, as passLocked takes its victims.
func collectVictim(e *Engine, z *zone) (bool, error) {
	e.gc.mu.Lock()
	defer e.gc.mu.Unlock()
	z.state.Store(zoneGC)
	return e.gc.collect(z, minGCGain)
}

// collectZone has GC relocate and reset one chosen zone, as a pass would.
func collectZone(t *testing.T, e *Engine, idx int) {
	t.Helper()
	e.gc.mu.Lock()
	defer e.gc.mu.Unlock()
	z := e.zones[idx]
	if !z.state.CompareAndSwap(zoneFull, zoneGC) {
		t.Fatalf("zone %d is not full (state %d)", idx, z.state.Load())
	}
	ok, err := e.gc.collect(z, minGCGain)
	if err != nil || !ok {
		t.Fatalf("collect zone %d: %v, %v", idx, ok, err)
	}
}

// GC sorts its copies by the file's temperature: copies of a hot file (one
// overwritten many times over) and of a cold one (written once) that GC
// finds in one victim go to two zones, one per stream, and no data of
// either shares a zone with the other's copies. With one stream they share
// one: the test tells the two apart.
func TestGCStreamsSortCopiesByTemperature(t *testing.T) {
	for _, streams := range []int{2, 1} {
		t.Run(map[int]string{1: "one-stream", 2: "two-streams"}[streams], func(t *testing.T) {
			devName := emuDevice(t, 24, "256K", "")
			// none: the two files' first writes interleave in one zone
			// stream, so that one victim holds both. Background GC is off:
			// the test picks the victim.
			cfg := Config{CacheBytes: 4 << 20, Policy: PolicyNone, GC: GCConfig{Disabled: true, Streams: streams}}
			e := formatOpen(t, devName, cfg)
			defer e.Close()
			if got := e.placer.gcStreams; got != streams {
				t.Fatalf("engine keeps %d GC streams; asked for %d", got, streams)
			}
			const bs, size = 8192, 512 << 10
			hot, err := e.Create("hot")
			if err != nil {
				t.Fatal(err)
			}
			cold, err := e.Create("cold")
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, bs)
			gens := [][]uint32{make([]uint32, size/bs), make([]uint32, size/bs)}
			write := func(f *File, i int, b int64) {
				gens[i][b]++
				stamp(buf, i, b*bs, gens[i][b])
				if _, err := f.WriteAt(buf, b*bs); err != nil {
					t.Fatal(err)
				}
			}
			for b := range int64(size / bs) {
				write(cold, 1, b)
				write(hot, 0, b)
			}
			if err := e.Sync(t.Context()); err != nil {
				t.Fatal(err)
			}
			// The hot file's odd blocks, overwritten ten times over: its
			// even blocks stay where the fill put them, beside the cold
			// file's data and the garbage the odd ones left.
			for range 10 {
				for b := int64(1); b < size/bs; b += 2 {
					write(hot, 0, b)
				}
			}
			if err := e.Sync(t.Context()); err != nil {
				t.Fatal(err)
			}
			if h, c := e.gc.stream(e.byName["hot"], e.stats.hostWritten.Load(), e.placer.validBytes()),
				e.gc.stream(e.byName["cold"], e.stats.hostWritten.Load(), e.placer.validBytes()); streams == 2 && (h != hotStream || c != coldStream) {
				t.Fatalf("hot file in stream %d, cold file in stream %d; want %d and %d", h, c, hotStream, coldStream)
			}
			// A victim holding both files' valid data, and garbage.
			victim := -1
			hotZones := zonesOf(e, "hot", 0, size)
			for z := range zonesOf(e, "cold", 0, size) {
				if hotZones[z] && e.zones[z].state.Load() == zoneFull && e.zones[z].valid.Load() < e.zones[z].cap {
					victim = z
					break
				}
			}
			if victim < 0 {
				t.Fatal("no full zone holds both files' data")
			}
			collectZone(t, e, victim)
			// Where the victim's data went: zones GC opened.
			gcZones := func(name string) map[int]bool {
				out := map[int]bool{}
				for z := range zonesOf(e, name, 0, size) {
					if e.zones[z].forGC {
						out[z] = true
					}
				}
				return out
			}
			hotGC, coldGC := gcZones("hot"), gcZones("cold")
			if len(hotGC) == 0 || len(coldGC) == 0 {
				t.Fatalf("GC copied the hot file to zones %v and the cold one to %v; want both copied", hotGC, coldGC)
			}
			shared := 0
			for z := range hotGC {
				if coldGC[z] {
					shared++
				}
			}
			switch {
			case streams == 2 && shared > 0:
				t.Errorf("hot copies in zones %v, cold copies in %v: %d zone(s) mix them", hotGC, coldGC, shared)
			case streams == 1 && shared == 0:
				t.Errorf("one stream, yet hot copies in zones %v and cold copies in %v never meet", hotGC, coldGC)
			}
			checkValidCounts(t, e)
			got := make([]byte, bs)
			for i, name := range []string{"hot", "cold"} {
				f, err := e.Open(name)
				if err != nil {
					t.Fatal(err)
				}
				for b, g := range gens[i] {
					stamp(buf, i, int64(b)*bs, g)
					if _, err := f.ReadAt(got, int64(b)*bs); err != nil {
						t.Fatal(err)
					}
					if string(got) != string(buf) {
						t.Fatalf("%s block %d: not generation %d after GC", name, b, g)
					}
				}
				f.Close()
			}
		})
	}
}

// How many GC streams an engine keeps: two where the device's open limit
// leaves room for both beside the data zones, else one; what is asked is
// kept to, and an engine asked for more than the limit holds is refused.
func TestGCStreamsFitTheOpenLimit(t *testing.T) {
	for _, tc := range []struct {
		asked, budget, limit, want int
	}{
		{0, 0, 0, 2},  // no limit
		{0, 0, 19, 2}, // 16 data zones, 2 GC, 1 metadata
		{0, 0, 18, 1}, // one short: the data zones keep their 16
		{0, 3, 7, 2},  // 3 asked for data
		{0, 4, 7, 2},  // 4 asked: room for both
		{0, 5, 7, 1},  // 5 asked: room for one GC zone
		{1, 0, 0, 1},  // asked
		{2, 0, 6, 2},  // asked: the budget gives way (or Open refuses)
		{5, 0, 0, 2},  // at most two
		{0, 0, 5, 1},  // a small device
	} {
		if got := gcStreams(tc.asked, tc.budget, tc.limit); got != tc.want {
			t.Errorf("gcStreams(asked %d, budget %d, limit %d) = %d; want %d", tc.asked, tc.budget, tc.limit, got, tc.want)
		}
	}
	devName := emuDevice(t, 16, "256K", "&max_open=5&max_active=5")
	e := formatOpen(t, devName, Config{CacheBytes: 4 << 20, GC: GCConfig{Streams: 2}})
	if e.placer.budget != 2 || e.placer.gcStreams != 2 {
		t.Fatalf("max_open 5, two GC streams: %d data zones, %d streams; want 2 and 2", e.placer.budget, e.placer.gcStreams)
	}
	// The budget counts every stream: with the data zones open, GC opens
	// one zone per stream and not one more.
	p := &e.placer
	p.mu.Lock()
	var opened []bool
	for _, forGC := range []bool{false, false, false, true, true, true} {
		ok, _ := p.openFreeLocked(forGC)
		opened = append(opened, ok)
	}
	p.mu.Unlock()
	if want := []bool{true, true, false, true, true, false}; !slices.Equal(opened, want) {
		t.Errorf("opening 3 data zones, then 3 GC zones: %v; want %v", opened, want)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := Open(devName, Config{CacheBytes: 4 << 20, OpenZones: 3, GC: GCConfig{Streams: 2}})
	if err == nil || !strings.Contains(err.Error(), "2 streams") {
		t.Fatalf("3 data zones and 2 GC streams on a device of 5 open zones: %v; want a refusal that names the streams", err)
	}
}

// With two GC streams and the device's open and active limits exactly at
// what the engine plans for, skewed overwrites under GC pressure never
// open a zone past the limit (the emulated device fails such a write),
// and both streams take copies.
func TestGCStreamsKeepToOpenLimit(t *testing.T) {
	for _, p := range []Policy{PolicyMRU, PolicyNone} {
		t.Run(p.String(), func(t *testing.T) {
			// 7 open zones: 4 data zones (one per file), 2 GC streams,
			// 1 metadata.
			cfg := Config{CacheBytes: 2 << 20, DirtyLimit: 512 << 10, Policy: p, GC: GCConfig{Streams: 2}}
			e := formatOpen(t, emuDevice(t, 48, "256K", "&max_open=7&max_active=7"), cfg)
			defer e.Close()
			if e.placer.budget != 4 {
				t.Fatalf("%d data zones; want 4", e.placer.budget)
			}
			const bs = 8192
			size := e.Capacity() * 6 / 10 / 4 / bs * bs
			handles := make([]*File, 4)
			buf := make([]byte, bs)
			for i := range handles {
				var err error
				if handles[i], err = e.Create(string(rune('a' + i))); err != nil {
					t.Fatal(err)
				}
				for off := int64(0); off < size; off += bs {
					if _, err := handles[i].WriteAt(buf, off); err != nil {
						t.Fatal(err)
					}
				}
			}
			// File 0 takes 7 of every 8 overwrites: hot; the rest cold.
			n := 3 * e.Capacity() / bs
			for k := int64(0); k < n; k++ {
				i := 0
				if k%8 == 7 {
					i = 1 + int(k/8)%3
				}
				off := (k * 7919 % (size / bs)) * bs
				if _, err := handles[i].WriteAt(buf, off); err != nil {
					t.Fatalf("overwrite %d: %v", k, err)
				}
			}
			if err := e.Sync(t.Context()); err != nil {
				t.Fatal(err)
			}
			st := e.Stats()
			if st.AppendErrs != 0 {
				t.Errorf("%d appends failed (a zone past the device's limits?)", st.AppendErrs)
			}
			if st.GCResets == 0 {
				t.Fatal("GC never ran")
			}
			for s := range e.gc.streams {
				if e.gc.streams[s].Load() == nil {
					t.Errorf("GC stream %d never took a copy", s)
				}
			}
			checkValidCounts(t, e)
		})
	}
}

// A reserve of two zones covers one GC stream: a pass may need the rest
// of its zone and one more zone before the victim's reset pays one back.
// Two streams may each need one more. So the reserve grows by a zone per
// stream beyond the first: passes in a row at the reserve never leave
// fewer free zones than one stream's reserve (bench
// gc's lifetimes under none/greedy with two streams ran out of space: no
// free zone, every open zone full, GC unable to relocate). Before the fix
// the first pass here sent the hot and the cold copies each to a fresh
// zone and left one zone free.
func TestGCStreamsAtReserveLoseNoZone(t *testing.T) {
	devName := emuDevice(t, 24, "256K", "")
	cfg := Config{CacheBytes: 4 << 20, Policy: PolicyNone, GC: GCConfig{Disabled: true, Streams: 2}}
	e := formatOpen(t, devName, cfg)
	defer e.Close()
	const bs, size = 8192, 512 << 10
	hot, err := e.Create("hot")
	if err != nil {
		t.Fatal(err)
	}
	cold, err := e.Create("cold")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, bs)
	// The two files' data interleaves in the one zone stream, 64 KiB of
	// each at a time.
	for b := int64(0); b < size/bs; b++ {
		for _, f := range []*File{cold, hot} {
			if _, err := f.WriteAt(buf, b*bs); err != nil {
				t.Fatal(err)
			}
		}
		if b%8 == 7 {
			if err := e.Sync(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range 10 {
		for b := int64(1); b < size/bs; b += 2 {
			if _, err := hot.WriteAt(buf, b*bs); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := e.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Fill the free zones down to GC's reserve.
	filler, err := e.Create("filler")
	if err != nil {
		t.Fatal(err)
	}
	reserve := e.placer.gcReserve
	for off := int64(0); e.placer.freeCount() > reserve; off += bs {
		if _, err := filler.WriteAt(buf, off); err != nil {
			t.Fatal(err)
		}
		if err := e.Sync(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if reserve != 3 {
		t.Fatalf("reserve %d with two GC streams; want 3 (2 for one stream, 1 more for the second)", reserve)
	}
	// Collect the zones holding both files' data, least valid first, as
	// greedy would, checking the free zones after each pass.
	passes := 0
	for {
		victim := -1
		hotZones := zonesOf(e, "hot", 0, size)
		for z := range zonesOf(e, "cold", 0, size) {
			if hotZones[z] && e.zones[z].state.Load() == zoneFull && e.zones[z].valid.Load() < e.zones[z].cap*3/4 &&
				(victim < 0 || e.zones[z].valid.Load() < e.zones[victim].valid.Load()) {
				victim = z
			}
		}
		if victim < 0 {
			break
		}
		before := e.placer.freeCount()
		collectZone(t, e, victim)
		passes++
		if after := e.placer.freeCount(); after < 2 {
			t.Fatalf("pass %d at %d free zones (reserve %d) left %d: fewer than one stream's reserve", passes, before, reserve, after)
		}
	}
	if passes < 2 {
		t.Fatalf("%d passes; want at least 2", passes)
	}
	checkValidCounts(t, e)
}

// Writers that must share a zone never take one of GC's: GC opened it
// from its reserve to finish a pass, and a writer filling it leaves GC
// short of the room the reserve promised. Before, a writer under none
// with no zone of its own to open took the least recently used open
// zone, GC's included.
func TestWritersNeverShareGCZones(t *testing.T) {
	e := formatOpen(t, emuDevice(t, 16, "256K", ""), Config{CacheBytes: 4 << 20, Policy: PolicyNone, GC: GCConfig{Disabled: true, Streams: 2}})
	defer e.Close()
	p := &e.placer
	p.mu.Lock()
	defer p.mu.Unlock()
	if ok, _ := p.openFreeLocked(true); !ok {
		t.Fatal("GC could not open a zone")
	}
	gcZone := p.open[len(p.open)-1]
	for _, orphans := range []bool{false, true} {
		if z := p.lruLocked(orphans, false, false); z != nil {
			t.Errorf("a writer sharing a zone (orphans %v) got zone %d (GC's: %v)", orphans, z.idx, z.forGC)
		}
	}
	if z := p.lruLocked(false, true, true); z != gcZone {
		t.Errorf("GC sharing a zone got %v; want its own %d", z, gcZone.idx)
	}
	// Its last resort, once GC reclaimed nothing, is GC's zone: better
	// than ENOSPC for data that fits (TestCacheLargerThanFreeSpace-
	// StillOverwrites and TestOverwritesNeverENOSPC/97% failed so).
	if z := p.lruLocked(false, false, true); z != gcZone {
		t.Errorf("a writer's last resort got %v; want GC's zone %d", z, gcZone.idx)
	}
}

// The engine chooses a second GC stream by itself only on a device with
// minZonesForGCStreams data zones or more; asked for, a small device
// gets it where its zones allow the reserve.
func TestGCStreamsOnlyOnLargeDevicesByDefault(t *testing.T) {
	for _, tc := range []struct {
		zones, asked, want int
	}{
		{16, 0, 1},
		{16, 2, 2},
		{minZonesForGCStreams + 4, 0, 2},
	} {
		e := formatOpen(t, emuDevice(t, tc.zones, "256K", ""), Config{CacheBytes: 4 << 20, GC: GCConfig{Disabled: true, Streams: tc.asked}})
		if got := e.GCConfig(); got.Streams != tc.want || got.Reserve != 2+tc.want-1 {
			t.Errorf("%d zones, %d streams asked: %d streams, reserve %d; want %d streams, reserve %d", tc.zones, tc.asked, got.Streams, got.Reserve, tc.want, 2+tc.want-1)
		}
		e.Close()
	}
}
