package engine

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// stamp fills p with a pattern naming the file, offset and generation, so
// that a misplaced or stale block cannot pass for the right one.
func stamp(p []byte, file int, off int64, gen uint32) {
	for i := 0; i+16 <= len(p); i += 16 {
		binary.LittleEndian.PutUint32(p[i:], uint32(file))
		binary.LittleEndian.PutUint64(p[i+4:], uint64(off)+uint64(i))
		binary.LittleEndian.PutUint32(p[i+12:], gen)
	}
}

// overwrite writes random blocks of files until written bytes reach
// passes times the device's capacity, and returns each block's generation.
func overwrite(t *testing.T, e *Engine, files int, fileSize int64, bs int, passes float64, seed uint64) [][]uint32 {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 5))
	gens := make([][]uint32, files)
	handles := make([]*File, files)
	buf := make([]byte, bs)
	for i := range files {
		gens[i] = make([]uint32, fileSize/int64(bs))
		var err error
		if handles[i], err = e.Create(string(rune('a' + i))); err != nil {
			t.Fatal(err)
		}
		for b := range gens[i] { // fill
			gens[i][b] = 1
			stamp(buf, i, int64(b)*int64(bs), 1)
			if _, err := handles[i].WriteAt(buf, int64(b)*int64(bs)); err != nil {
				t.Fatalf("fill: %v", err)
			}
		}
	}
	total := int64(passes * float64(e.Capacity()))
	for written := int64(0); written < total; written += int64(bs) {
		i := rng.IntN(files)
		b := rng.IntN(len(gens[i]))
		gens[i][b]++
		stamp(buf, i, int64(b)*int64(bs), gens[i][b])
		if _, err := handles[i].WriteAt(buf, int64(b)*int64(bs)); err != nil {
			t.Fatalf("overwrite after %d bytes: %v", written, err)
		}
	}
	return gens
}

func verifyStamps(t *testing.T, e *Engine, gens [][]uint32, bs int) {
	t.Helper()
	want := make([]byte, bs)
	got := make([]byte, bs)
	for i, g := range gens {
		f, err := e.Open(string(rune('a' + i)))
		if err != nil {
			t.Fatal(err)
		}
		for b, gen := range g {
			stamp(want, i, int64(b)*int64(bs), gen)
			if _, err := f.ReadAt(got, int64(b)*int64(bs)); err != nil {
				t.Fatalf("read file %d block %d: %v", i, b, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("file %d block %d: got generation %d, want %d", i, b,
					binary.LittleEndian.Uint32(got[12:]), gen)
			}
		}
	}
}

// checkValidCounts compares every zone's valid-byte counter with what the
// extent maps say, and the placer's lock-free free-space counters with
// its zones.
func checkValidCounts(t *testing.T, e *Engine) {
	t.Helper()
	// Background GC moves valid bytes and frees zones; hold it off so the
	// counters and the recount see the same state.
	e.gc.mu.Lock()
	defer e.gc.mu.Unlock()
	unalloc, nfree := e.placer.unalloc.Load(), e.placer.nfree.Load()
	e.placer.recount()
	if u, n := e.placer.unalloc.Load(), e.placer.nfree.Load(); u != unalloc || n != nfree {
		t.Errorf("placer counted %d unreserved bytes in %d free zones; its zones say %d in %d", unalloc, nfree, u, n)
	}
	counted := map[int]int64{}
	for _, z := range e.ZoneValidity() {
		counted[z.Zone] = z.Valid
	}
	e.nsMu.RLock()
	e.recountValid()
	e.nsMu.RUnlock()
	for _, z := range e.ZoneValidity() {
		if counted[z.Zone] != z.Valid {
			t.Errorf("zone %d: valid counter %d, extent maps %d", z.Zone, counted[z.Zone], z.Valid)
		}
		if z.Valid < 0 || z.Valid > z.Cap {
			t.Errorf("zone %d: %d valid bytes of %d", z.Zone, z.Valid, z.Cap)
		}
	}
}

func TestGCReclaimsUnderOverwrites(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy Policy
		gc     GCPolicy
	}{
		{"mru-greedy", PolicyMRU, GCGreedy},
		{"none-costbenefit", PolicyNone, GCCostBenefit},
		{"roundrobin-greedy", PolicyRoundRobin, GCGreedy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			devName := emuDevice(t, 40, "1M", "")
			cfg := Config{CacheBytes: 4 << 20, Policy: tc.policy, GC: GCConfig{Policy: tc.gc}}
			e := formatOpen(t, devName, cfg)
			// 8 files of 3 MiB: about 63% of the 38 data zones, written
			// three device capacities over.
			gens := overwrite(t, e, 8, 3<<20, 8192, 2, 1)
			if err := e.Sync(t.Context()); err != nil {
				t.Fatal(err)
			}
			st := e.Stats()
			if st.GCResets == 0 || st.GCWritten == 0 {
				t.Fatalf("GC never ran: %+v", st)
			}
			if st.WAF() <= 1 {
				t.Fatalf("WAF %.3f with GC relocating %d bytes", st.WAF(), st.GCWritten)
			}
			checkValidCounts(t, e)
			verifyStamps(t, e, gens, 8192)
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			checkFsck(t, devName)
			// And after recovery.
			e = reopen(t, devName, cfg)
			defer e.Close()
			checkValidCounts(t, e)
			verifyStamps(t, e, gens, 8192)
		})
	}
}

