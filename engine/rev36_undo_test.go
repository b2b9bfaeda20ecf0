package engine

import (
	"errors"
	"syscall"
	"testing"
)

// Suspicion A: the undo's own flush fails too, so no commit record is
// written; the undo's sizeless records reach the device at the next
// fsync, which succeeds, yet recovery drops them and the zeros' size
// cuts the file the engine reported as whole and synced.
func TestRev36UndoCommitFailsThenFsync(t *testing.T) {
	r := undoFlushFails(t)
	sameBytes(t, "after the failed truncate", readAll(t, r.e, "a"), r.before)
	var err error
	for i := 0; i < 3; i++ {
		if err = r.f.Sync(); err == nil {
			break
		}
		t.Logf("sync %d: %v", i, err)
	}
	if err != nil {
		t.Fatalf("fsync never succeeds once the device is healthy again: %v", err)
	}
	r.copyImage(t)
	e2 := reopen(t, r.copyName, r.cfg)
	defer e2.Close()
	sameBytes(t, "after a successful fsync, then a crash", readAll(t, e2, "a"), r.before)
}

// Suspicion B: the zeros' write fails (not on the device); the undo's
// sizeless records land and are flushed; before the commit record, GC
// resets a zone the undo emptied (the old copy of the cut range). A crash
// then drops the held records and maps the old extents into the reset zone.
//
// The failed write marks the engine as owing a checkpoint over a failed
// append's record (Engine.failedAppend), and the undo's flush writes it
// first: that checkpoint commits the undo, and no commit record follows.
// The emu device refused the zeros before they reached it, so nothing
// there needs superseding: "commit record" clears the mark to reach the
// window between the undo's records and its commit record, "checkpoint"
// keeps it and checks the checkpoint's commit survives a crash.
func TestRev36UndoHeldThenEmptyZoneReset(t *testing.T) {
	for _, commitRecord := range []bool{true, false} {
		name := "checkpoint"
		if commitRecord {
			name = "commit record"
		}
		t.Run(name, func(t *testing.T) {
			r := newTruncGCRig(t)
			armed, ran := false, false
			t.Cleanup(func() { testHookTruncateTail, testHookNumbered, testHookTruncateUndo = nil, nil, nil })
			testHookTruncateTail = func(e *Engine) {
				if !armed {
					armed = true
					emuOf(t, e).FailWrite(1) // the tail's zeros
				}
			}
			testHookTruncateUndo = func(e *Engine, back bool) {
				if back && commitRecord {
					e.failedAppend.Store(false)
				}
			}
			testHookNumbered = func(e *Engine, ff *file) {
				ff.mu.RLock()
				commit := ff.tailSeq == tailUndoing && ff.undo != nil && ff.undo.commit
				ff.mu.RUnlock()
				if ran || ff != r.f.f || !commit {
					return
				}
				ran = true
				e.gc.mu.Lock()
				ok, err := e.gc.resetEmpty()
				e.gc.mu.Unlock()
				t.Logf("resetEmpty: %v %v", ok, err)
				if err := e.flushDevice(t.Context()); err != nil { // e.g. another file's fsync
					t.Error(err)
				}
				r.copyImage(t)
			}
			if err := r.f.Truncate(5000); !errors.Is(err, syscall.EIO) {
				t.Fatalf("truncate: %v, want EIO", err)
			}
			if ran != commitRecord {
				t.Fatalf("the undo's commit record numbered with its undo held: %v, want %v", ran, commitRecord)
			}
			if !commitRecord {
				if r.f.f.undoOwed() || r.e.failedAppend.Load() {
					t.Fatalf("after the undo's checkpoint: commit owed %v, failed append unsettled %v", r.f.f.undoOwed(), r.e.failedAppend.Load())
				}
				r.e.gc.mu.Lock()
				ok, err := r.e.gc.resetEmpty()
				r.e.gc.mu.Unlock()
				t.Logf("resetEmpty: %v %v", ok, err)
				r.copyImage(t)
			}
			sameBytes(t, "after the failed truncate", readAll(t, r.e, "a"), r.before)
			{
				e2 := reopen(t, r.copyName, r.cfg)
				t.Logf("recovered len %d", len(readAll(t, e2, "a")))
				e2.Close()
			}
			checkFsck(t, r.copyName)
			r.checkCopy(t, "empty zone reset before the undo's commit, then a crash")
		})
	}
}

// TestTruncateUndoOwedThenEngineSync: as TestRev36UndoCommitFailsThenFsync,
// but the successful sync after the failed undo is the engine's (syncfs),
// not the file's: it too must write the commit the undo owes first, or
// the undo's sizeless records become durable for recovery to drop under
// the zeros' size.
func TestTruncateUndoOwedThenEngineSync(t *testing.T) {
	r := undoFlushFails(t)
	if !r.f.f.undoOwed() {
		t.Fatal("the failed undo owes no commit")
	}
	if err := r.e.Sync(t.Context()); err != nil {
		t.Fatalf("engine sync: %v", err)
	}
	if r.f.f.undoOwed() {
		t.Error("the engine's sync left the commit owed")
	}
	checkValidCounts(t, r.e)
	r.copyImage(t)
	e2 := reopen(t, r.copyName, r.cfg)
	defer e2.Close()
	sameBytes(t, "after a successful engine sync, then a crash", readAll(t, e2, "a"), r.before)
}

// undoFlushFails truncates the rig's file with its flush failing, and the
// undo's first flush too: the truncate fails with the commit owed.
func undoFlushFails(t *testing.T) *truncGCRig {
	t.Helper()
	holdOwed(t)
	r := newTruncGCRig(t)
	failUndoFlush(t, r)
	return r
}

// failUndoFlush truncates the rig's file with its flush failing, and the
// undo's first flush too: the truncate fails with the commit owed.
func failUndoFlush(t *testing.T, r *truncGCRig) {
	t.Helper()
	t.Cleanup(func() { testHookTruncateUndo = nil })
	testHookTruncateUndo = func(e *Engine, back bool) {
		if back {
			emuOf(t, e).FailFlush(1) // undoCut's first flush
		}
	}
	emuOf(t, r.e).FailFlush(1)
	if err := r.f.Truncate(5000); !errors.Is(err, syscall.EIO) {
		t.Fatalf("truncate: %v, want EIO", err)
	}
	testHookTruncateUndo = nil
}

// TestTruncateUndoOwedKeepsReplacedFromGC: the zeros' write fails (not on
// the device) and so does the undo's flush: the commit stays owed past
// the truncate. GC's empty-zone reset then must not take the zones the
// undo rewrote the cut range out of: a crash before the commit drops the
// undo's records, and recovery maps the file's old extents there again.
func TestTruncateUndoOwedKeepsReplacedFromGC(t *testing.T) {
	r := undoZerosWriteFails(t)
	r.e.gc.mu.Lock()
	ok, err := r.e.gc.resetEmpty()
	r.e.gc.mu.Unlock()
	t.Logf("resetEmpty: %v %v", ok, err)
	if err := r.e.flushDevice(t.Context()); err != nil { // e.g. another file's fsync
		t.Fatal(err)
	}
	r.crashFinds(t, "owed commit, empty zones reset, then a crash", r.before)
}

// holdOwed keeps an owed undo commit from being settled in the background
// for the test (testNoSettler): it models the time before the settler's
// try, or a device that fails every one.
func holdOwed(t *testing.T) {
	t.Helper()
	testNoSettler = true
	t.Cleanup(func() { testNoSettler = false })
}
