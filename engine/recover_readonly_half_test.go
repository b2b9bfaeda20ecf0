package engine

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// crashMidUndoOtherHalfReadOnly fails r's truncate of a (its flush),
// copies the device image at the undo's second record (a crash there:
// the undo's records durable without their commit), and makes the
// metadata half the log is not in read-only in the copy.
func crashMidUndoOtherHalfReadOnly(t *testing.T, r *truncGCRig) {
	t.Helper()
	n, other := 0, -1
	r.onUndoRecord(t, func(e *Engine, m int) {
		if n = m; n == 2 {
			other = 1 - e.meta.active
			r.landFlushCopy(t)
		}
	})
	emuOf(t, r.e).FailFlush(1)
	if err := r.f.Truncate(5000); err == nil {
		t.Fatal("truncate: want an error")
	}
	testHookNumbered = nil
	if other < 0 {
		t.Fatalf("the undo wrote %d records", n)
	}
	// The crash image: the other half's (finished) zone goes read-only.
	dev, err := zns.Open(r.copyName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sb := r.e.sb
	if err := dev.(*zns.Emu).ZoneReadOnly(sb.MetaZones[other]); err != nil {
		t.Fatal(err)
	}
	if err := dev.Flush(); err != nil { // makes the read-only zone durable
		t.Fatal(err)
	}
	dev.Close()
}

// TestRecoveryWithoutOtherHalfKeepsDroppedUndoDropped: a failed truncate's
// undo leaves sizeless (held) records durable without their commit; a
// crash; recovery drops them. With the other metadata half read-only,
// recovery writes no checkpoint (errNextHalfReset) and "the log goes on"
// in the old half. A later write of the file, whose record carries a
// size, then commits those dropped records at the next recovery: the
// file differs from what the engine showed and fsynced.
func TestRecoveryWithoutOtherHalfKeepsDroppedUndoDropped(t *testing.T) {
	r := newTruncGCRig(t)
	crashMidUndoOtherHalfReadOnly(t, r)
	e2 := reopen(t, r.copyName, r.cfg)
	first := readAll(t, e2, "a")
	t.Logf("first recovery: size %d, checkpoints %d", len(first), e2.Stats().Checkpoints)
	g, err := e2.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.WriteAt(bytes.Repeat([]byte{'Z'}, BlockSize), 0); err != nil {
		t.Fatal(err)
	}
	if err := g.Sync(); err != nil {
		t.Fatal(err)
	}
	g.Close()
	want := readAll(t, e2, "a")
	e3 := powerCutReopen(t, e2, r.copyName, r.cfg)
	defer e3.Close()
	sameBytes(t, "second recovery", readAll(t, e3, "a"), want)
	h, err := e3.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Truncate(int64(len(want)) + 3*BlockSize); err != nil {
		t.Fatal(err)
	}
	sameBytes(t, "second recovery, grown", readAll(t, e3, "a"), append(want, make([]byte, 3*BlockSize)...))
}

// TestRecoveryWithoutRoomForItsCheckpointOpensIfNothingDropped: with
// the other metadata half read-only and the log's own half without room
// for recovery's checkpoint either, Open still succeeds when recovery
// dropped nothing (no failed truncate's uncommitted records), as it did
// before checkpoints went into the log's half, and every acknowledged
// file survives it and another power cut.
func TestRecoveryWithoutRoomForItsCheckpointOpensIfNothingDropped(t *testing.T) {
	e, devName, cfg := openWithFileA(t)
	ro := 1 - e.meta.active
	if err := emuOf(t, e).ZoneReadOnly(e.sb.MetaZones[ro]); err != nil {
		t.Fatal(err)
	}
	// Long names and many extents: a checkpoint of the files the
	// half's log holds needs more than the room creates leave behind.
	var names []string
	var err error
	for i := range 4000 {
		name := fmt.Sprintf("%04d-%s", i, strings.Repeat("n", 240))
		var f *File
		if f, err = e.Create(name); err != nil {
			break
		}
		f.Close()
		names = append(names, name)
	}
	if !errors.Is(err, ErrMetaLog) {
		t.Fatalf("create %d with the log's half full and the other read-only: %v; want ErrMetaLog", len(names), err)
	}
	// Writes need no room in the log: a block at every other one of
	// a's offsets.
	a, err := e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	everyOtherBlock(t, a, 1000)
	want := readAll(t, e, "a")
	for range 2 {
		e = powerCutReopen(t, e, devName, cfg)
		sameBytes(t, "a after a power cut", readAll(t, e, "a"), want)
		for _, name := range names {
			if !exists(t, e, name) {
				t.Fatalf("%s, acknowledged, lost to a power cut", name[:4])
			}
		}
	}
	if err := e.Close(); err != nil {
		t.Logf("close (its checkpoint has nowhere to go): %v", err)
	}
	checkFsck(t, devName)
}

// TestRecoveryRefusesOpenIfItsDroppedRecordsCannotBeCheckpointed: the
// crash image of TestRecoveryWithoutOtherHalfKeepsDroppedUndoDropped
// (recovery drops a failed truncate's uncommitted undo records; the other
// metadata half read-only), with the log's half too full for recovery's
// checkpoint: Open fails with an error that says why, rather than open
// with what recovery dropped waiting for the file's next record to
// commit it; fsck still reads the device.
func TestRecoveryRefusesOpenIfItsDroppedRecordsCannotBeCheckpointed(t *testing.T) {
	r := newTruncGCRig(t)
	e := r.e
	// The log's half filled with long-named files up to the room
	// creates leave behind them, and extents of another file: more
	// checkpoint than that room.
	for i := 0; e.meta.wp+2*BlockSize+metaShrinkRoom+metaVoidRoom <= e.sb.metaHalfCap(); i++ {
		mustCreate(t, e, fmt.Sprintf("%04d-%s", i, strings.Repeat("n", 240))).Close()
	}
	everyOtherBlock(t, mustCreate(t, e, "b"), 700) // more than the shrink and void rooms
	crashMidUndoOtherHalfReadOnly(t, r)
	e2, err := Open(r.copyName, r.cfg)
	if err == nil {
		e2.Close()
		t.Fatal("open with recovery's dropped records and no room for its checkpoint: nil error")
	}
	if !strings.Contains(err.Error(), "uncommitted records") {
		t.Fatalf("open: %v; want an error that says recovery dropped records it cannot checkpoint", err)
	}
	t.Logf("open: %v", err)
	checkFsck(t, r.copyName)
}

// everyOtherBlock writes n blocks to f, at every other block offset
// (n extents), fsyncs and closes it.
func everyOtherBlock(t *testing.T, f *File, n int) {
	t.Helper()
	blk := bytes.Repeat([]byte{'e'}, BlockSize)
	for i := range n {
		if _, err := f.WriteAt(blk, int64(2*i)*BlockSize); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
}
