package engine

import (
	"bytes"
	"fmt"
	"testing"
)

// TestH17eMoreThanMaxVoidsOverflowTheRoom: 8f509ca has one opVoid name up
// to maxVoids (500) records, "so a burst of failed appends is one record",
// and keeps one such record's room (metaVoidRoom) in every half. A burst
// past 500 (every append in flight failing with the device: each record,
// pad and GC copy in flight counts) takes a second record, which the
// room does not hold: voidFailedLocked warns and the checkpoint's data
// flush makes the records past the 500th durable unvoided. Here the
// half is filled to the room; 500 failed appends that landed nothing
// stand in the failed list (numbers handed out, as the completer records
// them), then a's overwrite fails part-way; a power cut before the
// settling checkpoint lands (its write fails) has recovery replay a's
// torn record over its fsynced bytes: EIO.
func TestH17eMoreThanMaxVoidsOverflowTheRoom(t *testing.T) {
	// The set-up fills the half one record per deferred operation: a
	// device of format 2, whose log holds no packs (on format 3 they
	// would be held for one, and the log would not move).
	h41bFormat(t, superMinVersion)
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	synced := bytes.Repeat([]byte{0xaa}, 64<<10)
	a := createSynced(t, e, "a", synced)
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
		if err := e.RemoveDeferred(names[0]); err != nil {
			t.Fatal(err)
		}
		names = names[1:]
	}
	if m.active != start || half-m.wp != metaVoidRoom {
		t.Fatalf("set-up: half %d (was %d), %d of %d bytes used", m.active, start, m.wp, half)
	}
	if err := e.SyncNamespace(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.WriteAt(bytes.Repeat([]byte{0xcc}, 64<<10), 0); err != nil {
		t.Fatal(err)
	}
	// A burst of maxVoids failed appends that landed nothing.
	e.failedMu.Lock()
	for range maxVoids {
		e.failedSeqs = append(e.failedSeqs, e.seq.Add(1))
	}
	e.failedMu.Unlock()
	e.failedAppend.Store(true)
	if werr := failAppendOf(t, e, a); werr == nil {
		t.Fatal("set-up: a's writeback did not fail")
	}
	failSettleThenCrash(t, e)

	e = reopen(t, devName, cfg)
	defer e.Close()
	readsUntorn(t, e, "a", 64<<10, fmt.Sprintf("a, fsynced, after its failed overwrite (the %dth failed append of a burst, past one opVoid) came back torn", maxVoids+1))
}
