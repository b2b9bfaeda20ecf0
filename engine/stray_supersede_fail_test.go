package engine

import (
	"errors"
	"testing"
)

// TestStraySupersedeFailedCheckpointKeepsLogClosed: the other metadata
// half refuses its reset; a remove of x lands its record but reports EIO
// (stray); its in-half supersede fails before its checkpoint is written
// (the device flush that precedes the checkpoint fails). The log must
// stay closed while the stray record stands: supersedeStrayInHalf set
// m.wp to the device's write pointer before writeCheckpoint(true) and
// left it there on failure, so a later durable Remove("y") (appendOp, no
// settleStray) is logged right after the stray record and acknowledged;
// a power cut then replays the failed remove of x.
func TestStraySupersedeFailedCheckpointKeepsLogClosed(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	mustCreate(t, e, "x").Close()
	mustCreate(t, e, "y").Close()
	if err := e.SyncNamespace(); err != nil {
		t.Fatal(err)
	}
	emu := emuOf(t, e)
	if err := emu.ZoneReadOnly(e.sb.MetaZones[1-e.meta.active]); err != nil {
		t.Fatal(err)
	}
	// The remove's record lands, then reports EIO. The first flush after
	// it (the failed switch's) succeeds; the second (the in-half
	// checkpoint's, before it writes) fails.
	armed := false
	testHookMetaWrite = func(e *Engine, h int, off int64, data []byte) error {
		if armed {
			return nil
		}
		armed = true
		z, zoff := e.sb.metaAt(h, off)
		if err := e.writeZone(z, zoff, data, e.meta.w); err != nil {
			t.Errorf("stray write: %v", err)
		}
		emu.FailFlush(2)
		return errors.New("injected EIO after the record landed")
	}
	t.Cleanup(func() { testHookMetaWrite = nil })
	err := e.Remove("x")
	testHookMetaWrite = nil
	if !errors.Is(err, ErrMetaLog) {
		t.Fatalf("remove x: %v; want ErrMetaLog", err)
	}
	emu.FailFlush(0)
	t.Logf("after the failed remove: stray %v, wp %d of %d", e.meta.stray.Load(), e.meta.wp, e.sb.metaHalfCap())
	if err := e.Remove("y"); err == nil {
		t.Logf("remove y acknowledged while the stray remove of x stands")
	} else {
		t.Logf("remove y: %v", err)
	}
	yGone := !exists(t, e, "y")
	e = powerCutReopen(t, e, devName, cfg)
	defer e.Close()
	if yGone && !exists(t, e, "x") {
		t.Fatal("x, whose remove failed with ErrMetaLog, is gone after a power cut, although a later remove (y) was acknowledged durable after it")
	}
}
