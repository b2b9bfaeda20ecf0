package engine

import (
	"errors"
	"testing"
)

// TestH42eLandedPackSupersededInHalfIsNotUnlogged: a pack whose write
// fails but lands whole (stray), while the other metadata half refuses
// its reset, is superseded by a checkpoint in its own half's log
// (supersedeStrayInHalf), which holds its operations. landPendingLocked
// set unlogged after that switch failed, as if nothing held them: every
// acknowledging flush then owed one more checkpoint in a half that is
// filling (writeOp sets it before its switch, whose checkpoint clears
// it).
func TestH42eLandedPackSupersededInHalfIsNotUnlogged(t *testing.T) {
	e, x := heldPackBesideReadOnlyHalf(t)
	ck := e.stats.checkpoints.Load()
	armMetaFaults(t, metaWriteLand)
	err := x.Sync() // lands the pack, whose write "fails"
	testHookMetaWrite = nil
	if !errors.Is(err, ErrMetaLog) {
		t.Fatalf("fsync landing a pack that fails: %v; want ErrMetaLog", err)
	}
	if e.stats.checkpoints.Load() == ck {
		t.Fatal("no checkpoint superseded the landed pack in its half")
	}
	if e.meta.stray.Load() {
		t.Fatal("the landed pack is still stray")
	}
	if e.unlogged.Load() {
		t.Error("the pack's operations count as unlogged, though the checkpoint that superseded it holds them")
	}
}
