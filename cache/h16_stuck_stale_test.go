package cache

import (
	"context"
	"syscall"
	"testing"
	"time"
)

// TestH16OneFailureAfterAnOldRunOfFailuresDoesNotFailWriters: writeback
// of a file failed 16 times over a second (a device hiccup), then the
// file was removed (Forget drops its dirty data, so nothing retries it
// and no writeback succeeds), and the device works again. Later a
// writer is throttled behind another file's dirty data, and the one
// flush its kick starts fails once (one append lost with its zone, which
// the engine retries elsewhere), then writeback succeeds. One failure
// after a healthy pause is not writeback that keeps failing: the writer
// must go on. It gets EIO: the run of failures is never ended by
// anything but a successful EndWriteback, and its start time is the
// hiccup's, so the single new failure makes it "16 over a second".
func TestH16OneFailureAfterAnOldRunOfFailuresDoesNotFailWriters(t *testing.T) {
	c, kick := newKickCache(t)
	// The hiccup: file 1's writeback fails 16 times over more than 1 s.
	mustWrite(t, c, 1, 0, fill(128<<10, 1), nil)
	for i := range stuckFailures {
		if i > 0 {
			time.Sleep(stuckAfter / (stuckFailures - 1) * 11 / 10)
		}
		c.EndWriteback(c.BeginWriteback(1, 4096, nil), syscall.EIO)
	}
	// The file is removed: its dirty data goes, nothing retries it.
	c.Forget(1)
	if d := c.DirtyBytes(); d != 0 {
		t.Fatalf("dirty bytes after Forget: %d", d)
	}
	drain(kick)
	// Much later, another file is over the dirty limit.
	mustWrite(t, c, 2, 0, fill(128<<10, 2), nil)
	drain(kick)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // the writeback layer: the first flush fails, the rest succeed
		defer close(done)
		first := true
		for {
			select {
			case <-kick:
			case <-stop:
				return
			}
			if first {
				first = false
				c.EndWriteback(c.BeginWriteback(2, 4096, nil), syscall.EIO)
				time.Sleep(100 * time.Millisecond) // the engine retires the zone, then retries
			}
			for _, file := range c.DirtyFiles(nil) {
				c.EndWriteback(c.BeginWriteback(file, 0, nil), nil)
			}
		}
	}()
	defer func() { close(stop); <-done }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Write(ctx, c.File(3), 0, fill(4096, 3), nil); err != nil {
		t.Fatalf("throttled write after one writeback failure on a device that works again: %v", err)
	}
}

func drain(ch chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}
