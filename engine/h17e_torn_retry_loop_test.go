package engine

import (
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// resetCounter counts the resets a device is asked for in one zone.
type resetCounter struct {
	zns.Device
	zone  int
	count atomic.Int64
}

func (d *resetCounter) ResetZone(z int) error {
	if z == d.zone {
		d.count.Add(1)
	}
	return d.Device.ResetZone(z)
}

// TestH17eTornHeldCheckpointBacksOff: cf75f9e has GC's retryFinish take
// a checkpoint before it finishes a torn zone recovery left held (no
// checkpoint at recovery). When the checkpoint keeps failing (here the
// other metadata half is read-only: every switch fails its reset, after
// quiescing every append and flushing the device) the zone stays held and
// is tried again after finishBackoff passes, except while unfinished
// zones take the whole budget (starved), when retryFinish skips the
// backoff: then every GC pass (a writer's too) stops all appends, flushes
// the device and fails its reset, with no bound. The metadata log's own
// switches back off after repeated failures (switchBackoff) for exactly
// this cost. Here the budget is one zone, the torn zone takes it, and 20
// passes try 20 checkpoints.
func TestH17eTornHeldCheckpointBacksOff(t *testing.T) {
	devName := emuDevice(t, 24, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	active, sb := e.meta.active, e.sb
	syncThenTearNextRecord(t, e, 16<<10)

	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.(*zns.Emu).ZoneReadOnly(sb.MetaZones[1-active]); err != nil {
		t.Fatal(err)
	}
	if err := dev.Flush(); err != nil {
		t.Fatal(err)
	}
	testHookMetaWrite = func(_ *Engine, _ int, _ int64, data []byte) error {
		if holdsCheckpoint(data) {
			return syscall.EIO
		}
		return nil
	}
	cnt := &resetCounter{Device: dev, zone: sb.MetaZones[1-active]}
	cfg.OpenZones = 1
	e, err = OpenDevice(cnt, cfg)
	testHookMetaWrite = nil
	if err != nil {
		t.Fatalf("set-up: recovery without a checkpoint: %v", err)
	}
	defer e.Close()
	if st := e.Stats(); st.ZonesUnfinished != 1 || e.placer.budget != 1 {
		t.Fatalf("set-up: %d zones unfinished, budget %d; want the torn zone taking the budget of 1", st.ZonesUnfinished, e.placer.budget)
	}
	before := cnt.count.Load()
	const passes = 20
	for range passes {
		e.gc.pass(gcBackground)
	}
	tries := cnt.count.Load() - before
	t.Logf("%d GC passes tried %d checkpoints (each quiesces appends and flushes the device)", passes, tries)
	if tries > passes/2 {
		t.Errorf("%d GC passes took %d failing checkpoints for a torn zone: no backoff while it takes the budget", passes, tries)
	}
}
