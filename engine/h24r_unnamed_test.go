package engine

// Review h24r of posix-unlink: files removed or renamed over while open
// (file.unnamed).

import (
	"testing"
	"time"
)

// TestH24rUnnamedUndoWithoutRoomIsCommittedByCheckpoint: as
// TestUndoCommittedByCheckpointSurvivesPowerCut, but the file was removed
// while its handle is open. Its failed truncate's undo has no room to
// rewrite the cut range, so commitByCheckpoint commits it with a
// checkpoint; snapshot skips unnamed files before it collects owed undo
// states (metalog.go snapshot), so the checkpoint never ends the
// unnamed file's state: the commit stays owed, every fsync, write and
// Engine.Sync fail, the settler checkpoints again on each try, and GC
// keeps away from the file's zones, until the last close.
func TestH24rUnnamedUndoWithoutRoomIsCommittedByCheckpoint(t *testing.T) {
	_, _, e, f, p := fileOverFreeRoom(t)
	if err := e.Remove("a"); err != nil {
		t.Fatal(err)
	}
	emuOf(t, e).FailFlush(1) // the zeros' flush
	err := f.Truncate(5000)
	t.Logf("truncate of the unnamed %d-byte file to 5000: %v", len(p), err)
	if err == nil {
		t.Fatal("the truncate succeeded: the set-up no longer reaches the undo")
	}
	if f.f.undoOwed() {
		t.Errorf("the unnamed file's undo, with no room to rewrite the cut range, still owes its commit after the truncate (a named file's is committed by a checkpoint)")
	}
	if err := f.Sync(); err != nil {
		t.Errorf("fsync of the open handle of the unnamed file on a healthy device: %v", err)
	}
	if _, err := f.WriteAt([]byte("hello"), 0); err != nil {
		t.Errorf("a 5-byte overwrite through the open handle: %v", err)
	}
	if err := e.Sync(t.Context()); err != nil {
		t.Errorf("Engine.Sync: %v", err)
	}
	// The background settler tries again, each try a full checkpoint
	// (a metadata half switch) that cannot end the state.
	before := e.Stats().Checkpoints
	time.Sleep(3 * time.Second)
	if n := e.Stats().Checkpoints - before; n > 1 {
		t.Errorf("the background settler wrote %d checkpoints in 3 s for the unnamed file's undo, none of which ends it", n)
	}
}

// TestH24rOpenWaitingForCreateFlushRacingRemove: an open's lookup of the
// name and its handle count were apart, a window made wide here: an OpenFile with
// OCreate of a name whose create deferred its flush (ODeferSync) looks
// the file up, lets nsMu go, waits for that create's flush
// (awaitCreate), and only then counts its handle (openHandle). A remove
// during the flush sees no handle and drops the file; OpenFile returns a
// handle whose reads and writes fail with ENOENT: the removal did not
// leave the opener the file, as Remove promises an open handle. The
// handle is now counted in the lookup, under nsMu (openHandle).
func TestH24rOpenWaitingForCreateFlushRacingRemove(t *testing.T) {
	e := formatOpen(t, memDevice(t, 16, "1M"), smallConfig())
	defer e.Close()
	w, err := e.OpenFile("f", OCreate|ODeferSync)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt([]byte("hello"), 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	removed := make(chan error, 1)
	testHookAckFlush = func(e *Engine) {
		testHookAckFlush = nil
		removed <- e.RemoveDeferred("f")
	}
	t.Cleanup(func() { testHookAckFlush = nil })
	h, err := e.OpenFile("f", OCreate)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer h.Close()
	select {
	case err := <-removed:
		if err != nil {
			t.Fatalf("remove during the open's wait for the create's flush: %v", err)
		}
	default:
		t.Fatal("the open did not wait for the create's flush: the set-up no longer reaches the window")
	}
	buf := make([]byte, 5)
	if _, err := h.ReadAt(buf, 0); err != nil {
		t.Errorf("the handle OpenFile returned, the remove done, fails its read: %v", err)
	}
	if _, err := h.WriteAt([]byte("world"), 0); err != nil {
		t.Errorf("... and its write: %v", err)
	}
	if err := h.Sync(); err != nil {
		t.Errorf("... and its fsync: %v", err)
	}
}
