package engine

import (
	"bytes"
	"context"
	"testing"
)

// TestH42bVoidKeepsHeldOps: a checkpoint that logs the voids of failed
// appends (voidFailedLocked) and then fails leaves the operations held
// for a pack (metaLog.pend) held: the void's record does not carry them.
// Dropped there, they were applied with no record and nothing to say so,
// and the next pack went without them: a power cut that kept the log's
// unflushed writes then replayed a deferred create made after a
// deferred remove, but not the remove (the log's order, "never a later
// operation without this one", broken).
func TestH42bVoidKeepsHeldOps(t *testing.T) {
	h41bFormat(t, superPackVersion)
	devName := emuDevice(t, 16, "256K", "")
	e := formatOpen(t, devName, smallConfig())
	emu := emuOf(t, e)
	createSynced(t, e, "x", []byte("acked")).Close()
	createSynced(t, e, "y", []byte("acked")).Close()

	// An append that fails, written back without a flush: a
	// checkpoint is owed, whose voids name it.
	w := mustCreate(t, e, "w")
	if _, err := w.WriteAt(bytes.Repeat([]byte{1}, 64<<10), 0); err != nil {
		t.Fatal(err)
	}
	emu.FailWrite(1)
	_ = e.wb.SyncAll(context.Background())
	w.Close()
	if !e.failedAppend.Load() {
		t.Fatal("no append failed")
	}

	if err := e.RemoveDeferred("x"); err != nil {
		t.Fatal(err)
	}
	if !e.meta.pending.Load() {
		t.Fatal("the deferred remove is not held")
	}
	// A durable remove settles first: the checkpoint's voids land in
	// the active half, then its data flush fails (and the remove with
	// it, applied nowhere).
	emu.FailFlush(1)
	if err := e.Remove("y"); err == nil {
		t.Fatal("the remove succeeded with its settle's flush failing")
	}
	if !e.meta.pending.Load() {
		t.Error("the remove of x is no longer held, and no record carries it: the void's record, which does not, dropped it")
	}
	// A deferred create after it, landed (SyncNamespace lands what is
	// held, then its settle's flush fails again).
	c, err := e.OpenFile("c", OCreate|ODeferSync)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	emu.FailFlush(1)
	if err := e.SyncNamespace(); err == nil {
		t.Fatal("SyncNamespace succeeded with its flush failing")
	}

	// The cut keeps every write (a drive that wrote its cache).
	e.crashForTest()
	if err := emu.PowerCutKeeping(func(_ int, n int64) int64 { return n }); err != nil {
		t.Fatal(err)
	}
	emu.Close()
	e = reopen(t, devName, smallConfig())
	defer e.Close()
	got := h41bHas(t, e, "x", "y", "c")
	if got["c"] && got["x"] {
		t.Fatal("after the cut, c (created after x's remove) is there and x too: the remove was dropped")
	}
	if !got["y"] {
		t.Fatal("y, whose remove failed, is gone")
	}
}
