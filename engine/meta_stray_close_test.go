package engine

import (
	"errors"
	"testing"
)

// TestFailedRemoveNotReplayedAfterCleanClose: the other metadata half
// refuses its reset, a remove's record lands but reports EIO (a stray
// record), so the remove returns ErrMetaLog and x stays. A clean Close
// must not let the next Open replay the remove: Close says all data is
// durable, and x was durable before the failed remove.
//
// Fails today (hence skipped): the remove's own switch flushes the device
// before it tries the other half's reset (writeCheckpoint), and Close's
// flush (settleForClose) does too, so the stray record is durable; no
// checkpoint can supersede it while the other half refuses its reset, and
// recovery replays it. A fix would write the superseding checkpoint into
// the active half's own log (as recovery does, checkpointInHalf), after
// reading the zone's real write pointer. (A power cut instead of Close is
// the "operation in flight at a crash" case ErrMetaLog documents.)
func TestFailedRemoveNotReplayedAfterCleanClose(t *testing.T) {
	t.Skip("known: a stray remove record is replayed after a clean Close while the other metadata half refuses its reset (see comment)")
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
	armMetaFaults(t, metaWriteLand)
	err := e.Remove("x")
	testHookMetaWrite = nil
	if !errors.Is(err, ErrMetaLog) {
		t.Fatalf("remove: %v; want ErrMetaLog", err)
	}
	if !exists(t, e, "x") {
		t.Fatal("x gone after a failed remove")
	}
	t.Logf("close: %v", e.Close())
	e2 := reopen(t, devName, cfg)
	defer e2.Close()
	if !exists(t, e2, "x") {
		t.Fatal("x, whose remove failed with ErrMetaLog, is gone after a clean Close and Open")
	}
}
