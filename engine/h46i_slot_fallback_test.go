package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"strings"
	"testing"
)

// TestH46iNewestSlotLostIsReported: a file is renamed, the rename
// synced (acknowledged durable), the daemon killed; then the emu's
// newest header slot (the zone table copy that flush wrote) is zeroed
// at rest. The emu opened from the older slot with a warning only:
// fsck said clean, the rename was gone, and Open went on to write over
// the records past the older table's write pointers, the only copy of
// what the lost table made durable. Now fsck reports it as damage, and
// Open refuses unless told to accept the loss (AcceptDamagedRecords).
func TestH46iNewestSlotLostIsReported(t *testing.T) {
	devName, path := h46iRenamedThenKilled(t)

	// Zero the slot with the higher sequence number.
	h46iZeroNewestSlot(t, path)

	rep := fsckOf(t, devName)
	if !h46iFallbackReported(rep.Problems) {
		t.Fatalf("fsck does not report the lost newest zone table: problems %q", rep.Problems)
	}
	_, err := Open(devName, smallConfig())
	if err == nil || !strings.Contains(err.Error(), "refusing to open") {
		t.Fatalf("Open of a device whose newest zone table is lost, with data past the older one's write pointers: %v, want a refusal", err)
	}
	// The refusal wrote nothing: fsck still finds it.
	if rep := fsckOf(t, devName); !h46iFallbackReported(rep.Problems) {
		t.Fatalf("after a refused Open, fsck no longer reports the lost table: problems %q", rep.Problems)
	}
	cfg := smallConfig()
	cfg.AcceptDamagedRecords = true
	e2, err := Open(devName, cfg)
	if err != nil {
		t.Fatalf("Open accepting the loss: %v", err)
	}
	if !h46iFallbackReported(e2.damage) {
		t.Errorf("Open accepting the loss does not say so: damage %q", e2.damage)
	}
	e2.Close()
	// Its flush repaired the slot: the device moved on.
	if rep := fsckOf(t, devName); h46iFallbackReported(rep.Problems) {
		t.Errorf("fsck after an accepted open still reports the old slot: %q", rep.Problems)
	}
}

// TestH46iOlderSlotLostOpens: damage to the older slot (the newest
// intact) loses nothing, and the emu opens from the newest as before.
// A device with no data past the older table's pointers (the lost table
// recorded no writes) opens too, with the fallback reported.
func TestH46iOlderSlotLostOpens(t *testing.T) {
	devName, path, e := h46iWithFile(t)
	e.Close()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, older := h46iSlots(t, f)
	if _, err := f.WriteAt(make([]byte, 64), older); err != nil {
		t.Fatal(err)
	}
	f.Close()
	rep := fsckOf(t, devName)
	if len(rep.Problems) > 0 {
		t.Fatalf("damage to the older slot reported as loss: %q", rep.Problems)
	}
	if len(rep.Notes) == 0 || !strings.Contains(rep.Notes[0], "no write a newer table claimed is lost") {
		t.Errorf("fsck does not note the damaged slot: notes %q", rep.Notes)
	}
	e2, err := Open(devName, smallConfig())
	if err != nil {
		t.Fatal(err)
	}
	e2.Close()
}

// h46iRenamedThenKilled is h46iWithFile's device after a checkpoint,
// "a" renamed to "b" and the rename synced (acknowledged durable), and
// the engine then stopped as a kill -9 stops it: the file keeps what was
// written.
func h46iRenamedThenKilled(t *testing.T) (devName, path string) {
	t.Helper()
	devName, path, e := h46iWithFile(t)
	if err := e.checkpoint(); err != nil {
		t.Fatal(err)
	}
	if err := e.Rename("a", "b"); err != nil {
		t.Fatal(err)
	}
	if err := e.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	emu := emuOf(t, e)
	e.crashForTest()
	emu.Close()
	return devName, path
}

// h46iWithFile formats an emu device of 16 zones (one-page header
// slots), opens it and creates an fsynced file "a" in it.
func h46iWithFile(t *testing.T) (devName, path string, e *Engine) {
	t.Helper()
	devName = emuDevice(t, 16, "1M", "")
	path = strings.TrimPrefix(devName, "emu:")
	path = path[:strings.IndexByte(path, '?')]
	e = formatOpen(t, devName, smallConfig())
	createSynced(t, e, "a", pattern(64<<10, 1)).Close()
	return devName, path, e
}

func h46iFallbackReported(problems []string) bool {
	for _, p := range problems {
		if strings.Contains(p, "the damaged copy may have been the newer") {
			return true
		}
	}
	return false
}

// h46iSlots returns the file offsets of the newest and older header
// slots of an emu file of one-page slots (16 zones).
func h46iSlots(t *testing.T, f *os.File) (newest, older int64) {
	t.Helper()
	var seq [2]uint64
	for i := range 2 {
		b := make([]byte, 64)
		if _, err := f.ReadAt(b, int64(i)*4096); err != nil {
			t.Fatal(err)
		}
		if string(b[:5]) != "ZFEMU" {
			t.Fatalf("slot %d has no emu magic", i)
		}
		seq[i] = binary.LittleEndian.Uint64(b[16:])
	}
	if seq[0] > seq[1] {
		return 0, 4096
	}
	return 4096, 0
}

func h46iZeroNewestSlot(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	newest, _ := h46iSlots(t, f)
	if _, err := f.WriteAt(make([]byte, 4096), newest); err != nil {
		t.Fatal(err)
	}
}

// TestH46iTornNewestSlotOpensAndIsNoted: the newest slot keeps the
// emu magic but fails its checksum, as a slot write a crash tore
// leaves it (a kill -9 between the pages of a large slot, a power cut).
// That loses nothing acknowledged, and no byte tells it from damage at
// rest: Open goes on (a start after every such crash must not need an
// option), and fsck notes it, but does not call it damage (exit 1 after
// a crash that lost nothing; the kill -9 loop wants fsck clean).
func TestH46iTornNewestSlotOpensAndIsNoted(t *testing.T) {
	devName, path := h46iRenamedThenKilled(t)

	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	newest, _ := h46iSlots(t, f)
	// Past the fixed header: zone entries changed, as a tear leaves
	// them, the magic and sequence number intact.
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xa5}, 128), newest+64); err != nil {
		t.Fatal(err)
	}
	f.Close()

	rep := fsckOf(t, devName)
	if len(rep.Problems) > 0 || !h46iFallbackReported(rep.Notes) {
		t.Fatalf("fsck of a torn newest zone table: problems %q, notes %q; want none, and a note of it", rep.Problems, rep.Notes)
	}
	e2, err := Open(devName, smallConfig())
	if err != nil {
		t.Fatalf("Open of a device whose newest slot keeps the magic (a torn write): %v, want it to open", err)
	}
	if !h46iFallbackReported(e2.deviceNotes) {
		t.Errorf("Open does not note the fallback: notes %q", e2.deviceNotes)
	}
	e2.Close()
}
