package engine

import (
	"bytes"
	"testing"
)

// TestH17eVoidAfterFailedSwitchHasNoRoom: 8f509ca says every half keeps
// metaVoidRoom for the opVoid before a flush, "a log other records filled
// to the end is no exception". But a half switch whose checkpoint write
// fails (once, here) has finished the active half first (finishMetaHalf)
// and set its log full (m.wp = cap), while the half stays active: the
// room is gone with it. An append that fails after that is voided by the
// next settling checkpoint's voidFailedLocked, which finds no room,
// warns, and the checkpoint's data flush makes the torn record durable
// unvoided. A power cut before that checkpoint lands (its write fails
// here) has recovery, from the old half's checkpoint, replay the torn
// record over a's fsynced bytes: EIO.
func TestH17eVoidAfterFailedSwitchHasNoRoom(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	synced := bytes.Repeat([]byte{0xaa}, 64<<10)
	a := createSynced(t, e, "a", synced)

	// A switch whose checkpoint write fails once.
	cerr := failSwitch(t, e)
	t.Logf("failed switch: %v (half %d at %d of %d)", cerr, e.meta.active, e.meta.wp, e.sb.metaHalfCap())

	// a's overwrite fails part-way.
	overwriteFailingAppend(t, e, a)
	// The settling checkpoint: its data flush, then a power cut before
	// it lands.
	failSettleThenCrash(t, e)

	e = reopen(t, devName, cfg)
	defer e.Close()
	readsUntorn(t, e, "a", 64<<10, "a, fsynced, after its failed overwrite (the half a failed switch finished had no room to void it) came back torn")
}

// failSwitch has a metadata half switch fail at its checkpoint's write:
// the active half is left finished, with no room, and stays active. It
// returns the switch's error.
func failSwitch(t *testing.T, e *Engine) error {
	t.Helper()
	failNextCheckpointWrite(t)
	e.nsMu.RLock()
	err := e.checkpoint()
	e.nsMu.RUnlock()
	testHookMetaWrite = nil
	if err == nil {
		t.Fatal("set-up: the switch's checkpoint write did not fail")
	}
	return err
}
