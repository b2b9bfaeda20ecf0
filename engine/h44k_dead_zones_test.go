package engine

import (
	"testing"
	"time"
)

// Full zones left holding nothing valid (their files removed or renamed
// over) are reset lazily: GC resets them all, without copying, in the
// first pass that runs (resetEmpty), which the background collector runs
// only below GC.Low free zones and a writer short of zones runs itself.
// So they cost a writer neither ENOSPC nor a copy: a write bigger than
// the free zones succeeds with GC copying nothing. Close resets none of
// them it did not log (they are not free space the next Open needs to
// find any other way), and the next Open resets every one after its
// checkpoint (deadZones, resetDeadZones): right after it, every zone
// holding no valid data is free.
func TestH44kDeadZonesCostNoSpaceAndOpenResetsThem(t *testing.T) {
	const zones, zoneSize = 160, 256 << 10
	devName := emuDevice(t, zones, "256K", "")
	cfg := smallConfig()
	cfg.GC.Disabled = true // only writers run GC: no background pass decides what is left
	e := formatOpen(t, devName, cfg)
	// Fill most of the device, then remove it all: its full zones are dead.
	fill := func(name string, n int, seed byte) {
		h := mustCreate(t, e, name)
		chunk := pattern(zoneSize, seed)
		for i := 0; i < n; i++ {
			if _, err := h.WriteAt(chunk, int64(i)*zoneSize); err != nil {
				t.Fatalf("write %s at zone %d of %d: %v", name, i, n, err)
			}
		}
		if err := h.Sync(); err != nil {
			t.Fatalf("sync %s: %v", name, err)
		}
		h.Close()
	}
	fill("a", 110, 1)
	if err := e.Remove("a"); err != nil {
		t.Fatal(err)
	}
	dead := len(emptyFullZones(e))
	st := e.Stats()
	t.Logf("after removing a: %d dead full zones, %d free, %d data zones, available %d MiB", dead, st.FreeZones, st.DataZones, e.Available()>>20)
	if dead < 100 {
		t.Fatalf("%d dead zones after the remove; the test wants about 110", dead)
	}
	if st.FreeZones >= dead {
		t.Fatalf("%d free zones beside %d dead ones: the next write would not need them", st.FreeZones, dead)
	}
	// Garbage counts as available: the dead zones are in it.
	if av, want := e.Available(), int64(dead)*zoneSize; av < want {
		t.Errorf("available %d bytes with %d dead zones; want at least their %d bytes", av, dead, want)
	}
	// A write that needs more zones than are free takes the dead ones,
	// reset by writers' GC passes that copy nothing.
	st0 := e.Stats()
	fill("b", st.FreeZones+40, 2)
	d := e.Stats().Sub(st0)
	t.Logf("writing b (%d zones): gc resets %d, copied %d bytes, runs %d, flushes %d", st.FreeZones+40, d.GCResets, d.GCCopied, d.GCRuns, d.Flushes)
	if d.GCCopied != 0 || d.GCWritten != 0 {
		t.Errorf("GC copied %d bytes (wrote %d) while dead zones were there to reset", d.GCCopied, d.GCWritten)
	}
	if d.GCResets == 0 {
		t.Error("b took more zones than were free, and GC reset none")
	}
	// Dead zones go many to a pass, their resets under one flush
	// (resetEmpty), not a pass and a flush each.
	if most := (d.GCResets + maxEmptyResets - 1) / maxEmptyResets; d.GCRuns > most {
		t.Errorf("GC ran %d passes to reset %d dead zones; want at most %d", d.GCRuns, d.GCResets, most)
	}
	if err := e.Remove("b"); err != nil {
		t.Fatal(err)
	}
	keep := pattern(3*zoneSize, 3)
	createSynced(t, e, "keep", keep).Close()
	dead = len(emptyFullZones(e))
	t.Logf("before close: %d dead full zones, %d free", dead, e.Stats().FreeZones)
	if dead < 40 {
		t.Fatalf("%d dead zones before close; the test wants many", dead)
	}
	availBefore := e.Available()
	start := time.Now()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	closeTook := time.Since(start)
	start = time.Now()
	e = reopen(t, devName, cfg)
	openTook := time.Since(start)
	st = e.Stats()
	t.Logf("close %v; open %v resetting %d dead zones; after open: %d free of %d data zones", closeTook, openTook, dead, st.FreeZones, st.DataZones)
	if left := emptyFullZones(e); len(left) != 0 {
		t.Errorf("%d dead zones after open; want every one reset", len(left))
	}
	// df reads the same before and after: the dead zones' bytes counted
	// as available while they waited for their reset.
	if av := e.Available(); av != availBefore {
		t.Errorf("available %d bytes after open; %d before close", av, availBefore)
	}
	if got := readAll(t, e, "keep"); firstDiff(got, keep) >= 0 {
		t.Error("keep differs after reopen")
	}
	checkValidCounts(t, e)
	// The same open with no dead zone to reset, for the log: what the
	// resets above added to it.
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	e = reopen(t, devName, cfg)
	t.Logf("open with no dead zone: %v", time.Since(start))
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}
