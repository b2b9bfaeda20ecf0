package engine

import (
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// TestH19aEmptiedZonesComeBackAfterAFailedGCPass: fill a null: device
// (which keeps no data, so GC can copy nothing) until ENOSPC: the
// writer's GC passes fail each victim they try (errNoDataKept) and
// victimFailed leaves those zones alone for 10 s and more. Then remove
// every file: those zones hold nothing valid, and their reset needs no
// read. A write must fit again at once; it gets ENOSPC instead, because
// resetEmpty skips a zone that failedLately although the failure was of
// a copy that an empty zone no longer needs.
func TestH19aEmptiedZonesComeBackAfterAFailedGCPass(t *testing.T) {
	dev, err := zns.Open("null:?size=6M&zone_size=256K", zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := FormatAndOpen(dev, Config{CacheBytes: 2 << 20, DirtyLimit: 512 << 10, MaxOrder: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	buf := make([]byte, 48<<10)
	var names []string
	full := false
	for i := 0; !full; i++ {
		name := fmt.Sprint("f", i)
		h, err := e.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
		_, err = h.WriteAt(buf, 0)
		if err == nil {
			err = h.Sync()
		}
		h.Close()
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			full = true
		}
	}
	st := e.Stats()
	t.Logf("%d files; GC victims failed %d, free zones %d", len(names), st.GCVictimsFailed, st.FreeZones)
	for _, name := range names {
		if err := e.Remove(name); err != nil {
			t.Fatal(err)
		}
	}
	h, err := e.Create("after")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	_, err = h.WriteAt(make([]byte, 256<<10), 0)
	if err == nil {
		err = h.Sync()
	}
	if err != nil {
		var empty []int
		for _, z := range e.ZoneValidity() {
			if z.State == "full" && z.Valid == 0 {
				empty = append(empty, z.Zone)
			}
		}
		t.Fatalf("every file removed, %d full zones empty (%v), yet writing 256 KiB: %v", len(empty), empty, err)
	}
}

// TestH19aEmptiedFailedVictimIsResetAtOnce: the same on a device that
// keeps data. A full device; GC's victims fail their reads (a passing
// fault) and victimFailed leaves them for 10 s. The fault clears and
// every file is removed: the zones hold nothing valid and their reset
// reads nothing. A writer must get room from them at once; resetEmpty
// (collector.resetEmpty) skips them as failedLately, and the writer gets
// the old read's EIO ("zone 2 ... failed; retried in 9.96s") on a device
// whose data zones are all empty.
func TestH19aEmptiedFailedVictimIsResetAtOnce(t *testing.T) {
	cfg := Config{CacheBytes: 2 << 20, DirtyLimit: 1 << 20}
	e, bz := openBadZones(t, cfg)
	defer e.Close()
	const size = 100000
	names := fillWithFiles(t, e, size)
	removeOneFromZones(t, e, names, 8)
	// Every full zone fails its reads: the writes' GC passes fail them
	// all (with background GC on, more zones fill meanwhile: they go
	// bad too, until a write fails).
	var err error
	for i := 0; err == nil && i < 50; i++ {
		bz.mu.Lock()
		for _, z := range e.placer.zones {
			if z.state.Load() == zoneFull {
				bz.bad[z.idx] = true
			}
		}
		bz.mu.Unlock()
		f := mustCreate(t, e, fmt.Sprint("late", i))
		_, err = f.WriteAt(make([]byte, size), 0)
		if err == nil {
			err = f.Sync()
		}
		f.Close()
	}
	failed := e.Stats().GCVictimsFailed
	if err == nil || failed == 0 {
		t.Fatalf("set-up: the write with every victim failing: %v, %d victims failed", err, failed)
	}
	bz.mu.Lock()
	clear(bz.bad)
	bz.mu.Unlock()
	for _, n := range e.List() {
		if err := e.Remove(n.Name); err != nil {
			t.Fatal(err)
		}
	}
	f := mustCreate(t, e, "after")
	defer f.Close()
	t.Logf("%d victims failed; %d free zones after removing every file", failed, e.Stats().FreeZones)
	want := make([]byte, e.Capacity()*7/10)
	_, err = f.WriteAt(want, 0)
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		var empty []int
		for _, z := range e.ZoneValidity() {
			if z.State == "full" && z.Valid == 0 {
				empty = append(empty, z.Zone)
			}
		}
		t.Fatalf("every file removed, full zones %v hold nothing valid, %d free; a %d-byte write: %v", empty, e.Stats().FreeZones, len(want), err)
	}
}
