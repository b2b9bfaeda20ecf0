package engine

import (
	"bytes"
	"syscall"
	"testing"
)

// TestFailedResetLogLeavesNoZoneWithGC: resetEmpty marks every empty full
// zone zoneGC, then logs their resets one by one. When the log fails part
// way (both metadata halves refuse writes), every one of them must go
// back to full, where a later pass finds it again; the zones after the
// failing record stayed zoneGC, in no list, and GC never took them
// again (TestGCBacksOffWhileWritesFail stopped short of GC.Low).
func TestFailedResetLogLeavesNoZoneWithGC(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	cfg.GC.Disabled = true
	e := formatOpen(t, devName, cfg)
	defer e.Close()
	f := mustCreate(t, e, "a")
	if _, err := f.WriteAt(bytes.Repeat([]byte{7}, 4<<20), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Remove("a"); err != nil {
		t.Fatal(err)
	}
	empty := 0
	for _, z := range e.placer.zones {
		if z.state.Load() == zoneFull && z.valid.Load() == 0 {
			empty++
		}
	}
	if empty < 2 {
		t.Fatalf("set-up: %d empty full zones, want at least 2", empty)
	}
	// The first reset record lands; every metadata write after it fails
	// (the record, and the other half's checkpoint a failed write
	// switches to).
	writes := 0
	testHookMetaWrite = func(*Engine, int, int64, []byte) error {
		if writes++; writes > 1 {
			return syscall.EIO
		}
		return nil
	}
	e.gc.mu.Lock()
	_, err := e.gc.resetEmpty()
	e.gc.mu.Unlock()
	testHookMetaWrite = nil
	if err == nil {
		t.Fatal("set-up: the reset log did not fail")
	}
	t.Logf("resetEmpty: %v", err)
	for _, z := range e.placer.zones {
		if z.state.Load() == zoneGC {
			t.Errorf("zone %d left with GC (zoneGC) after its reset's log failed: no pass takes it again", z.idx)
		}
	}
}
