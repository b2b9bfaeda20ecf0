package engine

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// TestH21dTruncateAcrossRemoveLeavesNothingCached: 7073c0e made every
// access that can begin after Remove's cache.Forget forget the state it
// made for the removed file (forgetIfRemoved after readahead, failed reads
// and each write piece), but a truncate's tail write (zeroTail) has the
// same race and no such call. A truncate into a block whose file is
// removed between the truncate's check and its tail's cache write makes
// the removed file's cache state anew, with the zeros dirty: writeback
// writes them to a zone for nobody, and the state (a folio) stays in the
// cache's index for good — no Forget will ever come for that id. (Since
// 64fa575 no call site forgets: every access goes through the file's
// cache.File, which Forget leaves dead.)
func TestH21dTruncateAcrossRemoveLeavesNothingCached(t *testing.T) {
	e, _, terr, rerr := h21dTruncateRacingRemove(t)
	t.Logf("truncate across the remove: %v", terr)
	if rerr != nil {
		t.Fatalf("remove: %v", rerr)
	}
	st := e.Stats().Cache
	if st.CachedBytes != 0 || st.DirtyBytes != 0 {
		t.Fatalf("after the only file was removed during a truncate, the cache holds %d bytes, %d dirty (the removed file's state made anew by the truncate's tail write)", st.CachedBytes, st.DirtyBytes)
	}
}

// TestH21dTruncateAcrossRemoveOwesNoUndo: the same race as above; the
// truncate's tail fails (the file is gone) and its undo path (putBack)
// gives the removed file an undo state after Remove's dropFile ended it
// (endUndo): a removed file then owes an undo commit that no remove will
// ever end, and its background settler retries undoCut against a file
// that is gone until Close.
func TestH21dTruncateAcrossRemoveOwesNoUndo(t *testing.T) {
	_, f, _, _ := h21dTruncateRacingRemove(t)
	if f.f.undoOwed() {
		t.Fatal("a file removed during a failed truncate owes an undo commit: its settler retries against a removed file")
	}
}

// h21dTruncateRacingRemove makes file "a" with synced bytes, removes it
// from inside the truncate's tail hook (after the new size is set, before
// the zeros enter the cache), truncates it into a block and returns the
// truncate's error and the remove's.
func h21dTruncateRacingRemove(t *testing.T) (e *Engine, f *File, terr, rerr error) {
	t.Helper()
	e = formatOpen(t, emuDevice(t, 16, "4M", ""), smallConfig())
	t.Cleanup(func() { e.Close() })
	f = mustCreate(t, e, "a")
	if _, err := f.WriteAt(bytes.Repeat([]byte("tail"), 4096), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	removed := make(chan error, 1)
	testHookTruncateTail = func(e *Engine) {
		once.Do(func() { removed <- closeAndRemove(e, f) }) // the last close drops it
	}
	t.Cleanup(func() { testHookTruncateTail = nil })
	done := make(chan error, 1)
	go func() { done <- f.Truncate(100) }()
	select {
	case terr = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("truncate across its file's remove: not done after 60 s")
	}
	select {
	case rerr = <-removed:
	default:
		t.Fatal("the truncate's tail hook never ran")
	}
	return e, f, terr, rerr
}
