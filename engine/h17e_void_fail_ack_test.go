package engine

import (
	"bytes"
	"io"
	"sync/atomic"
	"syscall"
	"testing"
)

// TestH17eFailedVoidWriteStillAcksDurableOp: appendOp voids, before a
// durable operation's flush, an append that failed after its settle
// (8f509ca). When that void's write fails, voidFailedLocked marks the log
// stray and gives up (a warning), but returns nothing: appendOp flushes,
// which makes the failed append's torn record durable with no void and no
// checkpoint after it, and acknowledges the remove, while the stray mark
// says nothing may be acknowledged until a checkpoint supersedes the log.
// After a power cut recovery, from the old checkpoint, replays the torn
// record over a's fsynced bytes: EIO.
func TestH17eFailedVoidWriteStillAcksDurableOp(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	synced := bytes.Repeat([]byte{0xaa}, 64<<10)
	a := createSynced(t, e, "a", synced)
	createSynced(t, e, "b", bytes.Repeat([]byte{0xbb}, BlockSize)).Close()
	if _, err := a.WriteAt(bytes.Repeat([]byte{0xcc}, 64<<10), 0); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	var aerr error
	testHookMetaWrite = func(e *Engine, _ int, _ int64, data []byte) error {
		if holdsCheckpoint(data) {
			return nil
		}
		switch calls.Add(1) {
		case 1: // the remove's record: a's writeback fails beside it
			aerr = failAppendOf(t, e, a)
		case 2: // appendOp's opVoid
			return syscall.EIO
		}
		return nil
	}
	defer func() { testHookMetaWrite = nil }()
	rerr := e.Remove("b")
	testHookMetaWrite = nil
	t.Logf("a's writeback: %v; remove b: %v; metadata writes %d; stray %v", aerr, rerr, calls.Load(), e.meta.stray.Load())
	if aerr == nil || calls.Load() < 2 {
		t.Fatal("set-up: a's writeback did not fail beside the remove's record, or no void was written")
	}
	if rerr != nil {
		t.Skipf("the remove failed (%v): nothing acknowledged after the failed append", rerr)
	}
	emu := emuOf(t, e)
	e.crashForTest()
	if err := emu.PowerCut(); err != nil {
		t.Fatal(err)
	}
	emu.Close()

	e = reopen(t, devName, cfg)
	defer e.Close()
	f, err := e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 64<<10)
	n, err := f.ReadAt(got, 0)
	if err != nil && err != io.EOF {
		t.Fatalf("a, fsynced, after a failed overwrite whose void failed and an acknowledged remove: read %d bytes: %v", n, err)
	}
}