// A truncate that lands between GC reading a file's pieces and writing
// them out must not be undone by the GC record: replayed after the
// truncate, it would map the cut bytes again, and they would show in the
// hole when the file grows past them.
func TestGCRecordNeverResurrectsTruncatedBytes(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	cfg.GC.Disabled = true
	e := formatOpen(t, devName, cfg)
	h := createSynced(t, e, "a", bytes.Repeat([]byte{0xaa}, 128<<10))
	victim := h.f.mru.Load()
	pieces, gain, err := e.gc.gather(victim, victim.cap, minGCGain)
	if err != nil || !gain || len(pieces) == 0 {
		t.Fatalf("gather: %d pieces, gain %v, %v", len(pieces), gain, err)
	}
	const cut, end = 10000, 200 << 10
	if err := h.Truncate(cut); err != nil {
		t.Fatal(err)
	}
	if _, err := h.WriteAt([]byte{1}, end); err != nil {
		t.Fatal(err)
	}
	if err := h.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := e.gc.rewrite(victim, pieces); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, end+1)
	copy(want, bytes.Repeat([]byte{0xaa}, cut))
	want[end] = 1
	if got := readAll(t, e, "a"); !bytes.Equal(got, want) {
		t.Fatal("a differs before the crash")
	}
	e.crashForTest()
	emu := emuOf(t, e)
	if err := emu.PowerCut(); err != nil {
		t.Fatal(err)
	}
	emu.Close()
	e = reopen(t, devName, cfg)
	defer e.Close()
	got := readAll(t, e, "a")
	if i := firstDiff(got, want); i >= 0 {
		t.Fatalf("after recovery a differs at byte %d (%d bytes, want %d): %#x, want %#x", i, len(got), len(want), got[min(i, len(got)-1)], want[min(i, len(want)-1)])
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// A truncate whose log record never became durable, while the record
// that zeroes its last block's tail did (another file's fsync flushed
// it), must not come back half done: recovery takes the file's size from
// that record, and must then not map the bytes past it either, which the
// file growing again would show.
func TestHalfDoneTruncateLeavesNoOldBytes(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	cfg.GC.Disabled = true
	e := formatOpen(t, devName, cfg)
	h := createSynced(t, e, "a", bytes.Repeat([]byte{0xaa}, 128<<10))
	const cut, end = 10000, 200 << 10
	emu := emuOf(t, e)
	// The tail's record (a data write) goes through; the truncate's log
	// record fails, and so does the checkpoint of the metadata half
	// switch that would log it again (writeOp).
	armMetaFaults(t, metaWriteFail, metaWriteFail)
	if err := h.Truncate(cut); err == nil {
		t.Fatal("truncate succeeded although its log write failed")
	}
	if err := e.dev.Flush(); err != nil {
		t.Fatal(err)
	}
	e.crashForTest()
	if err := emu.PowerCut(); err != nil {
		t.Fatal(err)
	}
	emu.Close()
	e = reopen(t, devName, cfg)
	defer e.Close()
	h, err := e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	size := h.Size()
	if size != cut && size != 128<<10 {
		t.Fatalf("a has %d bytes after the power cut: want %d or %d", size, cut, 128<<10)
	}
	if _, err := h.WriteAt([]byte{1}, end); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, end+1)
	copy(want, bytes.Repeat([]byte{0xaa}, int(size)))
	want[end] = 1
	if i := firstDiff(readAll(t, e, "a"), want); i >= 0 {
		t.Fatalf("a (%d bytes after recovery, then grown) differs at byte %d", size, i)
	}
}

