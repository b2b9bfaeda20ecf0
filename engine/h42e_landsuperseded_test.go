package engine

import (
	"errors"
	"testing"
	"time"
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
	oldMin, oldMax := switchBackoffMin, switchBackoffMax
	switchBackoffMin, switchBackoffMax = time.Hour, time.Hour
	t.Cleanup(func() { switchBackoffMin, switchBackoffMax = oldMin, oldMax })
	h41bFormat(t, superPackVersion)
	devName := emuDevice(t, 16, "1M", "")
	e := formatOpen(t, devName, smallConfig())
	defer e.Close()
	x := createSynced(t, e, "x", []byte("acked"))
	defer x.Close()
	h, err := e.OpenFile("held", OCreate|ODeferSync)
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	if err := emuOf(t, e).ZoneReadOnly(e.sb.MetaZones[1-e.meta.active]); err != nil {
		t.Fatal(err)
	}
	ck := e.stats.checkpoints.Load()
	armMetaFaults(t, metaWriteLand)
	err = x.Sync() // lands the pack, whose write "fails"
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
