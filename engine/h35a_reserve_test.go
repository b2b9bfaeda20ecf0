package engine

import (
	"bytes"
	"testing"
)

// TestH35aBorrowedReserveIsNotPromised: GC opens zones from its reserve
// for its copies, and while it has (fewer than GC.Reserve zones free),
// the room left in them is the reserve's: GC's next copies fill it, and
// the resets of their victims refill the reserve before they give the
// clients anything. Counted as free space (placer.space held back only
// the reserve zones still free), it was promised to admitted writes, and
// a GC pass after the admission took it back: on a full device the
// writer's fsync, with nothing else writing, found too little room for
// the data admission had accepted. TestH25cFullDeviceChurnUnderZoneLimits
// (cap-3-4) failed Engine.Sync so under -race ("place 98304 bytes of
// file 239: no space left on device", then "filled 0 bytes"): the
// background collector's passes, copying while the reserve was out,
// turned 49152 bytes admission had counted into reserve again.
//
// Here GC has taken a zone of its reserve (its stream's zone, as its
// copies would), then b writes all admission allows, then a GC pass
// collects the one zone with garbage (fill's first records, written
// over) into that zone, and its reset refills the reserve: b's fsync
// must succeed, and b read back whole.
func TestH35aBorrowedReserveIsNotPromised(t *testing.T) {
	cfg := Config{CacheBytes: 8 << 20, DirtyLimit: 4 << 20, OpenZones: 1, FinishTail: -1}
	cfg.GC.Disabled = true
	e := formatOpen(t, emuDevice(t, 12, "256K", ""), cfg)
	defer e.Close()
	// "fill": synced 64 KiB records until only GC's reserve is free and
	// its zone is half full at most; its first 128 KiB written again
	// early on, so that the first zone is half garbage.
	fill := mustCreate(t, e, "fill")
	chunk := bytes.Repeat([]byte{'f'}, 64<<10)
	var off int64
	write := func(at int64) {
		t.Helper()
		if _, err := fill.WriteAt(chunk, at); err != nil {
			t.Fatalf("fill at %d: %v", at, err)
		}
		if err := fill.Sync(); err != nil {
			t.Fatalf("fill's fsync at %d: %v", at, err)
		}
	}
	for {
		write(off)
		off += int64(len(chunk))
		if off == 6*int64(len(chunk)) {
			write(0)
			write(int64(len(chunk)))
		}
		z := fill.f.mru.Load()
		if e.placer.freeCount() <= e.cfg.GC.Reserve && z != nil && z.remaining() <= e.geo.ZoneCap/2 {
			break
		}
	}
	if err := fill.Close(); err != nil {
		t.Fatal(err)
	}
	before := e.placer.space()
	gz := gcTakesReserveZone(t, e)
	t.Logf("fill %d bytes; GC's zone %d has %d left; free zones %d; space %d before, %d after", off, gz.idx, gz.remaining(), e.placer.freeCount(), before, e.placer.space())
	// "b": unsynced 4 KiB writes until admission would refuse one.
	b, boff := fillBUntilRefused(t, e)
	// A pass collects the zone of garbage into GC's zone; its reset
	// goes back to the reserve.
	collectThenSyncB(t, e, gz, b, boff, "fill's first zone")
}

// gcTakesReserveZone has GC take a zone of its reserve for its stream,
// as a pass's copies do (the reservation it makes there is filled with a
// pad), and returns that zone once nothing writes to it; it fails the
// test unless the reserve is then short of whole.
func gcTakesReserveZone(t *testing.T, e *Engine) *zone {
	t.Helper()
	e.gc.mu.Lock()
	e.quiesce.RLock()
	g, err := e.placer.reserve(&e.gc.streams[coldStream], minRecord, true)
	if err == nil {
		e.appendFiller(g.z, g.n, nil)
	}
	e.quiesce.RUnlock()
	_ = e.ring.Flush()
	e.gc.mu.Unlock()
	if err != nil {
		t.Fatalf("GC's reservation in its reserve: %v", err)
	}
	gz := g.z
	e.waitUntil(func() bool { return gz.writers.Load() == 0 })
	if n := e.placer.freeCount(); n >= e.cfg.GC.Reserve {
		t.Fatalf("%d zones free after GC took one (reserve %d): the test wants the reserve taken", n, e.cfg.GC.Reserve)
	}
	return gz
}

// collectThenSyncB runs a GC pass, which must collect victim (what the
// test made garbage), then checks that b's boff bytes of 'b', which
// admission accepted while GC held zone gz of its reserve, sync and
// read back whole.
func collectThenSyncB(t *testing.T, e *Engine, gz *zone, b *File, boff int64, victim string) {
	t.Helper()
	moved, err := e.gc.pass(gcBackground)
	if err != nil || !moved {
		t.Fatalf("GC pass: moved %v, %v: the test wants %s collected", moved, err, victim)
	}
	st := e.Stats()
	t.Logf("b wrote %d bytes; after GC (resets %d): free zones %d, GC's zone %d left, space %d, dirty %d", boff, st.GCResets, st.FreeZones, gz.remaining(), e.placer.space(), e.cache.DirtyBytes())
	if err := b.Sync(); err != nil {
		st := e.Stats()
		t.Fatalf("fsync of b's %d bytes admission accepted: %v; free zones %d, dirty %d, gc resets %d", boff, err, st.FreeZones, st.DirtyBytes, st.GCResets)
	}
	if got := readAll(t, e, "b"); !bytes.Equal(got, bytes.Repeat([]byte{'b'}, int(boff))) {
		t.Fatalf("b reads back %d bytes, want %d of b", len(got), boff)
	}
}

// fillBUntilRefused creates "b" and writes it, unsynced, a 4 KiB block
// of 'b' at a time, until admission would refuse the next; it returns
// the file and the bytes written.
func fillBUntilRefused(t *testing.T, e *Engine) (*File, int64) {
	t.Helper()
	b := mustCreate(t, e, "b")
	block := bytes.Repeat([]byte{'b'}, BlockSize)
	var boff int64
	for e.roomFor(writeCharge(boff, BlockSize)) {
		if _, err := b.WriteAt(block, boff); err != nil {
			t.Fatalf("b at %d: %v", boff, err)
		}
		boff += BlockSize
	}
	return b, boff
}
