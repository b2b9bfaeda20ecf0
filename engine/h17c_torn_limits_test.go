package engine

import (
	"context"
	"syscall"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// TestH17cTornZonesCountedWhenRecoveryKeepsZonesOpen: d926251 leaves a
// torn zone active until recovery's checkpoint is durable, and without
// one marks it unfinished (it keeps its place in the device's limits).
// But settleZone decides which cleanly written zones stay open against
// budget-unfinished while the torn zones are not counted yet (they are
// only listed, and marked after the scan), so recovery keeps the whole
// budget open beside them: open + unfinished exceeds the budget, and the
// device's active zones reach its limit before GC has opened its zone.
// Before d926251 the torn zone was finished in place.
func TestH17cTornZonesCountedWhenRecoveryKeepsZonesOpen(t *testing.T) {
	devName := emuDevice(t, 32, "256K", "&max_open=6&max_active=6")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	active, sb := e.meta.active, e.sb
	budget := e.placer.budget
	files := fillBudgetWithGCVictim(t, e)
	if err := e.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Logf("before the crash: %d active zones, budget %d, open %d", activeZones(t, e), budget, e.Stats().OpenZones)
	// The last write, to f1's zone, torn by the power cut.
	if _, err := files[1].WriteAt(make([]byte, 32<<10), 8192); err != nil {
		t.Fatal(err)
	}
	if err := e.wb.FlushFile(context.Background(), files[1].f.id); err != nil {
		t.Fatal(err)
	}
	emu := emuOf(t, e)
	e.crashForTest()
	if err := emu.TearLastWrite(BlockSize + 16<<10); err != nil {
		t.Fatal(err)
	}
	if err := emu.ZoneReadOnly(sb.MetaZones[1-active]); err != nil {
		t.Fatal(err)
	}
	if err := emu.Flush(); err != nil {
		t.Fatal(err)
	}
	emu.Close()

	// Recovery without a checkpoint (the other half read-only, the
	// checkpoint in its own half fails).
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	testHookMetaWrite = func(_ *Engine, _ int, _ int64, data []byte) error {
		if holdsCheckpoint(data) {
			return syscall.EIO
		}
		return nil
	}
	e, err = OpenDevice(dev, cfg)
	testHookMetaWrite = nil
	if err != nil {
		t.Fatalf("set-up: recovery without a checkpoint: %v", err)
	}
	defer e.Close()
	st := e.Stats()
	act := deviceActiveDataZones(t, e)
	t.Logf("after recovery: open %d, unfinished %d, budget %d, GC streams %d, device active data zones %d, all active %d (limit 6)",
		st.OpenZones, st.ZonesUnfinished, e.placer.budget, e.placer.gcStreams, act, activeZones(t, e))
	if st.ZonesUnfinished == 0 {
		t.Fatal("set-up: no torn zone left unfinished")
	}
	if st.OpenZones+st.ZonesUnfinished > e.placer.budget {
		t.Errorf("recovery keeps %d zones open beside %d unfinished (torn): %d data zones count against a budget of %d; with GC's zone and the metadata zone the device is past its limit",
			st.OpenZones, st.ZonesUnfinished, st.OpenZones+st.ZonesUnfinished, e.placer.budget)
	}
}
