package engine

import (
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// TestH19eRecoveryOpensWhenTheVoidsHalfWentReadOnly: dac1ab1 has
// recovery's checkpoint append after the voids a failed switch left in
// the other metadata half instead of resetting that half. Recovery's
// handling of a zone gone read-only (recover.go: errNextHalfReset, then
// checkpointInHalf, else open without a checkpoint when it dropped
// nothing; TestRecoveryWithoutRoomForItsCheckpointOpensIfNothingDropped)
// hangs on the reset failing with errNextHalfReset. With the append,
// no reset is tried: the read-only zone (its write pointer kept, so
// nextHalfVoidsEnd matches) refuses the checkpoint's write, which is
// not errNextHalfReset, and recover returns it: Open fails for good on a
// device that, before dac1ab1, opened (nothing dropped; the voids stay
// durable in the read-only half, so a reads as fsynced).
func TestH19eRecoveryOpensWhenTheVoidsHalfWentReadOnly(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	e, _ := voidedInNextHalf(t, devName, cfg)
	if e.meta.nextVoidsEnd == 0 {
		t.Fatal("set-up: the failed switch left no voids in the next half")
	}
	other := e.sb.MetaZones[1-e.meta.active]
	crashEmu(t, e)

	// The crash image: the half holding the voids goes read-only.
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.(*zns.Emu).ZoneReadOnly(other); err != nil {
		t.Fatal(err)
	}
	if err := dev.Flush(); err != nil {
		t.Fatal(err)
	}
	dev.Close()

	e, err = Open(devName, cfg)
	if err != nil {
		t.Fatalf("open with the half holding the voids read-only (nothing dropped): %v", err)
	}
	defer e.Close()
	readsUntorn(t, e, "a", 64<<10, "a, fsynced, its failed overwrite voided in the half gone read-only")
}
