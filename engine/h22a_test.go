package engine

import (
	"sync"
	"testing"
	"time"
)

// TestH22aUndoAcrossRenameOverLeavesNothingCached: a failed truncate's
// undo (undoCut, rewritePiece) racing a rename of another file over the
// one being undone. The rename drops the file (dropFile) and forgets its
// cache state, but the undo's piece under way makes the dropped file's
// state anew (rewritePiece never calls forgetIfRemoved): once the
// replaced file is gone, the cache must hold only the new file's bytes.
func TestH22aUndoAcrossRenameOverLeavesNothingCached(t *testing.T) {
	_, _, e, f := fileWithoutGC(t)
	t.Cleanup(func() { e.Close() })
	want := make([]byte, 10000)
	for i := range want {
		want[i] = byte(i%251 + 1)
	}
	if _, err := f.WriteAt(want, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, e, "b").Close() // empty: caches nothing
	var once sync.Once
	renamed := make(chan error, 1)
	testHookRewritePiece = func(e *Engine) {
		once.Do(func() { renamed <- e.Rename("b", "a") })
	}
	t.Cleanup(func() { testHookRewritePiece = nil })
	emuOf(t, e).FailFlush(1)
	done := make(chan error, 1)
	go func() { done <- f.Truncate(5000) }()
	select {
	case err := <-done:
		t.Logf("truncate: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("a truncate whose undo raced a rename over its file: not done after 60 s")
	}
	select {
	case err := <-renamed:
		if err != nil {
			t.Fatalf("rename: %v", err)
		}
	default:
		t.Fatal("the undo never rewrote a piece (the hook never ran)")
	}
	f.Close()
	if st := e.Stats().Cache; st.CachedBytes != 0 || st.DirtyBytes != 0 {
		t.Fatalf("the undone file was renamed over (the new one is empty), yet the cache holds %d bytes, %d dirty", st.CachedBytes, st.DirtyBytes)
	}
}
