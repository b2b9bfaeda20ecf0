package engine

import (
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// TestH43bCutLogWithABadBlockAmongWholeRecords: as
// TestH41bCutLogRecoveryNumbersAboveWhatFollows's "checksum" case, the
// log of the half recovery starts from is cut by a record that fails its
// checksum with whole records after it, and one of those fails to read
// (bad media). Recovery must still number its checkpoint above the whole
// records it can read, and a later Open, with the block still bad, must
// not fail on it. laterMeta read what follows the cut in chunks of up to
// 1 MiB and gave up on a chunk the device failed: one bad block hid every
// whole record read with it (the first Open numbered its checkpoint
// below them), and the next Open's look at that half (checkHiddenLog)
// failed with the bare EIO. Recovery's scan of a data zone
// (laterRecord) already read such a chunk again block by block.
func TestH43bCutLogWithABadBlockAmongWholeRecords(t *testing.T) {
	devName := emuDevice(t, 16, "256K", "")
	e := formatOpen(t, devName, smallConfig())
	createSynced(t, e, "a", []byte("acked")).Close()
	var recs [][]byte
	for _, n := range []string{"bad", "after", "unread", "last"} {
		recs = append(recs, h41bOpRecord(e, nsOp{kind: opCreate, file: e.nextID, name: n}))
		e.nextID++
	}
	at := h41bLogRecords(t, e, recs...)
	if err := e.dev.Flush(); err != nil {
		t.Fatal(err)
	}
	// One flush more, as there: the emu takes back what its last flush
	// claimed if that fails its checksum (a cut during the flush).
	h41bLogRecords(t, e, h41bOpRecord(e, nsOp{kind: opCreate, file: e.nextID, name: "later"}))
	e.nextID++
	if err := e.dev.Flush(); err != nil {
		t.Fatal(err)
	}
	h41bCrash(t, e)
	h41bPatch(t, devName, at+8, make([]byte, 8)) // "bad" fails its checksum
	unread := at + int64(len(recs[0])+len(recs[1]))
	open := func(when string) (*Engine, *h39fBadRead) {
		t.Helper()
		dev, err := zns.Open(devName, zns.Options{})
		if err != nil {
			t.Fatal(err)
		}
		d := &h39fBadRead{Emu: dev.(*zns.Emu), lo: unread, hi: unread + BlockSize}
		e, err := OpenDevice(d, smallConfig())
		if err != nil {
			dev.Close()
			t.Fatalf("%s: Open with the log cut by damage and a bad block among the whole records after it: %v", when, err)
		}
		return e, d
	}
	crash := func(e *Engine, d *h39fBadRead) {
		t.Helper()
		e.crashForTest()
		if err := d.Emu.PowerCut(); err != nil {
			t.Fatal(err)
		}
		d.Emu.Close()
	}
	e, d := open("first open")
	if len(e.damage) == 0 {
		t.Errorf("no damage reported")
	}
	crash(e, d)
	e, d = open("after a crash")
	h41bWant(t, "after a crash", h41bHas(t, e, "a", "bad", "after", "unread", "last", "later"), []string{"a"}, []string{"bad", "after", "unread", "last", "later"})
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	d.Emu.Close()
	h41bFsckClean(t, devName)
}
