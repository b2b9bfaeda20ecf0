package cache

import (
	"context"
	"errors"
	"sync/atomic"
	"syscall"
	"testing"
)

// TestThrottledWriteFailsWhenWritebackKeepsFailing: a writer throttled
// behind dirty data that writeback fails to write every time (a device
// that refuses every append) gets the writeback error instead of waiting
// for as long as the device fails, and the dirty data stays (failed
// writeback never drops it). Writeback that fails now and then but also
// succeeds lets the writer go on, with no error; so does writeback that
// succeeds again after failing for long.
func TestThrottledWriteFailsWhenWritebackKeepsFailing(t *testing.T) {
	for _, tc := range []struct {
		name      string
		failEvery int // writeback i fails unless i%failEvery == failEvery-1; 0: every one fails
		wantErr   bool
	}{
		{"every writeback fails", 0, true},
		{"some writebacks succeed", 3, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, kick := newKickCache(t)
			first := fill(128<<10, 1)
			mustWrite(t, c, 1, 0, first, nil)
			var healed atomic.Bool
			stop := make(chan struct{})
			flusherDone := make(chan struct{})
			go func() { // the writeback layer: one flush per kick
				defer close(flusherDone)
				for i := 0; ; i++ {
					select {
					case <-kick:
					case <-stop:
						return
					}
					var err error
					if !healed.Load() && (tc.failEvery == 0 || i%tc.failEvery != tc.failEvery-1) {
						err = syscall.EIO
					}
					for _, file := range c.DirtyFiles(nil) {
						// One block at a time: a success cleans
						// little, so failures and successes interleave.
						c.EndWriteback(c.BeginWriteback(file, 4096, nil), err)
					}
				}
			}()
			defer func() { close(stop); <-flusherDone }()
			_, err := c.Write(context.Background(), c.File(2), 0, fill(4096, 2), nil)
			switch {
			case tc.wantErr && !errors.Is(err, syscall.EIO):
				t.Fatalf("throttled write while every writeback fails: %v, want EIO", err)
			case !tc.wantErr && err != nil:
				t.Fatalf("throttled write while writeback succeeds now and then: %v", err)
			}
			if tc.wantErr {
				if d := c.DirtyBytes(); d != int64(len(first)) {
					t.Errorf("dirty bytes after failed writebacks: %d, want %d (nothing dropped)", d, len(first))
				}
				checkBytes(t, "file 1 after failed writebacks", mustRead(t, c, 1, 0, len(first), nil), first)
				healed.Store(true)
				if _, err := c.Write(context.Background(), c.File(2), 0, fill(4096, 3), nil); err != nil {
					t.Fatalf("throttled write once writeback succeeds again: %v", err)
				}
			}
		})
	}
}
