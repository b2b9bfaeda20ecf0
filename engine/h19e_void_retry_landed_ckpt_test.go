package engine

import (
	"bytes"
	"testing"
)

// TestH19eVoidRetryKeepsVoidsWhenTheWholeCheckpointLanded: dac1ab1's
// retry appends after the voids a failed switch left in the next half
// only if the device's write pointer is where they end. A switch whose
// checkpoint write landed whole, and only the flush after it failed,
// leaves the pointer past a checkpoint that reads whole (recovery takes
// it: a crash right there recovers from it, a read as fsynced). The
// retry counts that as "part of the failed checkpoint landed" and
// resets the half: the voids and that checkpoint are gone (the emu's
// reset is durable at once) until the voids are written again, and a
// failed void write then a crash replays a's torn overwrite over its
// fsynced bytes: EIO. The log reads whole to the write pointer, so the
// retry now appends after that checkpoint (metaLog.nextVoidsEnd moves
// past it once it is written), as supersedeStrayInHalf appends after a
// whole log.
func TestH19eVoidRetryKeepsVoidsWhenTheWholeCheckpointLanded(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	a := createSynced(t, e, "a", bytes.Repeat([]byte{0xaa}, 64<<10))
	failSwitch(t, e)
	overwriteFailingAppend(t, e, a)

	// The settling switch: voids in the next half, its data flush, its
	// checkpoint written whole, and the flush after it failing.
	emu := emuOf(t, e)
	testHookMetaWrite = func(_ *Engine, _ int, _ int64, data []byte) error {
		if holdsCheckpoint(data) {
			emu.FailFlush(1)
		}
		return nil
	}
	t.Cleanup(func() { testHookMetaWrite = nil })
	err := e.SyncNamespace()
	testHookMetaWrite = nil
	if err == nil {
		t.Fatal("set-up: the settling switch's flush after its checkpoint did not fail")
	}
	next := 1 - e.meta.active
	if e.meta.nextVoidsEnd == 0 {
		t.Fatalf("set-up: the failed switch left no voids in the next half: %v", err)
	}
	t.Logf("settling switch: %v (voids end at %d in half %d)", err, e.meta.nextVoidsEnd, next)

	// The retry; its first metadata write fails, then a crash.
	retryFailingThenCrash(t, e)

	e = reopen(t, devName, cfg)
	defer e.Close()
	readsUntorn(t, e, "a", 64<<10, "a, fsynced, after its failed overwrite was voided in the next half, a switch whose checkpoint landed whole there but failed its flush, and a retry")
}
