package engine

import (
	"errors"
	"io/fs"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestUndoAcrossRemoveLeavesNothingCached: a failed truncate's undo
// (undoCut) reads the cut range back and makes it dirty again piece by
// piece. A remove of the file between two pieces ends the undo
// (dropFile) and forgets the file's cache state, but the piece under way
// went on: its read made the removed file's state anew and its write
// left it dirty, for a file no Forget would come for again. Writeback
// then wrote those bytes to a zone for nobody, and the state stayed in
// the cache for good.
func TestUndoAcrossRemoveLeavesNothingCached(t *testing.T) {
	cfg := smallConfig()
	cfg.GC.Disabled = true
	e := formatOpen(t, memDevice(t, 16, "1M"), cfg)
	t.Cleanup(func() { e.Close() })
	f := createSynced(t, e, "a", pattern(10000, 1))
	var once sync.Once
	removed := make(chan error, 1)
	testHookRewritePiece = func(e *Engine) {
		once.Do(func() { removed <- e.Remove("a") })
	}
	t.Cleanup(func() { testHookRewritePiece = nil })
	emuOf(t, e).FailFlush(1)
	done := make(chan error, 1)
	go func() { done <- f.Truncate(5000) }()
	var terr error
	select {
	case terr = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("a truncate whose undo raced its file's remove: not done after 60 s")
	}
	t.Logf("truncate: %v", terr)
	if !errors.Is(terr, syscall.EIO) && !errors.Is(terr, fs.ErrNotExist) {
		t.Fatalf("truncate with a failing flush and its file removed during the undo: %v, want EIO or ErrNotExist", terr)
	}
	select {
	case err := <-removed:
		if err != nil {
			t.Fatalf("remove: %v", err)
		}
	default:
		t.Fatal("the undo never rewrote a piece (the hook never ran)")
	}
	st := e.Stats().Cache
	if st.CachedBytes != 0 || st.DirtyBytes != 0 {
		t.Fatalf("the only file was removed during its truncate's undo, yet the cache holds %d bytes, %d dirty: the undo made the removed file's state anew", st.CachedBytes, st.DirtyBytes)
	}
}
