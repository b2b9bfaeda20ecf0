package engine

// A failed truncate whose cut range is larger than the device's free
// room (found by review rev53).

import (
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
	emuOf(t, e).FailFlush(1) // the zeros' flush: a transient EIO
	err := f.Truncate(5000)
	t.Logf("truncate of a %d-byte file (capacity %d) to 5000: %v", size, e.Capacity(), err)
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
