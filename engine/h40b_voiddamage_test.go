package engine

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	devName, path, hdrB, wantB, cfg := h40bVoidImage(t)
	h39cPatch(t, path, hdrB, func(b []byte) { b[100] ^= 0x10 })
	rep := fsckOf(t, devName)
	if len(rep.Problems) == 0 {
		t.Error("fsck reports no damage")
	}
	e, err := Open(devName, cfg)
	if err == nil {
		got := readAll(t, e, "b")
		e.Close()
		t.Fatalf("Open of a device whose fsynced record's header is damaged succeeded; b reads back %d of its %d bytes, equal: %v", len(got), len(wantB), bytes.Equal(got, wantB))
	}
	if !strings.Contains(err.Error(), "data zone") || !strings.Contains(err.Error(), "fails its checksum") {
		t.Fatalf("Open's refusal does not say what is damaged: %v", err)
	}
	// The user may accept losing that record: Open goes on past it, and
	// says what it accepted.
	acfg := cfg
	acfg.AcceptDamagedRecords = true
	e, err = Open(devName, acfg)
	if err != nil {
		t.Fatalf("Open accepting damaged records: %v", err)
	}
	accepted := false
	for _, d := range e.damage {
		accepted = accepted || strings.HasPrefix(d, "accepted: ")
	}
	e.Close()
	if !accepted {
		t.Errorf("Open accepting damaged records does not report the record it lost: %q", e.damage)
	}
}

// TestH40bUnlikeHeaderBesideVoidsIsReported: as above, but the bit
// flips in the header's magic, so that the block no longer reads as a
// header of ours: without a void, recovery reports that as possible
// damage (and goes on at the zone's next newer record); beside a void it
// ended the zone's log there, silently. A failed append's range reads as
// zeros (or as a header a void names), which this is not: it is
// reported as without a void.
func TestH40bUnlikeHeaderBesideVoidsIsReported(t *testing.T) {
	devName, path, hdrB, _, _ := h40bVoidImage(t)
	h39cPatch(t, path, hdrB, func(b []byte) { b[0] ^= 0x01 })
	rep := fsckOf(t, devName)
	if len(rep.Problems) == 0 {
		t.Fatal("fsck reports no damage")
	}
	t.Logf("fsck: %q", rep.Problems)
}

// h40bVoidImage formats an emu device, fsyncs "a" and "b", has an
// overwrite of a fail part-way (the host refuses half of it) and the
// checkpoint settling it fail at its write, so that a void lies above
// the checkpoint, and crashes. It returns the device, its image path,
// the file offset of b's record header, b's bytes and the config.
func h40bVoidImage(t *testing.T) (devName, path string, hdrB int64, wantB []byte, cfg Config) {
	t.Helper()
	devName = emuDevice(t, 16, "1M", "")
	path = strings.TrimPrefix(devName, "emu:")
	path = path[:strings.IndexByte(path, '?')]
	cfg = smallConfig()
	e := formatOpen(t, devName, cfg)
	a := createSynced(t, e, "a", bytes.Repeat([]byte{0xaa}, 64<<10))
	wantB = pattern(32<<10, 3)
	createSynced(t, e, "b", wantB).Close()
	emu := emuOf(t, e)
	hdrB = emu.FileOffset(devOf(t, e, "b", 0).hdr)
	overwriteFailingAppend(t, e, a)
	failSettleThenCrash(t, e)

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
	return devName, path, hdrB, wantB, cfg
}
