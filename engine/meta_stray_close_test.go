package engine

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestFailedRemoveNotReplayedAfterCleanClose: the other metadata half
// refuses its reset, a remove's record lands but reports EIO (a stray
// record), so the remove returns ErrMetaLog and x stays. A clean Close
// must not let the next Open replay the remove: Close says all data is
// durable, and x was durable before the failed remove.
//
// Failed before the fix: the remove's own switch flushes the device
// before it tries the other half's reset (writeCheckpoint), and so does
// Close (settleForClose), so the stray record was durable, and no
// checkpoint superseded it while the other half refused its reset:
// recovery replayed it. Now the checkpoint goes into the active half's
// own log after the record (supersedeStrayInHalf).
func TestFailedRemoveNotReplayedAfterCleanClose(t *testing.T) {
	e, devName, cfg := strayRemoveOnReadOnlyHalf(t)
	testHookMetaWrite = nil
	t.Logf("close: %v", e.Close())
	e2 := reopen(t, devName, cfg)
	defer e2.Close()
	if !exists(t, e2, "x") {
		t.Fatal("x, whose remove failed with ErrMetaLog, is gone after a clean Close and Open")
	}
}

// strayRemoveOnReadOnlyHalf creates and syncs x, makes the other metadata
// half refuse its reset, and fails a remove of x whose record lands but
// reports EIO, after which the metadata writes do what faults says.
func strayRemoveOnReadOnlyHalf(t *testing.T, faults ...metaFault) (*Engine, string, Config) {
	t.Helper()
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	mustCreate(t, e, "x").Close()
	if err := e.SyncNamespace(); err != nil {
		t.Fatal(err)
	}
	if err := emuOf(t, e).ZoneReadOnly(e.sb.MetaZones[1-e.meta.active]); err != nil {
		t.Fatal(err)
	}
	armMetaFaults(t, append([]metaFault{metaWriteLand}, faults...)...)
	if err := e.Remove("x"); !errors.Is(err, ErrMetaLog) {
		t.Fatalf("remove: %v; want ErrMetaLog", err)
	}
	if !exists(t, e, "x") {
		t.Fatal("x gone after a failed remove")
	}
	return e, devName, cfg
}

// TestFailedRemoveSupersededInHalfSurvivesPowerCut: the failed remove's
// switch, refused by the other half, writes a checkpoint into the active
// half's own log after the landed record (at the device's write pointer),
// so a power cut right after the remove finds x, and the log goes on in
// that half (a later operation lands, and survives a second cut).
// Failed before the fix (x gone after the cut).
func TestFailedRemoveSupersededInHalfSurvivesPowerCut(t *testing.T) {
	e, devName, cfg := strayRemoveOnReadOnlyHalf(t)
	if e.meta.stray.Load() {
		t.Fatal("the failed remove's record is not superseded")
	}
	mustCreate(t, e, "y").Close()
	if err := e.SyncNamespace(); err != nil {
		t.Fatalf("sync namespace after the in-half checkpoint: %v", err)
	}
	e = powerCutReopen(t, e, devName, cfg)
	if !exists(t, e, "x") || !exists(t, e, "y") {
		t.Fatalf("after a power cut: x %v, y %v; want both", exists(t, e, "x"), exists(t, e, "y"))
	}
	e = powerCutReopen(t, e, devName, cfg)
	defer e.Close()
	if !exists(t, e, "x") || !exists(t, e, "y") {
		t.Fatalf("after a second power cut: x %v, y %v; want both", exists(t, e, "x"), exists(t, e, "y"))
	}
}

// TestStraySettleKeepsSwitchBackoff: a settle of a stray record
// (settleStray) is a half switch: one that fails counts as a failed
// switch, and during the backoff after two in a row SyncNamespace fails
// at once with ErrMetaLog, trying no checkpoint. Failed before the fix
// (settleStray checkpointed whatever the backoff said).
func TestStraySettleKeepsSwitchBackoff(t *testing.T) {
	oldMin, oldMax := switchBackoffMin, switchBackoffMax
	switchBackoffMin, switchBackoffMax = time.Hour, time.Hour
	t.Cleanup(func() { switchBackoffMin, switchBackoffMax = oldMin, oldMax })
	// The remove's in-half checkpoint fails, and so does the first
	// settle's: two failed switches in a row.
	e, _, _ := strayRemoveOnReadOnlyHalf(t, metaWriteFail, metaWriteFail)
	defer e.Close()
	if !e.meta.stray.Load() {
		t.Fatal("stray cleared though its checkpoint failed")
	}
	if err := e.SyncNamespace(); !errors.Is(err, ErrMetaLog) {
		t.Fatalf("first sync namespace: %v; want ErrMetaLog", err)
	}
	var writes int
	testHookMetaWrite = func(*Engine, int, int64, []byte) error { writes++; return nil }
	err := e.SyncNamespace()
	testHookMetaWrite = nil
	if !errors.Is(err, ErrMetaLog) || !strings.Contains(err.Error(), "no metadata half switch before") {
		t.Fatalf("sync namespace during the backoff: %v; want ErrMetaLog naming the backoff", err)
	}
	if writes != 0 {
		t.Fatalf("sync namespace during the backoff wrote %d metadata records; want none", writes)
	}
	if !e.meta.stray.Load() {
		t.Fatal("stray cleared during the backoff")
	}
}

// TestFailedRemoveSupersededAtClose: the failed remove's own in-half
// checkpoint fails too (stray stays set), and Close, whose flush makes the
// record durable, writes the checkpoint that supersedes it into the
// active half: x is there after Open. Failed before the fix (x gone).
func TestFailedRemoveSupersededAtClose(t *testing.T) {
	e, devName, cfg := strayRemoveOnReadOnlyHalf(t, metaWriteFail)
	if !e.meta.stray.Load() {
		t.Fatal("stray cleared though its checkpoint failed")
	}
	if err := e.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	e2 := reopen(t, devName, cfg)
	defer e2.Close()
	if !exists(t, e2, "x") {
		t.Fatal("x, whose remove failed with ErrMetaLog, is gone after Close and Open")
	}
}
