package engine

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// TestUnreadableFailedRecordDoesNotFailSyncsForever: the other metadata
// half refuses its reset (a zone gone read-only) and a remove's record
// fails with its bytes unreadable (the write pointer moved over a block
// that fails its checksum). Recovery's read of the half ends where that
// record begins, so it can never be replayed, and no checkpoint after it
// would be read either. The remove fails with ErrMetaLog; fsyncs must go
// on working, and what they acknowledge survive a power cut.
//
// Failed before the fix: the in-half supersede refused (the log ends
// before the write pointer), the stray stayed set, and every fsync failed
// with ErrMetaLog for as long as the other half refused its reset. Now
// supersedeStrayInHalf sees the log end at or before the first failed
// record (metaLog.strayFrom) and clears the stray without a checkpoint.
func TestUnreadableFailedRecordDoesNotFailSyncsForever(t *testing.T) {
	oldMin, oldMax := switchBackoffMin, switchBackoffMax
	switchBackoffMin, switchBackoffMax = time.Hour, time.Hour
	t.Cleanup(func() { switchBackoffMin, switchBackoffMax = oldMin, oldMax })
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	x := mustCreate(t, e, "x")
	if err := x.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := emuOf(t, e).ZoneReadOnly(e.sb.MetaZones[1-e.meta.active]); err != nil {
		t.Fatal(err)
	}
	armMetaFaults(t, metaWriteGarbage)
	err := e.Remove("x")
	testHookMetaWrite = nil
	if !errors.Is(err, ErrMetaLog) {
		t.Fatalf("remove: %v; want ErrMetaLog", err)
	}
	for i := range 2 {
		if _, err := x.WriteAt(bytes.Repeat([]byte{byte('A' + i)}, 4*BlockSize), 0); err != nil {
			t.Fatal(err)
		}
		if err := x.Sync(); err != nil {
			t.Fatalf("fsync %d after a failed remove whose record cannot be read: %v", i, err)
		}
	}
	// The log in the active half has ended, and the other half refuses:
	// namespace operations fail, and leave nothing to settle.
	if _, err := e.Create("y"); !errors.Is(err, ErrMetaLog) {
		t.Fatalf("create with no metadata half to log in: %v; want ErrMetaLog", err)
	}
	if err := e.SyncNamespace(); err != nil {
		t.Fatalf("sync namespace: %v", err)
	}
	x.Close()
	want := readAll(t, e, "x")
	e = powerCutReopen(t, e, devName, cfg)
	defer e.Close()
	if !exists(t, e, "x") {
		t.Fatal("x, whose remove failed, lost to a power cut")
	}
	sameBytes(t, "x after the power cut", readAll(t, e, "x"), want)
}

// TestReadableFailedRecordBehindUnreadableCheckpointKeepsFailingSyncs: the
// case that does not recover while the other half refuses its reset. The
// remove's record lands whole (recovery replays it) and the in-half
// checkpoint after it lands unreadable (a media error): recovery's read stops
// at the checkpoint, after the record, so nothing written in this
// half can supersede it. Every fsync fails with ErrMetaLog (acknowledging
// one would let the replayed remove take what it synced), and a power
// cut, with nothing acknowledged since, may replay the remove. Passes
// before and after the fix (strayFrom lies before the log's end).
func TestReadableFailedRecordBehindUnreadableCheckpointKeepsFailingSyncs(t *testing.T) {
	oldMin, oldMax := switchBackoffMin, switchBackoffMax
	switchBackoffMin, switchBackoffMax = 0, 0
	t.Cleanup(func() { switchBackoffMin, switchBackoffMax = oldMin, oldMax })
	e, _, _ := strayRemoveOnReadOnlyHalf(t, metaWriteGarbage)
	defer e.Close()
	h, err := e.Open("x")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for i := range 3 {
		if err := h.Sync(); !errors.Is(err, ErrMetaLog) {
			t.Fatalf("fsync %d with the failed remove's record readable and unsuperseded: %v; want ErrMetaLog", i, err)
		}
	}
	if !e.meta.stray.Load() {
		t.Fatal("stray cleared though the failed record is readable")
	}
}
