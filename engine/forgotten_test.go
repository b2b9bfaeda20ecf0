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
// piece. A remove of the file between two pieces, or a rename of another
// file over it (h22a's case), ends the undo (dropFile) and forgets the
// file's cache state, but the piece under way went on: its read made the
// dropped file's state anew and its write left it dirty, for a file no
// Forget would come for again. Writeback then wrote those bytes to a
// zone for nobody, and the state stayed in the cache for good.
func TestUndoAcrossRemoveLeavesNothingCached(t *testing.T) {
	for _, tc := range []struct {
		name string
		drop func(e *Engine) error
	}{
		{"remove", func(e *Engine) error { return e.Remove("a") }},
		{"rename over", func(e *Engine) error { return e.Rename("b", "a") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := smallConfig()
			cfg.GC.Disabled = true
			e := formatOpen(t, memDevice(t, 16, "1M"), cfg)
			t.Cleanup(func() { e.Close() })
			f := createSynced(t, e, "a", pattern(10000, 1))
			mustCreate(t, e, "b").Close() // empty: caches nothing
			var once sync.Once
			dropped := make(chan error, 1)
			testHookRewritePiece = func(e *Engine) {
				once.Do(func() { dropped <- tc.drop(e) })
			}
			t.Cleanup(func() { testHookRewritePiece = nil })
			emuOf(t, e).FailFlush(1)
			done := make(chan error, 1)
			go func() { done <- f.Truncate(5000) }()
			var terr error
			select {
			case terr = <-done:
			case <-time.After(60 * time.Second):
				t.Fatalf("a truncate whose undo raced a %s of its file: not done after 60 s", tc.name)
			}
			t.Logf("truncate: %v", terr)
			if !errors.Is(terr, syscall.EIO) && !errors.Is(terr, fs.ErrNotExist) {
				t.Fatalf("truncate with a failing flush and its file dropped during the undo: %v, want EIO or ErrNotExist", terr)
			}
			select {
			case err := <-dropped:
				if err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
			default:
				t.Fatal("the undo never rewrote a piece (the hook never ran)")
			}
			f.Close()
			if st := e.Stats().Cache; st.CachedBytes != 0 || st.DirtyBytes != 0 {
				t.Fatalf("the file was dropped (%s) during its truncate's undo, and the other file is empty, yet the cache holds %d bytes, %d dirty: the undo made the dropped file's state anew", tc.name, st.CachedBytes, st.DirtyBytes)
			}
		})
	}
}
