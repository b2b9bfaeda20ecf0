package engine

import (
	"fmt"
	"testing"
)

// A checkpoint switches metadata zones with every data zone of the open
// budget in use and GC's zone open too: the switch must still fit the
// device's active limit. It once wrote the next metadata zone before it
// finished the old, so for a moment two were active, and this checkpoint
// failed with "too many active zones"; it now finishes the old one first
// (see also TestCheckpointSwitchAtActiveLimit).
func TestCheckpointSwitchFitsWithFullBudgetAndGCZone(t *testing.T) {
	e := formatOpen(t, emuDevice(t, 32, "256K", "&max_open=6&max_active=6"), smallConfig())
	defer e.Close()
	zcap := e.Geometry().ZoneCap
	// f0 fills a zone and goes on into a second; the others take one
	// zone each: every data zone of the budget is active.
	for i := range e.placer.budget {
		f, err := e.Create(fmt.Sprint("f", i))
		if err != nil {
			t.Fatal(err)
		}
		n := int64(8192)
		if i == 0 {
			n = zcap + 8192
		}
		if _, err := f.WriteAt(make([]byte, n), 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			// Half of f0's first zone becomes garbage: a GC victim.
			if _, err := f.WriteAt(make([]byte, zcap/2), 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	// GC copies the victim's valid half into a zone of its own.
	if moved, err := e.gc.pass(gcBackground); err != nil || !moved {
		t.Fatalf("gc pass: moved %v, %v", moved, err)
	}
	if e.Stats().GCWritten == 0 {
		t.Fatal("GC copied nothing: its zone is not active")
	}
	t.Logf("%d active zones before the checkpoint (data budget %d, device limit 6)", activeZones(t, e), e.placer.budget)
	if err := e.checkpoint(); err != nil {
		t.Fatalf("checkpoint with the data budget in use and GC's zone open: %v", err)
	}
}
