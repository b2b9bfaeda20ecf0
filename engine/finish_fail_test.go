package engine

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/zonefold/zonefold/zns"
)

// TestFailedFinishKeepsToActiveLimit: an append fails, and so does the
// retirer's finish of its zone (the device refuses it; the zone stays
// open on the device, holding an open and an active resource). With the
// device's limits exactly at the engine's budget (one zone per file,
// one for GC, one for metadata), overwrites with GC and checkpoints must
// then never open a zone past the device's limits: no append fails but
// the one injected. Before, the retirer only logged the failure and let
// the zone leave the budget, and placement opened one zone more than the
// device allows.
func TestFailedFinishKeepsToActiveLimit(t *testing.T) {
	cfg := Config{CacheBytes: 2 << 20, DirtyLimit: 512 << 10}
	devName := emuDevice(t, 48, "256K", "&max_open=6&max_active=6")
	e := formatOpen(t, devName, cfg)
	defer e.Close()
	f, z, fill := fillThenFailAppendAndFinish(t, e)
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatalf("second fsync: %v", err)
	}
	// The retirer has tried the finish once the zone is full to
	// placement (a bound, not a decision).
	for deadline := time.Now().Add(10 * time.Second); z.state.Load() == zoneRetiring; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("zone %d still retiring 10s after its append failed", z.idx)
		}
	}
	var rz [1]zns.Zone
	if _, err := e.dev.Report(z.idx, rz[:]); err != nil {
		t.Fatal(err)
	}
	t.Logf("zone %d after the failed finish: engine state %d, device %s", z.idx, z.state.Load(), rz[0].Cond)
	over := fill
	over.RW, over.Keep, over.Ops = "randwrite", true, 2*e.Capacity()/4/8192
	_, err := RunWorkload(t.Context(), e, over)
	st := e.Stats()
	if err != nil || st.AppendErrs != 1 {
		t.Errorf("overwrites after a failed finish: %v; %d appends failed, want only the one injected", err, st.AppendErrs)
	}
	if st.ZoneFinishErrs != 1 {
		t.Errorf("Stats.ZoneFinishErrs = %d, want 1", st.ZoneFinishErrs)
	}
	t.Logf("zones unfinished after the overwrites (GC resets them): %d", st.ZonesUnfinished)
}

// fillThenFailAppendAndFinish fills e to 6/10 with four files (job.0 to
// job.3), syncs 64 KiB at the head of job.0, then makes the next append
// to job.0's zone fail and the retirer's finish of that zone fail too, and
// writes and syncs 64 KiB more (the sync may fail with EIO, nothing else).
// It returns job.0, open, the zone that failed, and the fill workload.
func fillThenFailAppendAndFinish(t *testing.T, e *Engine) (*File, *zone, Workload) {
	t.Helper()
	size := e.Capacity() * 6 / 10 / 4 / 8192 * 8192
	fill := Workload{Files: 4, BS: 8192, IODepth: 4, Size: size, RW: "write", Seed: 1}
	if _, err := RunWorkload(t.Context(), e, fill); err != nil {
		t.Fatal(err)
	}
	f, err := e.OpenFile("job.0", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{7}, 64<<10), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	z := f.f.mru.Load()
	emuOf(t, e).FailWrite(1)  // the next append, to the file's zone
	emuOf(t, e).FailFinish(1) // and the retirer's finish of that zone
	if _, err := f.WriteAt(bytes.Repeat([]byte{8}, 64<<10), 64<<10); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil && !errors.Is(err, syscall.EIO) {
		t.Fatalf("fsync over a failed append: %v", err)
	}
	return f, z, fill
}
