package cache

import (
	"context"
	"errors"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestH42iOldWritebackFailureDoesNotRefuseNewWaiter: 16 writebacks of
// file 1 are in flight on a failing device, begun before any writer
// waits; 15 of them fail over 1.4 s (the cache's clock is the test's).
// A writer is then throttled and kicks writeback, and the device heals:
// the last old writeback still ends with EIO (submitted before the
// heal). That failure is of writeback begun before the writer waited, so
// it must not refuse the writer (it did: the VM test
// TestH39dBadBlocks/load saw "append zone 14: an earlier write to the
// zone failed" with writeback recovered within a second); the writeback
// its kick asked for decides. If that succeeds the writer goes on; if
// it fails too, the device keeps failing and the writer gets EIO.
func TestH42iOldWritebackFailureDoesNotRefuseNewWaiter(t *testing.T) {
	for _, tc := range []struct {
		name  string
		newWB error // how the writeback begun after the writer waited ends
	}{
		{"device healed", nil},
		{"device still failing", syscall.EIO},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, kick := newKickCache(t)
			var clock atomic.Int64
			c.now = clock.Load
			step := func() { clock.Add(int64(100 * time.Millisecond)) }
			mustWrite(t, c, 1, 0, fill(128<<10, 1), nil)
			var held [stuckFailures][]Extent
			for i := range held {
				if held[i] = c.BeginWriteback(1, 4096, nil); len(held[i]) == 0 {
					t.Fatalf("writeback %d took nothing", i)
				}
			}
			for i := range stuckFailures - 1 {
				step()
				c.EndWriteback(held[i], syscall.EIO)
			}
			drain(kick)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			res := make(chan error, 1)
			go func() {
				_, err := c.Write(ctx, c.File(2), 0, fill(4096, 2), nil)
				res <- err
			}()
			// Its kick: the writer is waiting for writeback, which
			// nothing has begun since.
			select {
			case <-kick:
			case err := <-res:
				t.Fatalf("write ended before it was throttled: %v", err)
			}
			step()
			c.EndWriteback(held[stuckFailures-1], syscall.EIO)
			select {
			case <-kick: // woken by that failure, it asked again
			case err := <-res:
				t.Fatalf("throttled writer refused on a failure of writeback begun before it waited: %v", err)
			}
			step()
			for _, file := range c.DirtyFiles(nil) {
				c.EndWriteback(c.BeginWriteback(file, 0, nil), tc.newWB)
			}
			err := <-res
			switch {
			case tc.newWB == nil && err != nil:
				t.Fatalf("throttled write once writeback succeeds: %v", err)
			case tc.newWB != nil && !errors.Is(err, syscall.EIO):
				t.Fatalf("throttled write while writeback begun after it fails too: %v, want EIO", err)
			}
		})
	}
}
