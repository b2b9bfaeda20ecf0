package engine

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// TestH40bDamagedHeaderBesideVoidsRefusesOpen: an append fails (the host
// refuses half of it) and its record is voided in the log above the
// checkpoint, whose write then fails; one bit of the header of another
// record newer than the checkpoint, fsynced before ("b"), flips at rest.
// With a void above the checkpoint, recovery took every header below a
// write pointer that fails its checksum for a failed append's range and
// ended the zone's log there: b's record and those after it in the zone
// vanished, b read short, and fsck said the device was clean. A void
// names its records: a header that still reads as ours (magic, file
// system, a number above the checkpoint) and that no void names is
// damage, as without a void: Open refuses, naming it, and fsck reports
// it.
func TestH40bDamagedHeaderBesideVoidsRefusesOpen(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	path := strings.TrimPrefix(devName, "emu:")
	path = path[:strings.IndexByte(path, '?')]
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	a := createSynced(t, e, "a", bytes.Repeat([]byte{0xaa}, 64<<10))
	wantB := pattern(32<<10, 3)
	createSynced(t, e, "b", wantB).Close()
	emu := emuOf(t, e)
	hdrB := emu.FileOffset(devOf(t, e, "b", 0).hdr)
	overwriteFailingAppend(t, e, a)
	failNextCheckpointWrite(t)
	if err := e.SyncNamespace(); err == nil {
		t.Fatal("set-up: the settling checkpoint's write did not fail")
	}
	e.crashForTest()
	emu.Close()

	// The set-up holds what the test is about: recovery of the clean
	// image (a copy) skips a voided record, and b reads whole.
	img, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	clean := filepath.Join(t.TempDir(), "clean")
	if err := os.WriteFile(clean, img, 0o644); err != nil {
		t.Fatal(err)
	}
	voided := 0
	testHookRecoverVoids = func(n int) { voided = n }
	t.Cleanup(func() { testHookRecoverVoids = nil })
	e = reopen(t, strings.Replace(devName, path, clean, 1), cfg)
	if got := readAll(t, e, "b"); !bytes.Equal(got, wantB) {
		t.Fatal("set-up: b does not read back whole from the clean image")
	}
	e.Close()
	if voided == 0 {
		t.Fatal("set-up: recovery found no void above the checkpoint")
	}

	h39cPatch(t, path, hdrB, func(b []byte) { b[100] ^= 0x10 })
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Fsck(dev)
	dev.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) == 0 {
		t.Error("fsck reports no damage")
	}
	e, err = Open(devName, cfg)
	if err == nil {
		got := readAll(t, e, "b")
		e.Close()
		t.Fatalf("Open of a device whose fsynced record's header is damaged succeeded; b reads back %d of its %d bytes, equal: %v", len(got), len(wantB), bytes.Equal(got, wantB))
	}
	if !strings.Contains(err.Error(), "data zone") || !strings.Contains(err.Error(), "fails its checksum") {
		t.Fatalf("Open's refusal does not say what is damaged: %v", err)
	}
}
