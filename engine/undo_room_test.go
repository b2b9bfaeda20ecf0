package engine

// A failed truncate whose cut range is larger than the device's free
// room (found by review rev53).

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
)

// TestUndoLargerThanFreeRoomSettles: a file holding 60% of a
// healthy device is truncated to 5000 bytes and the truncate's device
// flush fails once (a transient EIO). The undo must rewrite the whole
// cut range [8192, old) while the copies it replaces stay counted valid
// and GC leaves every zone of the file alone (tailUnsettled): it needs
// 60% of the device free and 40% is. Before the fix the commit stayed
// owed with no way to settle it short of a checkpoint (Close): every
// fsync, Engine.Sync and every write of the file failed with ENOSPC on
// a healthy device whose live data is 60% of it. The fsyncs, the write
// and Engine.Sync must succeed.
func TestUndoLargerThanFreeRoomSettles(t *testing.T) {
	_, _, e, f, p := fileOverFreeRoom(t)
	emuOf(t, e).FailFlush(1) // the zeros' flush: a transient EIO
	err := f.Truncate(5000)
	t.Logf("truncate of a %d-byte file (capacity %d) to 5000: %v", len(p), e.Capacity(), err)
	if err == nil {
		t.Fatal("the truncate succeeded: the set-up no longer reaches the undo")
	}
	var serr error
	for i := 0; i < 3; i++ {
		serr = f.Sync()
		t.Logf("fsync %d: %v (owed %v)", i, serr, f.f.undoOwed())
		if serr == nil {
			break
		}
	}
	if serr != nil {
		t.Errorf("three fsyncs on a healthy device (live data 60%% of it) after a transient EIO all failed; last: %v", serr)
	}
	_, werr := f.WriteAt([]byte("hello"), 0)
	t.Logf("write of 5 bytes at 0: %v", werr)
	if werr != nil {
		t.Errorf("a 5-byte overwrite of the file on a healthy device: %v (ENOSPC: %v)", werr, errors.Is(werr, ErrNoSpace) || errors.Is(werr, syscall.ENOSPC))
	}
	if err := e.Sync(t.Context()); err != nil {
		t.Errorf("Engine.Sync: %v", err)
	}
}

// TestUndoCommittedByCheckpointSurvivesPowerCut: the undo that had no
// room to rewrite the cut range is committed by a checkpoint, whose
// device flush makes the zeros' record (written, its flush failed)
// durable too. A power cut right after the failed truncate, and another
// after an overwrite and fsync of the file, must bring the file back
// whole at its old size, with the overwrite in the second case, the
// zeros' size never replayed; fsck finds nothing wrong.
func TestUndoCommittedByCheckpointSurvivesPowerCut(t *testing.T) {
	devName, cfg, e, f, p := fileOverFreeRoom(t)
	emuOf(t, e).FailFlush(1) // the zeros' flush
	if err := f.Truncate(5000); err == nil {
		t.Fatal("the truncate succeeded: the set-up no longer reaches the undo")
	}
	if f.f.undoOwed() {
		t.Fatal("the undo, with no room to rewrite the cut range, still owes its commit after the truncate")
	}
	e = powerCutReopen(t, e, devName, cfg)
	t.Cleanup(func() { e.Close() })
	if got := readAll(t, e, "a"); !bytes.Equal(got, p) {
		t.Fatalf("after the failed truncate and a power cut: %d bytes, want the old file whole (%d bytes)", len(got), len(p))
	}
	f, err := e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	w := owedPattern(3, 70000)
	if _, err := f.WriteAt(w, 100000); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	copy(p[100000:], w)
	e = powerCutReopen(t, e, devName, cfg)
	t.Cleanup(func() { e.Close() })
	if got := readAll(t, e, "a"); !bytes.Equal(got, p) {
		t.Fatalf("after an overwrite, its fsync and a power cut: %d bytes, want the old file with the overwrite (%d bytes)", len(got), len(p))
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	checkFsck(t, devName)
}

// fileOverFreeRoom makes a device whose file "a", fsynced, holds 60% of
// it: a truncate that cuts most of it and fails leaves an undo whose
// rewrite of the cut range needs more room than is free.
func fileOverFreeRoom(t *testing.T) (string, Config, *Engine, *File, []byte) {
	t.Helper()
	devName, cfg := memDevice(t, 16, "1M"), smallConfig()
	e := formatOpen(t, devName, cfg)
	t.Cleanup(func() { e.Close() })
	f := mustCreate(t, e, "a")
	size := e.Capacity() * 6 / 10 / (64 << 10) * (64 << 10)
	p := owedPattern(9, int(size))
	if _, err := f.WriteAt(p, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	return devName, cfg, e, f, p
}
