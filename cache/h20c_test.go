package cache

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

// goneBacking is heldBacking for a file the engine removes while the
// held first read is in flight: that read ends with the bytes it read
// (its lookup came before the removal), every later one fails, as
// engine.ReadBacking does for a removed file.
type goneBacking struct {
	*heldBacking
	gone atomic.Bool
}

var errH20cGone = errors.New("h20c: file removed")

func (g *goneBacking) ReadBacking(file uint64, off int64, p []byte) error {
	if g.heldBacking.calls.Load() > 0 && g.gone.Load() {
		return errH20cGone
	}
	return g.heldBacking.ReadBacking(file, off, p)
}

// TestH20cPrefetchAfterForgetMakesTheFileAgain: Forget (the engine's
// remove) while a Prefetch's read runs without the file lock. Back from
// Backing, run() looks the file up again with fileOrNew, which makes a
// new fileState for the forgotten id and a folio in it before Backing
// says the file is gone: the removed file is in the index again, with
// arena memory, and no Forget ever comes for it. (Read has the same run
// loop; readahead's windows, read by background workers with no handle
// keeping the file, make the race routine: engine's
// TestH20cPrefetchAcrossRemoveLeavesRemovedFileCached.)
func TestH20cPrefetchAfterForgetMakesTheFileAgain(t *testing.T) {
	c := newTestCache(t, Config{Bytes: 4 << 20, MaxOrder: 5, BlockSize: 4096})
	b := &goneBacking{heldBacking: newHeldBacking()}
	b.store(1, 0, fill(128<<10, 3))
	done := make(chan error, 1)
	go func() { done <- c.Prefetch(context.Background(), c.File(1), 0, 128<<10, b) }()
	<-b.started
	b.gone.Store(true)
	c.Forget(1)
	close(b.release)
	err := <-done
	if !errors.Is(err, errH20cGone) {
		t.Logf("Prefetch: %v", err)
	}
	st := c.Stats()
	if fs := c.file(1); fs != nil || st.CachedBytes != 0 {
		t.Fatalf("after Forget(1) and the Prefetch's end: file 1 in the index again: %v, %d bytes of arena held by folios", fs != nil, st.CachedBytes)
	}
}
