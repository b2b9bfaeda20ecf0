package engine

import (
	"bytes"
	"fmt"
	"io"
	"testing"
)

// TestH17cFailedAppendVoidedWhenHalfIsFull: 207f05c logs an opVoid for a
// failed append before the settling checkpoint's data flush, so that a
// crash between that flush and the checkpoint does not replay the failed
// record. With no room left in the active half it warns and goes on: the
// flush makes the failed record durable, unvoided. A half with no room is
// no corner: a log filled by removes (which leave no room behind them)
// ends exactly at the half's capacity, and the switch that follows is
// exactly the settling checkpoint. Here: the half is full, an
// overwrite's append fails part-way, the namespace sync's checkpoint
// flushes and its write fails (a power cut there is the same); recovery
// from the previous checkpoint replays the torn record over a's fsynced
// bytes: EIO.
func TestH17cFailedAppendVoidedWhenHalfIsFull(t *testing.T) {
	// The set-up fills the half one record per deferred operation: a
	// device of format 2, whose log holds no packs (on format 3 they
	// would be held for one, and the log would not move).
	h41bFormat(t, superMinVersion)
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	synced := bytes.Repeat([]byte{0xaa}, 64<<10)
	a := createSynced(t, e, "a", synced)
	// Fill the active half: creates while they fit with their shrink
	// room, then removes to the last byte operations may take (the
	// room kept for an opVoid, metaVoidRoom, is left).
	m := e.meta
	half := e.sb.metaHalfCap()
	rec := metaRecordLen(len(encodeOp(nsOp{kind: opRemove, file: 1})))
	start := m.active
	var names []string
	for i := 0; half-m.wp >= 3*metaShrinkRoom; i++ {
		name := fmt.Sprintf("f%04d", i)
		h, err := e.OpenFile(name, OCreate|ODeferSync)
		if err != nil {
			t.Fatal(err)
		}
		h.Close()
		names = append(names, name)
	}
	for half-m.wp >= rec+metaVoidRoom {
		if len(names) == 0 {
			t.Fatal("set-up: out of files to remove")
		}
		if err := e.RemoveDeferred(names[0]); err != nil {
			t.Fatal(err)
		}
		names = names[1:]
	}
	if m.active != start || m.wp > half || half-m.wp >= rec+metaVoidRoom {
		t.Fatalf("set-up: half %d (was %d), %d of %d bytes used", m.active, start, m.wp, half)
	}
	if err := e.SyncNamespace(); err != nil {
		t.Fatal(err)
	}

	overwriteFailingAppend(t, e, a)
	failSettleThenCrash(t, e)

	e = reopen(t, devName, cfg)
	defer e.Close()
	f, err := e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 64<<10)
	n, err := f.ReadAt(got, 0)
	if err != nil && err != io.EOF {
		t.Fatalf("a, fsynced, after its failed overwrite (no room to void it) came back torn: read %d bytes: %v", n, err)
	}
	for b := 0; b < len(got); b += BlockSize {
		blk := got[b : b+BlockSize]
		if !bytes.Equal(blk, synced[:BlockSize]) && !bytes.Equal(blk, bytes.Repeat([]byte{0xcc}, BlockSize)) {
			t.Fatalf("a block %d is neither the fsynced bytes nor the failed overwrite's", b/BlockSize)
		}
	}
}
