package engine

import (
	"bytes"
	"testing"
)

// TestFsyncAfterTheFilesZoneWentReadOnly: the zone a file appends to goes
// read-only on the device (media failure) between two of its writes. The
// fsync that meets it fails (an append failed); the file's data
// stays in the cache, and the next fsync writes it to another zone and
// succeeds; a power cut then loses nothing of it. The read-only zone,
// which can be neither finished nor reset, must not keep placement or GC
// from going on.
func TestFsyncAfterTheFilesZoneWentReadOnly(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	f := mustCreate(t, e, "a")
	first := bytes.Repeat([]byte("before "), 20000)
	if _, err := f.WriteAt(first, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	z := e.zoneAt(devOf(t, e, "a", 0).dev)
	if z.state.Load() != zoneOpen {
		t.Fatalf("set-up: a's zone %d is not open (state %d)", z.idx, z.state.Load())
	}
	if err := emuOf(t, e).ZoneReadOnly(z.idx); err != nil {
		t.Fatal(err)
	}
	second := bytes.Repeat([]byte("after! "), 20000)
	if _, err := f.WriteAt(second, int64(len(first))); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err == nil {
		t.Fatal("fsync with a's zone read-only returned nil")
	}
	var err error
	for range 3 {
		if err = f.Sync(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("fsyncs after the zone went read-only keep failing: %v", err)
	}
	want := append(append([]byte{}, first...), second...)
	e = powerCutReopen(t, e, devName, cfg)
	defer e.Close()
	if got := readAll(t, e, "a"); !bytes.Equal(got, want) {
		t.Fatalf("after a power cut: %d bytes, want the %d fsynced", len(got), len(want))
	}
	// The reopened engine finds the zone read-only in the device's
	// report: no write of its goes there.
	g := mustCreate(t, e, "b")
	for i := range 40 {
		if _, err := g.WriteAt(bytes.Repeat([]byte{byte(i)}, 100<<10), int64(i)*(100<<10)); err != nil {
			t.Fatalf("write %d after the reopen: %v", i, err)
		}
		if err := g.Sync(); err != nil {
			t.Fatalf("fsync %d after the reopen: %v", i, err)
		}
	}
}
