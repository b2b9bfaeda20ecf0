package server

// Writers throttled behind dirty data the device does not clean (it
// fails every write, or holds them): every client gets an answer, and a
// shutdown ends.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/uring"
)

// h31bWriteHold holds an h31bHoldDevice's writes and appends: while
// held, their completions wait for release.
type h31bWriteHold struct {
	mu   sync.Mutex
	gate chan struct{}
}

func (w *h31bWriteHold) get() chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gate
}

func (w *h31bWriteHold) hold() {
	w.mu.Lock()
	w.gate = make(chan struct{})
	w.mu.Unlock()
}

func (w *h31bWriteHold) release() {
	w.mu.Lock()
	if w.gate != nil {
		close(w.gate)
		w.gate = nil
	}
	w.mu.Unlock()
}

type h31bHeldAppend struct {
	c interface{ Appended(int64, error) }
	g chan struct{}
}

func (h h31bHeldAppend) Appended(off int64, err error) {
	go func() { <-h.g; h.c.Appended(off, err) }()
}

type h31bHeldWrite struct {
	c uring.Completion
	g chan struct{}
}

func (h h31bHeldWrite) Complete(r uring.Result) {
	go func() { <-h.g; h.c.Complete(r) }()
}

// h31bWriters has n clients (every other one with socket framing) open
// a file each; once start closes, each writes 64 KiB at a time to it,
// synchronously, until a write fails or stop closes. It returns each
// one's first error.
func h31bWriters(t *testing.T, socket string, n int, start, stop <-chan struct{}) []chan error {
	t.Helper()
	ctx := context.Background()
	res := make([]chan error, n)
	for i := range n {
		res[i] = make(chan error, 1)
		c := h31bDial(t, socket, i%2 == 1, 1<<20)
		h, _, err := c.Open(ctx, fmt.Sprintf("w%d", i), OpenCreate)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64<<10)
		go func() {
			<-start
			for off := int64(0); ; off = (off + int64(len(buf))) % (4 << 20) {
				select {
				case <-stop:
					res[i] <- nil
					return
				default:
				}
				if _, err := c.WriteAt(ctx, h, buf, off); err != nil {
					res[i] <- err
					return
				}
			}
		}()
	}
	return res
}

// TestH31bQueuedWritersAllGetTheDeviceError: eight clients write to a
// device that fails every write. Their writes throttle behind dirty data
// nothing can clean, queued in turn (the fair throttle); every one of
// them, not only the first in the queue, gets an error, and the daemon
// still answers.
func TestH31bQueuedWritersAllGetTheDeviceError(t *testing.T) {
	cfg := engine.Config{CacheBytes: 16 << 20, DirtyLimit: 2 << 20, ReadaheadMax: -1}
	d := h31bServe(t, make([]byte, 64<<10), cfg)
	const n = 8
	start, stop := make(chan struct{}), make(chan struct{})
	defer close(stop)
	res := h31bWriters(t, d.socket, n, start, stop)
	d.dev.emu.FailWrites(true)
	defer d.dev.emu.FailWrites(false)
	close(start)
	for i, ch := range res {
		select {
		case err := <-ch:
			if err == nil {
				t.Errorf("writer %d ended without an error", i)
			}
			var st Status
			if errors.As(err, &st) {
				t.Logf("writer %d: %v", i, st)
			} else {
				t.Logf("writer %d: %v", i, err)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("writer %d got no error in 60 s of a device failing every write", i)
		}
	}
	c := h31bDial(t, d.socket, false, 1<<20)
	if _, err := c.Stat(context.Background(), "w0"); err != nil {
		t.Fatalf("stat after the failures: %v", err)
	}
}

// TestH31bShutdownWithWritersThrottled: writers are throttled behind
// dirty data whose writeback the device holds, and the daemon is told to
// stop. Once the device answers, Serve returns, every writer's call
// ends, and the engine closes.
func TestH31bShutdownWithWritersThrottled(t *testing.T) {
	cfg := engine.Config{CacheBytes: 16 << 20, DirtyLimit: 2 << 20, ReadaheadMax: -1}
	d := h31bServe(t, make([]byte, 64<<10), cfg)
	const n = 8
	start, stop := make(chan struct{}), make(chan struct{})
	res := h31bWriters(t, d.socket, n, start, stop)
	d.dev.writes.hold()
	t.Cleanup(d.dev.writes.release)
	close(start)
	h31bEventually(t, "writers throttled", func() bool { return d.e.WritesThrottled() && d.e.Stats().Cache.Throttles >= 2 })
	defer close(stop)
	d.stop()
	time.Sleep(50 * time.Millisecond) // into the shutdown's waits
	d.dev.writes.release()
	for i, ch := range res {
		select {
		case err := <-ch:
			// Its write was answered, or the session ended: either
			// way its call ended, with an error, since it writes
			// until one.
			if err == nil {
				t.Errorf("writer %d ended without an error", i)
			}
			t.Logf("writer %d: %v", i, err)
		case <-time.After(60 * time.Second):
			t.Fatalf("writer %d's call did not end within 60 s of the shutdown", i)
		}
	}
	select {
	case err := <-d.served:
		d.served <- err
	case <-time.After(60 * time.Second):
		t.Fatal("Serve did not return within 60 s")
	}
	closed := make(chan error, 1)
	go func() { closed <- d.e.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Logf("engine Close: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("engine Close did not return within 60 s")
	}
}
