package engine

import (
	"bytes"
	"testing"
)

// TestH18eInHalfCheckpointFlushesUnvoidedRecords: d596923 voids failed
// appends in the next half when the active one has no room (a half a
// failed switch finished), with no data flush before them. When the next
// half refuses its reset (a zone gone read-only), settleStrayLocked falls
// back to a checkpoint in the active half's own log (writeCheckpoint(true),
// writeCheckpointInHalf): voidFailedLocked finds no room there, only
// warns, and the data flush makes the failed records durable unvoided;
// the checkpoint then has no room either (the half is finished). A crash
// has recovery, from the active half's checkpoint, replay a's torn
// overwrite over its fsynced bytes: EIO. The in-half path flushes though
// neither the voids nor the checkpoint that would supersede the records
// can land.
func TestH18eInHalfCheckpointFlushesUnvoidedRecords(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	synced := bytes.Repeat([]byte{0xaa}, 64<<10)
	a := createSynced(t, e, "a", synced)

	// A switch whose checkpoint write fails once: the active half is
	// finished, with no room left in it.
	failSwitch(t, e)
	emu := emuOf(t, e)
	// The other half's zone goes read-only: it refuses its reset.
	if err := emu.ZoneReadOnly(e.sb.MetaZones[1-e.meta.active]); err != nil {
		t.Fatal(err)
	}

	// a's overwrite fails part-way.
	overwriteFailingAppend(t, e, a)
	// The settle: the switch's reset is refused, the in-half checkpoint
	// has no room.
	if err := e.SyncNamespace(); err == nil {
		t.Fatal("set-up: the settle succeeded")
	} else {
		t.Logf("settle: %v", err)
	}
	e.crashForTest()
	emu.Close()

	e = reopen(t, devName, cfg)
	defer e.Close()
	readsUntorn(t, e, "a", 64<<10, "a, fsynced, after its failed overwrite (the settle fell back to an in-half checkpoint with no room) came back torn")
}
