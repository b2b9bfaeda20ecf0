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
	for _, f := range fillBudgetWithGCVictim(t, e) {
		defer f.Close()
	}
	if e.Stats().GCWritten == 0 {
		t.Fatal("GC copied nothing: its zone is not active")
	}
	t.Logf("%d active zones before the checkpoint (data budget %d, device limit 6)", activeZones(t, e), e.placer.budget)
	if err := e.checkpoint(); err != nil {
		t.Fatalf("checkpoint with the data budget in use and GC's zone open: %v", err)
	}
}

// fillBudgetWithGCVictim puts every data zone of e's open budget to use:
// one file a zone, the first file's data filling a zone and going on
// into a second, then half of that first zone overwritten (garbage), so
// that a GC pass (run here) copies its valid half into a zone of GC's
// own. It returns the files, open and synced.
func fillBudgetWithGCVictim(t *testing.T, e *Engine) []*File {
	t.Helper()
	zcap := e.Geometry().ZoneCap
	var files []*File
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
			if _, err := f.WriteAt(make([]byte, zcap/2), 0); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
		}
		files = append(files, f)
	}
	if moved, err := e.gc.pass(gcBackground); err != nil || !moved {
		t.Fatalf("gc pass: moved %v, %v", moved, err)
	}
	return files
}
