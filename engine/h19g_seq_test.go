package engine

import (
	"bytes"
	"testing"
)

// A record header (checksum valid; a pad, so nothing is replayed) with
// sequence number 2^64-1: recovery bumps e.seq to it ("a number found in
// any record header is never handed out again"), and the next number
// wraps to 0. Recovery's own checkpoint and everything after it are then
// numbered below the checkpoint it opened from: a file created and
// fsynced after Open is gone after a crash. Open should refuse a device
// whose numbers are exhausted (or bound them), not lose acknowledged
// data. Cause: recover.go scanDataZone/bumpMax and every e.seq.Add(1)
// without an overflow check.
func TestH19gRecordSeqMaxWrapsAndLosesFsyncedFile(t *testing.T) {
	devName, e, data := h19gBase(t)
	h19gCraftRecord(t, e, &RecordHeader{Kind: KindPad, Seq: ^uint64(0)}, nil)
	e.crashForTest()
	e2, err := h19gOpen(t, devName)
	if err != nil {
		return // refused with an error: fine
	}
	h := createSynced(t, e2, "c", []byte("cccc"))
	h.Close()
	e2.crashForTest()
	e3, err := h19gOpen(t, devName)
	if err != nil {
		t.Fatalf("reopen after a crash: %v", err)
	}
	defer e3.Close()
	if _, err := e3.Stat("c"); err != nil {
		t.Errorf("c, created and fsynced after Open, lost in a crash: %v", err)
	}
	if got := readAll(t, e3, "a"); !bytes.Equal(got, data) {
		t.Errorf("a: %d bytes, want %d", len(got), len(data))
	}
}
