package engine

import (
	"bytes"
	"testing"
	"time"
)

// TestWaitingReadGetsAScratchWhileColdReadsHoldAll: cold reads
// (StartRead) held in the device take every read scratch they may; a
// read the waiting way (ReadAt, the cache's fill through readChecked)
// must still get one and end.
//
// The cache fills under the file's lock when its memory is short
// (readLocked's readBacking), and a cold read the reaper finds that
// lock held waits for it in the finisher, its scratch held. When both
// came from one pool, a fill under the lock waited for a scratch that
// only cold reads waiting for that lock could give back: the daemon
// hung (found by h32a: 256-1024 reads of 64 KiB in flight on one file in
// a 16 MiB cache; goroutine dump: readChecked in <-scratch.free under
// the file lock, 128 cold reads queued for coldFinisher, the finisher
// in FinishMiss waiting for that lock). Here the fill's wait for a
// scratch is shown directly: before, the ReadAt waited until the held
// cold reads were released.
func TestWaitingReadGetsAScratchWhileColdReadsHoldAll(t *testing.T) {
	const bs, n = 16 << 10, readScratches + 8
	data := pattern((n+2)*bs, 9)
	e, dev := openWithHeldReads(t, "a", data)
	released := false
	release := func() {
		if !released {
			released = true
			close(dev.release)
		}
	}
	t.Cleanup(func() { release(); e.Close() })
	h, err := e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	bufs, offs := coldReads(t, h, n, bs)
	dev.armed.Store(true)
	d := readDone{make(chan readEnd, n)}
	began := startReads(e, h, bufs, offs, d)
	dev.armed.Store(false)
	if began < readScratches {
		t.Fatalf("set-up: %d cold reads began, want every scratch's %d", began, readScratches)
	}
	// A read of the waiting way, of the file's last block (not cached:
	// coldReads read block n, this is n+1).
	got := make([]byte, bs)
	done := make(chan error, 1)
	go func() {
		_, err := h.ReadAt(got, int64(n+1)*bs)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ReadAt beside %d held cold reads: %v", began, err)
		}
		if !bytes.Equal(got, data[(n+1)*bs:]) {
			t.Fatal("ReadAt beside held cold reads: bytes differ from the file's")
		}
	case <-time.After(20 * time.Second):
		release()
		t.Fatalf("a read waited 20 s for a read scratch that %d cold reads held in the device", began)
	}
	release()
	for range began {
		select {
		case r := <-d.ch:
			if r.err != nil {
				t.Fatalf("a cold read ended with %+v", r)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("a cold read never ended once released")
		}
	}
}
