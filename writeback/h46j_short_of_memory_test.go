package writeback

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zonefold/zonefold/cache"
)

// countStore completes every append as it is submitted and counts them.
type countStore struct{ n atomic.Int64 }

func (s *countStore) WriteExtents(_ uint64, _ []cache.Extent, p Pending) error {
	s.n.Add(1)
	p.Add(1)
	p.Done(nil)
	return nil
}

// TestH46jFlushBelowBackgroundOnlyWhileAReclaimSleeps: the flusher writes
// unexpired data below the background threshold only while an access
// sleeps in reclaim for a clean folio (cache.ShortOfMemory), with the
// real cache. An access that gave up (its context ended) leaves nothing
// behind: a kicked round after it writes nothing, as it would for ever
// if the count leaked (every round flushing everything: the write
// amplification of small chains, and their header cost). One asleep gets
// its folio from the next round.
func TestH46jFlushBelowBackgroundOnlyWhileAReclaimSleeps(t *testing.T) {
	store := &countStore{}
	w, c := newTestWritebackOf(t, store, Config{Expire: time.Hour}, cache.Config{Bytes: 64 << 10, MaxOrder: 9, DirtyLimit: 1 << 30, BackgroundDirty: 1 << 30})
	ctx := context.Background()
	if _, err := c.Write(ctx, c.File(1), 0, make([]byte, 64<<10), nil); err != nil {
		t.Fatal(err)
	}
	writeBg := func(ctx context.Context, file uint64) <-chan error {
		done := make(chan error, 1)
		go func() {
			_, err := c.Write(ctx, c.File(file), 0, make([]byte, 8192), nil)
			done <- err
		}()
		return done
	}
	cctx, cancel := context.WithCancel(ctx)
	done := writeBg(cctx, 2)
	for !c.ShortOfMemory() {
		runtime.Gosched()
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled write: %v, want context.Canceled", err)
	}
	_, round, ended := runRounds(t, w)
	round()
	if n := store.n.Load(); n != 0 || c.DirtyBytes() != 64<<10 {
		t.Fatalf("a kicked round after the only access short of memory gave up wrote %d flushes (%d bytes dirty of 64K): below the background threshold with nothing expired it writes nothing", n, c.DirtyBytes())
	}
	done = writeBg(ctx, 3)
	for !c.ShortOfMemory() {
		runtime.Gosched()
	}
	w.Kick()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute): // turns a hang into a failure
		t.Fatalf("a write short of memory still waits a minute after a kick (%d bytes dirty, %d flushes): the flusher writes nothing below the background threshold for it", c.DirtyBytes(), store.n.Load())
	}
	ended()
	if store.n.Load() == 0 {
		t.Fatal("the write short of memory was served with nothing written back")
	}
	if c.ShortOfMemory() {
		t.Fatal("short of memory after the only access waiting for it was served")
	}
}
