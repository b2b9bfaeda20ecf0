package engine

import (
	"bytes"
	"runtime"
	"testing"
	"time"

	"github.com/zonefold/zonefold/cache"
)

// plugTestConfig: no background writeback or GC, so that the test alone
// decides what is appended when; three zones open at most.
func plugTestConfig() Config {
	cfg := smallConfig()
	cfg.OpenZones = 3
	cfg.GC.Disabled = true
	cfg.Writeback.Background = 1 << 30
	cfg.Writeback.Expire = time.Hour
	return cfg
}

// writeSync writes n bytes at off and syncs them.
func writeSync(t *testing.T, h *File, off, n int64) {
	t.Helper()
	if _, err := h.WriteAt(bytes.Repeat([]byte{byte(off/BlockSize) + 1}, int(n)), off); err != nil {
		t.Fatal(err)
	}
	if err := h.Sync(); err != nil {
		t.Fatal(err)
	}
}

// fileWithShortTail creates a file whose zone is full to one block short
// of its capacity, a tail no record fits: the file's next record pads it,
// and the zone drains only once that pad lands. It returns the file, the
// zone and the file's size.
func fileWithShortTail(t *testing.T, e *Engine, name string) (*File, *zone, int64) {
	t.Helper()
	h, err := e.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	// Records that leave three blocks, then a one-block record (header
	// and data), which leaves one.
	writeSync(t, h, 0, BlockSize)
	off := int64(BlockSize)
	z := h.f.mru.Load()
	if z == nil {
		t.Fatal("the file has no zone")
	}
	for z.remaining() > 3*BlockSize {
		n := min(z.remaining()-4*BlockSize, e.maxRecordData())
		writeSync(t, h, off, n)
		off += n
	}
	writeSync(t, h, off, BlockSize)
	off += BlockSize
	if z.remaining() != BlockSize || h.f.mru.Load() != z {
		t.Fatalf("zone %d has %d bytes left; want the file's zone with one block", z.idx, z.remaining())
	}
	return h, z, off
}

// shortTailEngine is an engine for the plug tests: file a's zone z has a
// one-block tail and aOff is a's size; file b exists, empty.
func shortTailEngine(t *testing.T) (e *Engine, a *File, z *zone, aOff int64, b *File) {
	t.Helper()
	e = formatOpen(t, emuDevice(t, 8, "256K", ""), plugTestConfig())
	t.Cleanup(func() { e.Close() })
	a, z, aOff = fileWithShortTail(t, e, "a")
	b, err := e.Create("b")
	if err != nil {
		t.Fatal(err)
	}
	return e, a, z, aOff, b
}

// holdAndWaitForDrain starts a goroutine that takes a lock (lock, unlock)
// and, holding it, waits for z to drain the way placement does (submit
// what the ring holds, then park until a zone's last append lands). It
// returns once that goroutine is parked; the channel closes when z has
// drained and the lock is released.
func holdAndWaitForDrain(t *testing.T, e *Engine, z *zone, lock, unlock func()) chan struct{} {
	t.Helper()
	drained := make(chan struct{})
	go func() {
		lock()
		defer close(drained)
		defer unlock()
		e.waitUntil(func() bool { return z.remaining() == 0 && z.writers.Load() == 0 })
	}()
	if !parkedIn(t, "engine.holdAndWaitForDrain.func", "engine.(*Engine).waitUntil") {
		t.FailNow()
	}
	return drained
}

// waitDrained waits, with a no-progress window, for drained to close; if
// it does not, it fails the test with every goroutine's stack and submits
// what the ring holds, which unwinds the hang.
func waitDrained(t *testing.T, e *Engine, z *zone, drained chan struct{}) {
	t.Helper()
	// A generous window: nothing else runs, and the pad is one 4 KiB
	// append.
	select {
	case <-drained:
	case <-time.After(10 * time.Second):
		buf := make([]byte, 8<<20)
		t.Errorf("the pad of zone %d never landed: the plug holds it while its holder waits for the goroutine that waits for it; every goroutine:\n%s",
			z.idx, buf[:runtime.Stack(buf, true)])
		_ = e.ring.Flush()
		<-drained
	}
}

