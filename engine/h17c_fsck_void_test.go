package engine

import (
	"bytes"
	"testing"
)

// TestH17cFsckKnowsVoidedRecords: an overwrite's append fails part-way
// (the host file refuses its second half), the settling checkpoint logs
// its opVoid, flushes, and its own write fails (a power cut there would
// lose it the same way). Recovery skips the voided record, as it should,
// and the fsynced bytes read back. Fsck, the read-only recovery, must
// agree: the failed record was never acknowledged, and recovery leaving
// it unmapped loses nothing. It walks every data zone itself, does not
// know opVoid, and reports the voided record's bytes as acknowledged data
// recovery would lose.
func TestH17cFsckKnowsVoidedRecords(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	synced := bytes.Repeat([]byte{0xaa}, 64<<10)
	a := createSynced(t, e, "a", synced)
	overwriteFailingAppend(t, e, a)
	failSettleThenCrash(t, e)

	// Fsck the crash image, as recovery will find it.
	rep := fsckOf(t, devName)
	// Recovery skips the voided record: the fsynced bytes are there.
	e = reopen(t, devName, cfg)
	got := readAll(t, e, "a")
	e.Close()
	if !bytes.Equal(got, synced) {
		t.Fatal("set-up: recovery did not skip the voided record")
	}
	for _, p := range rep.Problems {
		t.Errorf("fsck of a crash image recovery handles cleanly: %s", p)
	}
}
