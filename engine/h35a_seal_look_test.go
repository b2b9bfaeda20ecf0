package engine

import (
	"bytes"
	"fmt"
	"sync/atomic"
	"testing"
)

// TestH35aSealLookKeepsRoomPlaceable: a writer's GC pass that finds no
// full zone worth collecting looks at the idle open zones (sealIdle). A
// zone it then finds not worth collecting must stay where placement
// finds it the whole time: its room is part of what admission promised
// to dirty data, and writeback of that data, short of room, takes it in
// the end whatever zone it is (shareGC). Sealed first and only then
// looked at (its headers read back, then given back unsealed), the zone
// was out of placement for the walk: on a full device, writeback that
// looked for room then found none after its own passes had failed and
// returned ENOSPC for admitted data. Its records that had landed stayed
// dirty too, counted twice, so the room stayed short: the churn of
// TestH25cFullDeviceChurnUnderZoneLimits (cap-3-4) failed Engine.Sync so
// in CI under -race ("place 65536 bytes of file 245: no space left on
// device") and then filled 0 bytes, the walks of other writers' passes
// sealing the last open zone with room again and again.
//
// Here one data zone may be open (OpenZones 1), the free zones are GC's
// reserve, and the open zone z holds records of five files and no
// garbage but their headers: worth a look (five headers are minGCGain
// and more), never a collection. b's writes take all the room admission
// allows (but a record's worth, for the probe). While an urgent pass
// walks z, a reservation as writeback's last resort makes must find room
// (in z); b's fsync must then succeed.
func TestH35aSealLookKeepsRoomPlaceable(t *testing.T) {
	cfg := Config{CacheBytes: 8 << 20, DirtyLimit: 4 << 20, OpenZones: 1, FinishTail: -1}
	cfg.GC.Disabled = true
	e := formatOpen(t, emuDevice(t, 12, "256K", ""), cfg)
	defer e.Close()
	if e.placer.budget != 1 {
		t.Fatalf("data budget %d, want 1", e.placer.budget)
	}
	// "fill": synced 64 KiB records until only GC's reserve is free and
	// its zone, z, is half full at most.
	fill := mustCreate(t, e, "fill")
	chunk := bytes.Repeat([]byte{'f'}, 64<<10)
	var off int64
	for {
		if _, err := fill.WriteAt(chunk, off); err != nil {
			t.Fatalf("fill at %d: %v", off, err)
		}
		if err := fill.Sync(); err != nil {
			t.Fatalf("fill's fsync at %d: %v", off, err)
		}
		off += int64(len(chunk))
		z := fill.f.mru.Load()
		if e.placer.freeCount() <= e.cfg.GC.Reserve && z != nil && z.remaining() <= e.geo.ZoneCap/2 {
			break
		}
	}
	z := fill.f.mru.Load()
	// Four more files, a block each, synced into z.
	for i := range 4 {
		s := mustCreate(t, e, fmt.Sprintf("s%d", i))
		if _, err := s.WriteAt(bytes.Repeat([]byte{'s'}, BlockSize), 0); err != nil {
			t.Fatal(err)
		}
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		if sz := fileZone(t, e, s); sz != z {
			t.Fatalf("s%d went to zone %d, not z (%d)", i, sz.idx, z.idx)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := fill.Close(); err != nil {
		t.Fatal(err)
	}
	if z.state.Load() != zoneOpen || z.alloc.Load()-z.valid.Load() < minGCGain {
		t.Fatalf("z (zone %d): state %d, alloc %d, valid %d: not an idle zone worth a look", z.idx, z.state.Load(), z.alloc.Load(), z.valid.Load())
	}
	// "b": unsynced 4 KiB writes until admission would refuse one, but
	// for a record's worth kept for the probe.
	b := mustCreate(t, e, "b")
	block := bytes.Repeat([]byte{'b'}, BlockSize)
	var boff int64
	for e.roomFor(writeCharge(boff, BlockSize) + minRecord) {
		if _, err := b.WriteAt(block, boff); err != nil {
			t.Fatalf("b at %d: %v", boff, err)
		}
		boff += BlockSize
	}
	if boff == 0 {
		t.Fatal("admission took no write of b: the test wants room promised")
	}
	t.Logf("fill %d bytes; z (zone %d) alloc %d valid %d; b %d bytes dirty; free zones %d, space %d",
		off, z.idx, z.alloc.Load(), z.valid.Load(), boff, e.placer.freeCount(), e.placer.space())

	// The probe: while GC walks z, a reservation made as writeback's
	// last resort (shareGC) must find room. What it takes it fills with
	// a pad, as a reservation nobody appends would never drain.
	var walked atomic.Int32
	var probeErr error
	var probeZone *zone
	var probeMRU atomic.Pointer[zone]
	spaceBefore := e.placer.space()
	var spaceDuring int64
	testHookGCWalk = func(e *Engine, w *zone) {
		if w != z || walked.Add(1) != 1 {
			return
		}
		spaceDuring = e.placer.space()
		e.quiesce.RLock()
		defer e.quiesce.RUnlock()
		g, err := e.placer.reserveData(&probeMRU, nil, minRecord, false, shareGC)
		if g.padZone != nil {
			e.appendPad(g.padZone, g.padOff, nil)
		}
		if err != nil {
			probeErr = err
		} else {
			probeZone = g.z
			e.appendFiller(g.z, g.n, nil)
		}
		_ = e.ring.Flush()
	}
	defer func() { testHookGCWalk = nil }()
	e.gc.mu.Lock()
	_, err := e.gc.sealIdle(minGCGain)
	e.gc.mu.Unlock()
	testHookGCWalk = nil
	if err != nil {
		t.Fatalf("sealIdle: %v", err)
	}
	if walked.Load() == 0 {
		t.Fatalf("GC never walked z (zone %d): the test tested nothing", z.idx)
	}
	if probeErr != nil {
		t.Errorf("while GC walked an idle open zone (zone %d, %d bytes left), writeback's last-resort reservation found no room: %v (space %d before, %d during the walk)",
			z.idx, z.remaining(), probeErr, spaceBefore, spaceDuring)
	} else if spaceDuring != spaceBefore {
		t.Errorf("while GC walked zone %d, the space admission counts went from %d to %d", z.idx, spaceBefore, spaceDuring)
	} else {
		t.Logf("probe placed in zone %d", probeZone.idx)
	}
	if st := z.state.Load(); st != zoneOpen {
		t.Errorf("z (zone %d) is in state %d after the pass, not open", z.idx, st)
	}
	// What admission accepted fits at the fsync.
	if err := b.Sync(); err != nil {
		st := e.Stats()
		t.Fatalf("fsync of b's %d bytes admission accepted: %v; free zones %d, dirty %d, gc resets %d sealed %d",
			boff, err, st.FreeZones, st.DirtyBytes, st.GCResets, st.GCSealed)
	}
	if got := readAll(t, e, "b"); !bytes.Equal(got, bytes.Repeat([]byte{'b'}, int(boff))) {
		t.Fatalf("b reads back %d bytes, want %d of b", len(got), boff)
	}
}
