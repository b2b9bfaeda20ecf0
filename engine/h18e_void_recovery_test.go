package engine

import (
	"bytes"
	"testing"
)

// TestH18eRecoveryCheckpointResetsTheHalfHoldingVoids: d596923 has a
// switch void failed appends at the start of the next half, and recovery
// take opVoids numbered above the chosen checkpoint from that other half
// (recover.go otherVoids). But recovery's own checkpoint (writeCheckpoint,
// failedSeqs empty in the new session) resets that other half first, then
// writes its checkpoint there: the voids it took are in memory only, and
// nothing logs them again before the reset. If that checkpoint does not
// land (its write fails here; a power cut there does the same), the next
// recovery, from the same old checkpoint, finds no voids and replays a's
// torn overwrite over its fsynced bytes: EIO.
func TestH18eRecoveryCheckpointResetsTheHalfHoldingVoids(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	synced := bytes.Repeat([]byte{0xaa}, 64<<10)
	a := createSynced(t, e, "a", synced)

	// TestH17eVoidAfterFailedSwitchHasNoRoom's set-up: the voids go to
	// the next half, the checkpoint after them fails, a power cut.
	failSwitch(t, e)
	overwriteFailingAppend(t, e, a)
	failSettleThenCrash(t, e)

	// The first recovery takes the voids from the other half (this much
	// d596923 fixed); its own checkpoint's write fails.
	failNextCheckpointWrite(t)
	e2, err := Open(devName, cfg)
	testHookMetaWrite = nil
	if err != nil {
		t.Logf("first recovery: %v", err)
	} else {
		t.Log("first recovery opened")
		crashEmu(t, e2)
	}

	e = reopen(t, devName, cfg)
	defer e.Close()
	readsUntorn(t, e, "a", 64<<10, "a, fsynced, after its failed overwrite, and a recovery whose checkpoint did not land")
}
