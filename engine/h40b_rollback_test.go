package engine

import (
	"bytes"
	"strings"
	"testing"
)

// TestH40bEmuRollbackOfFlushedDataIsReported: one bit of an fsynced
// overwrite's data, the last device flush's, flips at rest. The emu
// keeps a checksum of the data each flush adds and, finding it wrong at
// Open, takes the zone back to the flush before, as after a power cut
// during that flush: the overwrite's record vanished, "a" read its older
// bytes, and only a zns warning said so; fsck said the device was clean.
// The flush was acknowledged (the fsync returned): that is loss of
// acknowledged data, and recovery reports it (Open's log, fsck).
func TestH40bEmuRollbackOfFlushedDataIsReported(t *testing.T) {
	devName, path, e, want := h39cOverwritten(t)
	over := want[:64<<10]
	emu := emuOf(t, e)
	at := emu.FileOffset(devOf(t, e, "a", 0).dev + 8<<10)
	e.crashForTest()
	if err := emu.PowerCut(); err != nil {
		t.Fatal(err)
	}
	emu.Close()
	h39cPatch(t, path, at, func(b []byte) { b[7] ^= 0x01 })

	rep := fsckOf(t, devName)
	if !h40bRollbackReported(rep.Problems) {
		t.Errorf("fsck does not report the zone the device took back: problems %q", rep.Problems)
	}
	e, err := Open(devName, smallConfig())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer e.Close()
	if !h40bRollbackReported(e.damage) {
		t.Errorf("Open's recovery does not report the zone the device took back: damage %q", e.damage)
	}
	if got := readAll(t, e, "a"); bytes.Equal(got[:len(over)], over) {
		t.Error("a reads the overwrite its flush lost")
	}
}

func h40bRollbackReported(problems []string) bool {
	for _, p := range problems {
		if strings.Contains(p, "took back") {
			return true
		}
	}
	return false
}
