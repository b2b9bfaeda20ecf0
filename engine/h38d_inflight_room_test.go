package engine

import (
	"bytes"
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/zonefold/zonefold/zns"
)

// h38dRoom is the most bytes of writes roomFor admits now (a block
// multiple), -1 if none.
func h38dRoom(e *Engine) int64 {
	if !e.roomFor(0) {
		return -1
	}
	lo, hi := int64(0), e.Capacity()/BlockSize
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if e.roomFor(mid * BlockSize) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo * BlockSize
}

// h38dHoldLanded makes the completer stop at the first data record of
// the file whose id is in target, once it has landed and before it is
// mapped: the flush it belongs to is in flight, its data placed (out of
// placer.space) and still dirty in the cache. held receives the record's
// data bytes; the completer goes on when release is closed.
func h38dHoldLanded(t *testing.T, target *atomic.Uint64) (held chan int64, release chan struct{}) {
	held = make(chan int64, 1)
	release = make(chan struct{})
	var once sync.Once
	testHookMapRecord = func(_ *Engine, op *recordOp, mapped bool) {
		if id := target.Load(); id == 0 || op.f == nil || op.f.id != id || op.gc != nil || mapped {
			return
		}
		once.Do(func() { held <- int64(op.hdr.DataLen); <-release })
	}
	t.Cleanup(func() { testHookMapRecord = nil })
	return held, release
}

// TestH38dInFlightFlushKeepsItsRetryRoom pins what admission counts
// while a flush is in flight: its records' room left placer.space when
// they were placed, and their bytes stay in cache.DirtyBytes until the
// flush ends (EndWriteback), so roomFor counts them twice, and a write
// of the room there was before the flush fits only once it has ended.
//
// That second count is kept on purpose: a failed flush leaves every byte
// it carried dirty, those whose records landed too
// (TestH36bFailedFlushRewritesLandedRecords), and the landed copies stay
// valid until the retry lands, so until the flush ends any of its bytes
// may need room a second time, and the only moment admission can keep
// that room is before the failure. Counted once,
// TestH38dFailedFlushFindsRoomForItsRewrite fails (a's retry: ENOSPC).
// Counting once needs a failed flush to leave dirty only what did not
// land (an error per record, not per flush, in EndWriteback); roomFor
// could then subtract the placed bytes of records in flight, kept by the
// cache per block so that a truncate or a remove of blocks in flight,
// and a record's failure, move them back exactly. This test then changes
// with it.
func TestH38dInFlightFlushKeepsItsRetryRoom(t *testing.T) {
	var target atomic.Uint64
	held, release := h38dHoldLanded(t, &target)
	cfg := Config{CacheBytes: 8 << 20, DirtyLimit: 4 << 20, FinishTail: -1}
	cfg.GC.Disabled = true
	e := formatOpen(t, emuDevice(t, 16, "1M", ""), cfg)
	defer e.Close()
	a := mustCreate(t, e, "a")
	data := bytes.Repeat([]byte{'a'}, 512<<10)
	if _, err := a.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	before := h38dRoom(e)
	target.Store(a.f.id)
	synced := make(chan error, 1)
	go func() { synced <- a.Sync() }()
	landed := <-held
	during := h38dRoom(e)
	dirty, space := e.cache.DirtyBytes(), e.placer.space()
	close(release)
	if err := <-synced; err != nil {
		t.Fatal(err)
	}
	after := h38dRoom(e)
	t.Logf("room before the flush %d, while in flight %d (a record of %d bytes landed; dirty %d, space %d), after %d",
		before, during, landed, dirty, space, after)
	// Placed, each record took its header block too: a few blocks.
	slack := int64(8 * BlockSize)
	if during > before-int64(len(data))+slack {
		t.Fatalf("while a's flush of %d bytes was in flight roomFor admitted %d bytes, %d before it: the room its retry needs after a failure was not held",
			len(data), during, before)
	}
	if after < before-slack {
		t.Fatalf("after a's flush of %d bytes ended roomFor admitted %d bytes, %d before it: the room held for its retry did not come back",
			len(data), after, before)
	}
}

// h38dLateFail is a device whose armed append (the n-th from when
// arm is called) lands but completes, with EIO, only once gate closes:
// a record whose completion fails after its flush's earlier records
// have landed and been mapped.
type h38dLateFail struct {
	zns.Device
	left atomic.Int32 // appends until the one to fail, 0: disarmed
	gate chan struct{}
	zone atomic.Int32 // the failed append's zone
}

func (d *h38dLateFail) Append(zone int, bufs [][]byte, c zns.AppendCompletion) error {
	if d.left.Load() > 0 && d.left.Add(-1) == 0 {
		d.zone.Store(int32(zone))
		return d.Device.Append(zone, bufs, h38dLate{c, d.gate, syscall.EIO})
	}
	return d.Device.Append(zone, bufs, c)
}

