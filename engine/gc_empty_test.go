package engine

import "testing"

// emptyFullZones is the full zones that hold no valid data.
func emptyFullZones(e *Engine) []*zone {
	var out []*zone
	for _, z := range e.placer.zones {
		if z.state.Load() == zoneFull && z.valid.Load() == 0 {
			out = append(out, z)
		}
	}
	return out
}

// A file removed whole leaves full zones with nothing valid in them: one
// GC pass resets them all, their resets made durable by one device flush
// (not a pass and a flush per zone, which writers wanting a free zone
// queued behind), and they survive a power cut reset.
func TestGCResetsEmptyZonesInOnePassUnderOneFlush(t *testing.T) {
	devName := emuDevice(t, 32, "256K", "")
	cfg := smallConfig()
	cfg.Policy = PolicyMRU
	cfg.GC.Disabled = true
	e := formatOpen(t, devName, cfg)
	h := createSynced(t, e, "big", pattern(8*256<<10, 1))
	h.Close()
	keep := pattern(100<<10, 2)
	createSynced(t, e, "keep", keep).Close()
	if err := e.Remove("big"); err != nil {
		t.Fatal(err)
	}
	empty := emptyFullZones(e)
	if len(empty) < 4 {
		t.Fatalf("%d full zones empty after the remove; the test wants several", len(empty))
	}
	free := e.placer.freeCount()
	st0 := e.Stats()
	moved, err := e.gc.pass(gcBackground)
	if err != nil || !moved {
		t.Fatalf("pass: moved %v, %v", moved, err)
	}
	st := e.Stats().Sub(st0)
	if st.GCResets != int64(len(empty)) {
		t.Errorf("one pass reset %d zones; want all %d empty full zones", st.GCResets, len(empty))
	}
	if st.Flushes != 1 {
		t.Errorf("the pass ran %d device flushes; want 1 for all %d resets", st.Flushes, len(empty))
	}
	if got := e.placer.freeCount(); got != free+len(empty) {
		t.Errorf("free zones %d after the pass; want %d", got, free+len(empty))
	}
	if left := emptyFullZones(e); len(left) != 0 {
		t.Errorf("%d empty full zones left", len(left))
	}
	e = powerCutReopen(t, e, devName, cfg)
	if got := readAll(t, e, "keep"); firstDiff(got, keep) >= 0 {
		t.Error("keep differs after recovery")
	}
	if _, err := e.Stat("big"); err == nil {
		t.Error("big is back after recovery")
	}
	if left := emptyFullZones(e); len(left) != 0 {
		t.Errorf("%d empty full zones after recovery: the resets were not durable", len(left))
	}
	checkValidCounts(t, e)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	checkFsck(t, devName)
}
