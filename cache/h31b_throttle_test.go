package cache

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"
)

// h31bQueue starts n writers of 4 KiB (files base..base+n-1), each with
// its own context, and waits until all of them are in throttle's queue
// (in the order started: each joins before the next starts). It returns
// their results and their cancel functions.
func h31bQueue(t *testing.T, c *Cache, base uint64, n int) ([]chan error, []context.CancelFunc) {
	t.Helper()
	res := make([]chan error, n)
	cancels := make([]context.CancelFunc, n)
	for i := range n {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		cancels[i] = cancel
		res[i] = make(chan error, 1)
		before := c.throttledN.Load()
		go func() {
			_, err := c.Write(ctx, c.File(base+uint64(i)), 0, fill(4096, byte(i)), nil)
			res[i] <- err
		}()
		h31bWait(t, "a writer joins the throttle queue", func() bool { return c.throttledN.Load() > before })
	}
	return res, cancels
}

func h31bWait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func h31bResult(t *testing.T, what string, ch chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(20 * time.Second):
		t.Fatalf("after 20 s: %s still waits", what)
		return nil
	}
}

// TestH31bThrottledWritersThatGiveUp: of writers queued behind dirty
// data, one in the middle and then the first give up (their contexts
// end): each returns its context's error at once, its place is released
// (the queue shrinks), the one behind the first gets the turn, and once
// writeback cleans the data every writer still queued goes on, in turn,
// with no error. A place kept by a writer gone would hold every writer
// behind it for ever.
func TestH31bThrottledWritersThatGiveUp(t *testing.T) {
	c, kick := newKickCache(t)
	mustWrite(t, c, 1, 0, fill(128<<10, 1), nil) // over the 64 KiB limit
	res, cancels := h31bQueue(t, c, 2, 5)
	cancels[2]()
	if err := h31bResult(t, "a writer whose context ended in the middle of the queue", res[2]); !errors.Is(err, context.Canceled) {
		t.Fatalf("middle writer: %v, want context.Canceled", err)
	}
	cancels[0]()
	if err := h31bResult(t, "the first writer, its context ended", res[0]); !errors.Is(err, context.Canceled) {
		t.Fatalf("first writer: %v, want context.Canceled", err)
	}
	if n := c.throttledN.Load(); n != 3 {
		t.Fatalf("%d writers queued after 2 of 5 gave up, want 3", n)
	}
	for _, i := range []int{1, 3, 4} {
		select {
		case err := <-res[i]:
			t.Fatalf("writer %d went on with the data still dirty: %v", i, err)
		default:
		}
	}
	// Writeback cleans everything, as it is asked (the first writer's
	// kick, still pending, or the next one's).
	defer h31bFlushOnKick(c, kick, 0, nil)()
	for _, i := range []int{1, 3, 4} {
		if err := h31bResult(t, "a queued writer once writeback cleaned the data", res[i]); err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	if n := c.throttledN.Load(); n != 0 {
		t.Fatalf("%d writers queued after every writer ended", n)
	}
}

// TestH31bQueuedWritersAllFailWhenWritebackKeepsFailing: 16 writers are
// queued behind dirty data that writeback fails to write every time.
// Every one of them, not only the first, gets the writeback error, and
// the ones behind the first within a few more failed writebacks (each
// one's turn needs no further run of 16 failures over a second: the run
// that failed the first fails them).
func TestH31bQueuedWritersAllFailWhenWritebackKeepsFailing(t *testing.T) {
	c, kick := newKickCache(t)
	mustWrite(t, c, 1, 0, fill(128<<10, 1), nil)
	defer h31bFlushOnKick(c, kick, 4096, syscall.EIO)() // one failed flush per kick
	const n = 16
	res, _ := h31bQueue(t, c, 2, n)
	if err := h31bResult(t, "the first queued writer", res[0]); !errors.Is(err, syscall.EIO) {
		t.Fatalf("first writer: %v, want EIO", err)
	}
	atFirst := c.wbFailing.Load()
	for i := 1; i < n; i++ {
		if err := h31bResult(t, "a queued writer", res[i]); !errors.Is(err, syscall.EIO) {
			t.Fatalf("writer %d: %v, want EIO", i, err)
		}
	}
	more := c.wbFailing.Load() - atFirst
	t.Logf("%d failed writebacks after the first writer's error, for the other %d", more, n-1)
	if more > 2*int64(n) {
		t.Errorf("%d failed writebacks after the first writer failed before the other %d did", more, n-1)
	}
	if n := c.throttledN.Load(); n != 0 {
		t.Fatalf("%d writers queued after every writer ended", n)
	}
	if d := c.DirtyBytes(); d != 128<<10 {
		t.Errorf("dirty bytes after failed writebacks: %d, want %d (nothing dropped)", d, 128<<10)
	}
}

// h31bFlushOnKick writes back every dirty file, up to limit bytes each
// (0: all), ending each run with err, whenever writeback is kicked,
// until the returned stop is called.
func h31bFlushOnKick(c *Cache, kick <-chan struct{}, limit int64, err error) (stop func()) {
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-kick:
			case <-quit:
				return
			}
			for _, file := range c.DirtyFiles(nil) {
				c.EndWriteback(c.BeginWriteback(file, limit, nil), err)
			}
		}
	}()
	return func() { close(quit); <-done }
}
