package engine

import (
	"bytes"
	"context"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestH17cFailedVoidWriteDoesNotEndSyncs: an append fails (nothing lands)
// on a device whose other metadata half refuses its reset (a zone gone
// read-only): until 207f05c the settling checkpoint went into the active
// half's own log (settleStrayLocked: writeCheckpoint(true)) and syncs
// went on. Now the checkpoint first writes an opVoid; if that one write
// fails, voidFailedLocked sets m.wp to the half's capacity ("where the
// log ends is not known") without marking the log stray, so neither the
// in-half checkpoint (no room) nor supersedeStrayInHalf (which finds the
// end from the device's write pointer; only tried when stray) can ever
// land: every later fsync, Sync and SyncNamespace fails with ErrMetaLog
// for the life of the engine, after one transient write error.
func TestH17cFailedVoidWriteDoesNotEndSyncs(t *testing.T) {
	defer func(lo, hi time.Duration) { switchBackoffMin, switchBackoffMax = lo, hi }(switchBackoffMin, switchBackoffMax)
	switchBackoffMin, switchBackoffMax = time.Millisecond, 2*time.Millisecond
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	defer e.Close()
	a := createSynced(t, e, "a", bytes.Repeat([]byte{0xaa}, 64<<10))
	emu := emuOf(t, e)
	if err := emu.ZoneReadOnly(e.sb.MetaZones[1-e.meta.active]); err != nil {
		t.Fatal(err)
	}
	if _, err := a.WriteAt(bytes.Repeat([]byte{0xcc}, 64<<10), 0); err != nil {
		t.Fatal(err)
	}
	emu.FailWrite(1) // the overwrite's append: nothing lands
	if err := e.wb.FlushFile(context.Background(), a.f.id); err == nil || !e.failedAppend.Load() {
		t.Fatal("set-up: writeback over a failing append succeeded")
	}
	var armed atomic.Bool
	armed.Store(true)
	testHookMetaWrite = func(_ *Engine, _ int, _ int64, data []byte) error {
		if !holdsCheckpoint(data) && armed.CompareAndSwap(true, false) {
			return syscall.EIO // the opVoid's write, once
		}
		return nil
	}
	defer func() { testHookMetaWrite = nil }()
	var errs []error
	for i := 0; i < 5; i++ {
		err := e.SyncNamespace()
		if err == nil {
			return
		}
		errs = append(errs, err)
		time.Sleep(10 * time.Millisecond)
	}
	if armed.Load() {
		t.Fatal("set-up: no opVoid was written")
	}
	t.Fatalf("after one failed opVoid write, 5 namespace syncs fail; the last: %v", errs[len(errs)-1])
}