// TestPlugHolderFlushesBeforeWaitingForGC is the hang of issue 11 seen in
// the VM (TestRealDevices/ng0n1/gc with zone limits), reproduced in
// process about once in a hundred runs of that test on the emu, and here
// every time. Writeback builds records under the ring's plug. A flush met
// its file's zone with a tail too short for a record: it reserved the tail
// for a pad, which made the zone full and left it draining until the pad
// lands, queued the pad under the plug, found no free zone for the file
// and went to ask GC for one (collector.mu). The GC pass holding the
// collector waited for a draining zone to drain — that very zone — having
// submitted what the ring held before the pad was queued. The pad stayed
// in the submission queue for good: GC waited for it, the flusher waited
// for GC, and every writer for the flusher. A plug holder must submit
// what its plug holds before it blocks on anything but the ring.
//
// The GC pass here is the test's own goroutine: it holds the collector and
// waits for the zone to drain the way GC's placement does, parked before
// the flush starts.
func TestPlugHolderFlushesBeforeWaitingForGC(t *testing.T) {
	e, a, z, aOff, b := shortTailEngine(t)
	// b takes zones while more than GC's reserve is free, and keeps its
	// last one open with room.
	var bOff int64
	for e.placer.freeCount() > e.cfg.GC.Reserve || bOff == 0 {
		writeSync(t, b, bOff, 64<<10)
		bOff += 64 << 10
	}
	if e.placer.freeCount() != e.cfg.GC.Reserve {
		t.Fatalf("%d free zones; want GC's reserve of %d", e.placer.freeCount(), e.cfg.GC.Reserve)
	}
	// a's next block: its flush pads z and then wants a zone of its own,
	// which only GC can give.
	if _, err := a.WriteAt(bytes.Repeat([]byte{0xaa}, BlockSize), aOff); err != nil {
		t.Fatal(err)
	}

	// "GC": holds the collector and waits for z to drain.
	drained := holdAndWaitForDrain(t, e, z, e.gc.mu.Lock, e.gc.mu.Unlock)
	synced := make(chan error, 1)
	go func() { synced <- a.Sync() }()
	waitDrained(t, e, z, drained)
	if err := <-synced; err != nil {
		t.Fatal(err)
	}
	got := make([]byte, BlockSize)
	if _, err := a.ReadAt(got, aOff); err != nil || got[0] != 0xaa {
		t.Fatalf("a's last block: %v, byte %#x", err, got[0])
	}
	checkValidCounts(t, e)
}

// TestPlugHolderFlushesBeforeWaitingForQuiesce: the same hang through
// quiesce. A writeback round flushes several files under one plug. The
// first file's flush pads its zone (queued under the plug) and goes on in
// a new zone; the next file's WriteExtents then takes quiesce shared —
// while a checkpoint waits to take it exclusively, behind a builder of
// appends that holds it and waits for that zone to drain. The pad, queued
// after the builder submitted what the ring held, stayed queued: the
// builder waited for the pad, the checkpoint for the builder, and the
// round for the checkpoint.
func TestPlugHolderFlushesBeforeWaitingForQuiesce(t *testing.T) {
	e, a, z, aOff, b := shortTailEngine(t)
	// A builder of appends (a GC relocation, another flush) holds
	// quiesce and waits for z to drain.
	drained := holdAndWaitForDrain(t, e, z, e.quiesce.RLock, e.quiesce.RUnlock)
	// One writeback round: a's flush, then b's, under one plug; a
	// checkpoint comes to wait for quiesce in between.
	pa, pb := donePending{ch: make(chan error, 8)}, donePending{ch: make(chan error, 8)}
	dataA := bytes.Repeat([]byte{0xaa}, BlockSize)
	dataB := bytes.Repeat([]byte{0xbb}, BlockSize)
	round := make(chan error, 1)
	aDone, goB := make(chan error, 1), make(chan struct{})
	go func() {
		e.ring.Plug()
		err := e.WriteExtents(a.f.id, []cache.Extent{{Off: aOff, Data: dataA}}, pa)
		aDone <- err
		<-goB
		if err == nil {
			err = e.WriteExtents(b.f.id, []cache.Extent{{Off: 0, Data: dataB}}, pb)
		}
		if uerr := e.ring.Unplug(); err == nil {
			err = uerr
		}
		round <- err
	}()
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}
	if z.remaining() != 0 || z.writers.Load() != 1 {
		t.Fatalf("zone %d: %d bytes left, %d writers; want it padded, the pad in flight", z.idx, z.remaining(), z.writers.Load())
	}
	ckpt := make(chan error, 1)
	go func() { ckpt <- e.checkpoint() }()
	waitBlockedIn(t, "engine.(*Engine).checkpointLocked", "sync.(*RWMutex).Lock")
	close(goB)
	waitDrained(t, e, z, drained)
	for _, err := range []error{<-round, <-ckpt, <-pa.ch, <-pa.ch, <-pb.ch} {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// waitBlockedIn waits until the goroutine running caller is blocked in
// waiter (a lock).
func waitBlockedIn(t *testing.T, caller, waiter string) {
	t.Helper()
	buf := make([]byte, 4<<20)
	for range 5000 {
		n := runtime.Stack(buf, true)
		for _, g := range bytes.Split(buf[:n], []byte("\n\n")) {
			if bytes.Contains(g, []byte(caller)) && bytes.Contains(g, []byte(waiter)) {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%s never blocked in %s", caller, waiter)
}