// h38dLate is an append's completion c held until gate closes, then
// given with fail joined to the append's own error (fail nil: as it
// came).
type h38dLate struct {
	c    zns.AppendCompletion
	gate chan struct{}
	fail error
}

// Appended runs on the reaper, which must not block.
func (l h38dLate) Appended(off int64, err error) {
	go func() {
		<-l.gate
		l.c.Appended(off, errors.Join(err, l.fail))
	}()
}

// TestH38dFailedFlushFindsRoomForItsRewrite: a flush whose first record
// landed (mapped, valid) and whose second completes with an error leaves
// all its bytes dirty (TestH36bFailedFlushRewritesLandedRecords): the
// retry appends them all again, while the landed copy stays valid until
// the retry lands. A write admitted while the flush was in flight, of
// all the room admission had then, must still be written once the flush
// has failed, and so must the retry: no fsync may fail for room.
// Admission keeps that room by counting the placed bytes of a flush in
// flight twice, placed and dirty, until the flush ends; counting them
// once (what TestH38dInFlightFlushKeepsItsRetryRoom pins as not so) admitted b into
// the room a's retry needed here, and an fsync failed with ENOSPC.
func TestH38dFailedFlushFindsRoomForItsRewrite(t *testing.T) {
	cfg := Config{CacheBytes: 8 << 20, DirtyLimit: 4 << 20, FinishTail: -1}
	cfg.GC.Disabled = true // only writers and writeback collect
	d := &h38dLateFail{gate: make(chan struct{})}
	e := formatOpenWith(t, emuDevice(t, 32, "256K", ""), cfg, func(dev zns.Device) zns.Device {
		d.Device = dev
		return d
	})
	defer e.Close()
	// Fill all but 6 zones with a file that stays, a record filling
	// each zone: no garbage a GC pass could reclaim for a retry.
	rec := e.maxRecordData()
	if rec+BlockSize != e.geo.ZoneCap {
		t.Fatalf("records of %d bytes in zones of %d: the test wants one record a zone", rec, e.geo.ZoneCap)
	}
	c := mustCreate(t, e, "c")
	chunk := bytes.Repeat([]byte{'c'}, int(rec))
	for off := int64(0); e.placer.space() > 6*e.geo.ZoneCap; off += rec {
		if _, err := c.WriteAt(chunk, off); err != nil {
			t.Fatal(err)
		}
		if err := c.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	b := mustCreate(t, e, "b") // now: a create waits for appends in flight
	// a's two records fill a zone each.
	a := mustCreate(t, e, "a")
	data := bytes.Repeat([]byte{'a'}, 2*int(rec))
	if _, err := a.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	before := h38dRoom(e)
	d.left.Store(2) // a's second record
	synced := make(chan error, 1)
	go func() { synced <- a.Sync() }()
	// a's first record lands and is mapped; its flush waits for the second.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var mapped int64
		a.f.mu.RLock()
		a.f.ext.each(func(x extent) bool { mapped += x.len; return true })
		a.f.mu.RUnlock()
		if mapped == rec {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a's first record not mapped after 30s (%d bytes mapped)", mapped)
		}
		time.Sleep(time.Millisecond)
	}
	room := h38dRoom(e)
	t.Logf("room %d before a's flush; a's first record (%d bytes) landed, its flush in flight: room %d", before, rec, room)
	if room <= 0 {
		t.Fatalf("no room while a's flush is in flight (%s): the test wants some", e.spaceReport())
	}
	// Admitted at once (the room is there: no flush, no GC pass), and
	// in the cache before a's flush ends. Less a block for b's header
	// charge (writeCharge).
	bdata := bytes.Repeat([]byte{'b'}, int(room-BlockSize))
	if _, err := b.WriteAt(bdata, 0); err != nil {
		t.Fatalf("write of the %d bytes roomFor said fit: %v", len(bdata), err)
	}
	close(d.gate)
	if err := <-synced; err == nil {
		t.Fatal("a's flush with its second append failing succeeded")
	}
	t.Logf("a's flush failed (zone %d); %s", d.zone.Load(), e.spaceReport())
	// b first: writeback may take the files in either order, and b's
	// writeback must leave the room a's retry needs (a's landed copy
	// becomes garbage only once the retry lands).
	if err := b.Sync(); err != nil {
		t.Fatalf("b, admitted while a's flush was in flight: %v", err)
	}
	if err := a.Sync(); err != nil {
		t.Fatalf("a's retry after the failed flush: %v", err)
	}
	if got := readAll(t, e, "a"); !bytes.Equal(got, data) {
		t.Fatalf("a reads back %d bytes, not its %d", len(got), len(data))
	}
	if got := readAll(t, e, "b"); !bytes.Equal(got, bdata) {
		t.Fatalf("b reads back %d bytes, not its %d", len(got), len(bdata))
	}
}
