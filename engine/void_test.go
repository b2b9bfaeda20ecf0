package engine

import (
	"bytes"
	"context"
	"testing"
)

// TestVoidedRecordNumberIsNeverHandedOutAgain: an append fails with
// nothing of it on the device, the checkpoint that settles it logs its
// opVoid and flushes, and its own write fails (a crash would lose it the
// same way). Recovery from the previous checkpoint finds the number only
// in the opVoid: it must still never hand it out again, or a later record
// under that number would be skipped by a recovery that reads the opVoid.
func TestVoidedRecordNumberIsNeverHandedOutAgain(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	a := createSynced(t, e, "a", bytes.Repeat([]byte{0xaa}, 64<<10))
	if _, err := a.WriteAt(bytes.Repeat([]byte{0xcc}, 64<<10), 0); err != nil {
		t.Fatal(err)
	}
	emu := emuOf(t, e)
	emu.FailWrite(1) // the overwrite's append: nothing lands
	if err := e.wb.FlushFile(context.Background(), a.f.id); err == nil {
		t.Fatal("set-up: writeback over a failing append succeeded")
	}
	e.failedMu.Lock()
	failed := append([]uint64(nil), e.failedSeqs...)
	e.failedMu.Unlock()
	if len(failed) != 1 {
		t.Fatalf("set-up: %d failed records, want 1", len(failed))
	}
	failNextCheckpointWrite(t)
	if err := e.SyncNamespace(); err == nil {
		t.Fatal("set-up: the settling checkpoint's write did not fail")
	}
	if st := e.Stats(); st.DevMetaOther == 0 {
		t.Fatal("no opVoid was logged before the checkpoint's flush")
	}
	e.crashForTest()
	emu.Close()

	e = reopen(t, devName, cfg)
	defer e.Close()
	// Recovery's own checkpoint took the next number.
	if got := e.seq.Load(); got <= failed[0] {
		t.Fatalf("after recovery the last number handed out is %d, at or below the voided record's %d: the number was handed out again", got, failed[0])
	}
	if got := readAll(t, e, "a"); !bytes.Equal(got, bytes.Repeat([]byte{0xaa}, 64<<10)) {
		t.Fatal("a differs from its fsynced bytes")
	}
}