// TestGCRaceWithNamespaceChanges runs a whole GC pass of a full zone by
// hand, with a file change landing between its steps: after GC read the
// victim's pieces (before it writes the GC records), or after the GC
// records are durable (before the victim is logged reset and reset).
// The change is acknowledged (fsynced or logged) before the pass goes
// on; the files must then match the model, at once and after a power
// cut and recovery, and fsck must find nothing wrong. A GC record must
// neither bring back bytes the change cut (a truncate, a remove, a
// rename over the file) nor put old bytes over what the change wrote,
// and the reset must not take anything the change left mapped there.
func TestGCRaceWithNamespaceChanges(t *testing.T) {
	const aSize, bSize = 1536 << 10, 200 << 10
	type model map[string][]byte
	open := func(t *testing.T, e *Engine, name string) *File {
		t.Helper()
		h, err := e.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	sync := func(t *testing.T, h *File) {
		t.Helper()
		if err := h.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	writeAt := func(t *testing.T, e *Engine, m model, name string, p []byte, off int) {
		t.Helper()
		h := open(t, e, name)
		if _, err := h.WriteAt(p, int64(off)); err != nil {
			t.Fatal(err)
		}
		sync(t, h)
		if need := off + len(p); need > len(m[name]) {
			m[name] = append(m[name], make([]byte, need-len(m[name]))...)
		}
		copy(m[name][off:], p)
	}
	truncate := func(t *testing.T, e *Engine, m model, name string, size int) {
		t.Helper()
		if err := open(t, e, name).Truncate(int64(size)); err != nil {
			t.Fatal(err)
		}
		if size <= len(m[name]) {
			m[name] = m[name][:size]
		} else {
			m[name] = append(m[name], make([]byte, size-len(m[name]))...)
		}
	}
	cases := []struct {
		name   string
		change func(t *testing.T, e *Engine, m model)
	}{
		{"overwrite", func(t *testing.T, e *Engine, m model) {
			writeAt(t, e, m, "a", pattern(40<<10, 3), 8<<10)
		}},
		{"overwrite unaligned", func(t *testing.T, e *Engine, m model) {
			writeAt(t, e, m, "a", pattern(5000, 4), 70000)
		}},
		{"truncate and grow", func(t *testing.T, e *Engine, m model) {
			truncate(t, e, m, "a", 10000)
			writeAt(t, e, m, "a", []byte{1}, 1200<<10)
		}},
		{"truncate to zero and write", func(t *testing.T, e *Engine, m model) {
			truncate(t, e, m, "a", 0)
			writeAt(t, e, m, "a", pattern(64<<10, 5), 0)
		}},
		{"grow by truncate", func(t *testing.T, e *Engine, m model) {
			truncate(t, e, m, "a", 2<<20)
		}},
		{"remove and create", func(t *testing.T, e *Engine, m model) {
			if err := e.Remove("a"); err != nil {
				t.Fatal(err)
			}
			delete(m, "a")
			if _, err := e.Create("a"); err != nil {
				t.Fatal(err)
			}
			m["a"] = nil
			writeAt(t, e, m, "a", pattern(100<<10, 6), 0)
		}},
		{"rename over", func(t *testing.T, e *Engine, m model) {
			if err := e.Rename("b", "a"); err != nil {
				t.Fatal(err)
			}
			m["a"] = m["b"]
			delete(m, "b")
		}},
		{"overwrite and checkpoint", func(t *testing.T, e *Engine, m model) {
			writeAt(t, e, m, "a", pattern(24<<10, 7), 512<<10)
			if err := e.checkpoint(); err != nil {
				t.Fatal(err)
			}
		}},
	}
	check := func(t *testing.T, e *Engine, m model, when string) {
		t.Helper()
		var names []string
		for _, fi := range e.List() {
			names = append(names, fi.Name)
			if _, ok := m[fi.Name]; !ok {
				t.Errorf("%s: %s exists; the model has no such file", when, fi.Name)
			}
		}
		for name, want := range m {
			if _, err := e.Stat(name); err != nil {
				t.Errorf("%s: %s: %v (files %v)", when, name, err, names)
				continue
			}
			got := readAll(t, e, name)
			if i := firstDiff(got, want); i >= 0 {
				t.Errorf("%s: %s differs at byte %d (%d bytes, want %d)", when, name, i, len(got), len(want))
			}
		}
	}
	for _, at := range []string{"before rewrite", "before reset"} {
		for _, tc := range cases {
			t.Run(at+"/"+tc.name, func(t *testing.T) {
				devName := emuDevice(t, 16, "1M", "")
				cfg := smallConfig()
				cfg.GC.Disabled = true
				e := formatOpen(t, devName, cfg)
				m := model{"a": pattern(aSize, 1), "b": pattern(bSize, 2)}
				createSynced(t, e, "a", m["a"])
				createSynced(t, e, "b", m["b"])
				victim := e.zoneAt(devOf(t, e, "a", 0).dev)
				// Garbage in the victim, for the pass to gain space.
				writeAt(t, e, m, "a", pattern(512<<10, 9), 256<<10)
				if !victim.state.CompareAndSwap(zoneFull, zoneGC) {
					t.Fatalf("zone %d of a's first bytes is in state %v, not full", victim.idx, victim.state.Load())
				}
				pieces, gain, err := e.gc.gather(victim, victim.cap, minGCGain)
				if err != nil || !gain || len(pieces) == 0 {
					t.Fatalf("gather: %d pieces, gain %v, %v", len(pieces), gain, err)
				}
				if at == "before rewrite" {
					tc.change(t, e, m)
				}
				if err := e.gc.rewrite(victim, pieces); err != nil {
					t.Fatal(err)
				}
				if at == "before reset" {
					tc.change(t, e, m)
				}
				if ok, err := e.gc.reset(victim); !ok || err != nil {
					t.Fatalf("reset zone %d: %v, %v", victim.idx, ok, err)
				}
				check(t, e, m, "after the GC pass")
				checkValidCounts(t, e)
				e.crashForTest()
				emu := emuOf(t, e)
				if err := emu.PowerCut(); err != nil {
					t.Fatal(err)
				}
				emu.Close()
				e = reopen(t, devName, cfg)
				check(t, e, m, "after recovery")
				checkValidCounts(t, e)
				if err := e.Close(); err != nil {
					t.Fatal(err)
				}
				checkFsck(t, devName)
			})
		}
	}
}

// TestGCCountsCopiedVictims: a victim whose valid data GC relocates
// counts in GCCopied; a zone that held only garbage is reset without
// counting there (bench gc tells the two apart with it).
func TestGCCountsCopiedVictims(t *testing.T) {
	cfg := smallConfig()
	cfg.GC.Disabled = true
	e := formatOpen(t, emuDevice(t, 16, "256K", ""), cfg)
	defer e.Close()
	write := func(name string, n int) *File {
		t.Helper()
		h, err := e.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.WriteAt(bytes.Repeat([]byte(name), n), 0); err != nil {
			t.Fatal(err)
		}
		if err := h.Sync(); err != nil {
			t.Fatal(err)
		}
		return h
	}
	b := write("b", 600<<10)
	a := write("a", 600<<10)
	// Half of b's first zone becomes garbage: the least valid full zone.
	if _, err := b.WriteAt(bytes.Repeat([]byte("B"), 128<<10), 0); err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	if !e.gc.reclaim(nil, minGCGain) {
		t.Fatal("GC pass reclaimed nothing")
	}
	if st := e.Stats(); st.GCResets != 1 || st.GCCopied != 1 || st.GCWritten == 0 {
		t.Fatalf("after collecting a half-valid zone: %d resets, %d copied, %d bytes relocated; want 1, 1, some", st.GCResets, st.GCCopied, st.GCWritten)
	}
	a.Close() // a removed file's data stays while it is open
	if err := e.Remove("a"); err != nil {
		t.Fatal(err)
	}
	// The pass resets all of a's full zones at once, copying nothing.
	empty := int64(len(emptyFullZones(e)))
	if empty == 0 {
		t.Fatal("no empty full zone after the remove")
	}
	if !e.gc.reclaim(nil, minGCGain) {
		t.Fatal("GC pass reclaimed nothing after a remove")
	}
	if st := e.Stats(); st.GCResets != 1+empty || st.GCCopied != 1 {
		t.Fatalf("after collecting a removed file's zones: %d resets, %d copied; want %d, 1", st.GCResets, st.GCCopied, 1+empty)
	}
	checkValidCounts(t, e)
}
