package engine

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// TestH42hOrphanRecordIDIsNotHandedOutAgain: a data record on the device
// whose file's create never became durable (format 3 holds a deferred
// create for a pack, while a flush that acknowledges nothing, GC's or a
// truncate's, can put its data on the device) carries an id recovery
// never saw created. When recovery's checkpoint does not land (here:
// the namespace outgrew a metadata half, so the file system opens on
// its log as it stands), that record stays newer than the checkpoint;
// if the next create takes its id, fsck matches the orphan record to
// the new file and reports acknowledged data lost that never was.
// Recovery must raise nextID past every id a record on the device
// carries.
func TestH42hOrphanRecordIDIsNotHandedOutAgain(t *testing.T) {
	h41bFormat(t, superPackVersion)
	devName, cfg, _ := oversizeNamespaceDevice(t)
	e, err := Open(devName, cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	orphan := crashWithOrphanRecord(t, e)

	e2, err := Open(devName, cfg)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	if e2.nextID <= orphan {
		t.Errorf("recovery's next file id is %d, but a record on the device carries id %d", e2.nextID, orphan)
	}
	if err := checkNewFileBesideOrphan(t, e2, devName, orphan); err != nil {
		t.Logf("create on the log as it stands: %v (no room to show the reuse)", err)
	}
}

// TestH42hOrphanRecordIDBesideAFullReadOnlyHalf: the same orphan record,
// where recovery's checkpoint does not land because the other metadata
// half refuses its reset and this half's log has room for a create's
// record but not a checkpoint's. The create takes the orphan's id, and
// fsck, matching the orphan record (newer than the checkpoint) to the
// new file, reports acknowledged data lost.
func TestH42hOrphanRecordIDBesideAFullReadOnlyHalf(t *testing.T) {
	h41bFormat(t, superPackVersion)
	devName, cfg, e := fullReadOnlyHalfEngine(t)
	orphan := crashWithOrphanRecord(t, e)

	e2, err := Open(devName, cfg)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	if err := checkNewFileBesideOrphan(t, e2, devName, orphan); err != nil {
		t.Fatalf("create in the last block of the log: %v", err)
	}
}

// fullReadOnlyHalfEngine formats a device and opens an engine on it
// whose other metadata half is read-only (it refuses the reset a
// checkpoint there needs) and whose active half's log has room for a
// create's record (with the room a log keeps behind it) but not for a
// checkpoint: a recovery on it cannot write its checkpoint, and the
// file system opens on its log as it stands.
func fullReadOnlyHalfEngine(t *testing.T) (string, Config, *Engine) {
	t.Helper()
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	pad := strings.Repeat("n", MaxNameLen-3)
	// A checkpoint larger than the room a create's record needs.
	for i := 0; e.nsBytes < 3*BlockSize+metaShrinkRoom+metaVoidRoom; i++ {
		f, err := e.OpenFile(fmt.Sprintf("%s%03d", pad, i), OCreate)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if err := e.SyncNamespace(); err != nil {
		t.Fatal(err)
	}
	if err := emuOf(t, e).ZoneReadOnly(e.sb.MetaZones[1-e.meta.active]); err != nil {
		t.Fatal(err)
	}
	filler := e.byName[pad+"000"].id
	// Leave room for one create (with the room a log keeps behind
	// it), not for a checkpoint.
	for e.sb.metaHalfCap()-e.meta.wp >= 2*BlockSize+metaShrinkRoom+metaVoidRoom {
		if err := e.logOp(nsOp{kind: opTruncate, file: filler, size: 0}); err != nil {
			t.Fatalf("filling the log at %d: %v", e.meta.wp, err)
		}
	}
	return devName, cfg, e
}

// crashWithOrphanRecord writes a data record of two blocks for the file
// id e would hand out next (a file whose create never became durable,
// as a held deferred create's data reaching the device through a flush
// that acknowledges nothing) and crashes e. It returns that id.
func crashWithOrphanRecord(t *testing.T, e *Engine) uint64 {
	t.Helper()
	orphan := e.nextID
	seq := e.seq.Load() + 1
	data := bytes.Repeat([]byte{0x42}, 2*BlockSize)
	h19gCraftRecord(t, e, &RecordHeader{Kind: KindData, Seq: seq, File: orphan, Size: uint64(len(data)), DataLen: uint32(len(data)),
		Extents: []RecordExtent{{FileOff: 0, Len: uint32(len(data)), Version: seq}},
		Sums:    []uint32{Checksum(data[:BlockSize]), Checksum(data[BlockSize:])}}, data)
	e.crashForTest()
	return orphan
}

// checkNewFileBesideOrphan creates a file on e (recovered beside an
// orphan record of file id orphan), crashes e and checks that the new
// file did not take the orphan's id and that fsck finds the device
// clean. A create that fails crashes e and returns its error, checking
// nothing.
func checkNewFileBesideOrphan(t *testing.T, e *Engine, devName string, orphan uint64) error {
	t.Helper()
	f, err := e.OpenFile("new", OCreate)
	if err != nil {
		e.crashForTest()
		return err
	}
	id := f.f.id
	f.Close()
	e.crashForTest()
	if id == orphan {
		t.Errorf("the new file took id %d, an orphan record's", id)
	}
	if rep := fsckOf(t, devName); len(rep.Problems) > 0 {
		t.Errorf("fsck after a create beside an orphan record: %q", rep.Problems)
	}
	return nil
}

// TestH42hOrphanRecordFromATruncateFlush: the orphan record as a real
// flush leaves it, not crafted. On format 3 a deferred create is held
// for a pack; a truncate of the file into a block writes the file's
// data and the tail's zeros back (zeroTail) and flushes the device
// (settledFlush), which lands nothing held, before it logs the size in
// a record that would carry the held create. A crash there leaves the
// file's records durable and its create lost. Recovery must hand out
// no id such a record carries: on a device where recovery's checkpoint
// lands, and beside a full read-only half, where it does not and fsck
// matches the records, newer than the checkpoint, to whatever file
// takes the id.
func TestH42hOrphanRecordFromATruncateFlush(t *testing.T) {
	h41bFormat(t, superPackVersion)
	for _, c := range orphanCases {
		t.Run(c, func(t *testing.T) {
			devName, cfg, e := orphanCaseEngine(t, c)
			orphan, hdrs := crashInTruncateOfHeldCreate(t, e)

			e2 := reopenBesideOrphan(t, devName, cfg, orphan, hdrs, KindData)
			if e2.nextID <= orphan {
				t.Errorf("recovery's next file id is %d, but a record on the device carries id %d", e2.nextID, orphan)
			}
			if err := checkNewFileBesideOrphan(t, e2, devName, orphan); err != nil {
				t.Fatalf("create after recovery: %v", err)
			}
		})
	}
}

// crashInTruncateOfHeldCreate creates "x" deferred (its create held for
// a pack), writes two blocks to it and truncates it into its second
// block; between the truncate's flush and its log record, with x's
// create still held, the device stops taking writes. Then e crashes
// and the power is cut. It returns x's id and the device offsets of
// the headers of x's records at the truncate's cut.
func crashInTruncateOfHeldCreate(t *testing.T, e *Engine) (uint64, []int64) {
	t.Helper()
	f, err := e.OpenFile("x", OCreate|ODeferSync)
	if err != nil {
		t.Fatal(err)
	}
	id := f.f.id
	if _, err := f.WriteAt(bytes.Repeat([]byte{0x42}, 2*BlockSize), 0); err != nil {
		t.Fatal(err)
	}
	if !e.meta.pending.Load() {
		t.Fatal("x's create was not held for a pack")
	}
	emu := emuOf(t, e)
	var hdrs []int64
	held := false
	testHookTruncateCut = func(e *Engine) {
		e.meta.mu.Lock()
		for _, op := range e.meta.pend {
			held = held || op.kind == opCreate && op.file == id
		}
		e.meta.mu.Unlock()
		f.f.mu.Lock()
		f.f.ext.t.Ascend(func(x extent) bool {
			hdrs = append(hdrs, x.hdr)
			return true
		})
		f.f.mu.Unlock()
		emu.FailWrites(true)
	}
	t.Cleanup(func() { testHookTruncateCut = nil })
	terr := f.Truncate(BlockSize + 100)
	testHookTruncateCut = nil
	if !held {
		t.Fatal("x's create was not held when the truncate's flush was done")
	}
	if terr == nil {
		t.Fatal("the truncate succeeded on a device that takes no writes")
	}
	if len(hdrs) == 0 {
		t.Fatal("x had no records at the truncate's cut")
	}
	f.Close()
	crashAndCutFailingWrites(t, e, emu)
	return id, hdrs
}
