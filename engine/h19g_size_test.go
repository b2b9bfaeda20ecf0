package engine

import (
	"bytes"
	"testing"
)

// A logged truncate whose size passes decodeOp (not negative) but is past
// MaxFileSize: Open takes it, and the checkpoint recovery then writes
// carries a size decodeCheckpoint refuses. After one Close both halves
// hold only such checkpoints and the device never opens again: every
// file on it, "a" and the "b" created and closed since, is lost. Bad
// input must get an error at the first Open (or be bounded), never brick
// the device. Cause: meta.go decodeOp checks only size < 0, and
// recover.go replayOp applies op.size unchecked.
func TestH19gTruncateOpPastMaxFileSizeBricksDevice(t *testing.T) {
	devName, e, data := h19gBase(t)
	id := e.byName["a"].id
	if err := e.logOp(nsOp{kind: opTruncate, file: id, size: MaxFileSize + BlockSize}); err != nil {
		t.Fatal(err)
	}
	e.crashForTest()
	e2, err := h19gOpen(t, devName)
	if err != nil {
		return // refused with an error: fine
	}
	h := createSynced(t, e2, "b", []byte("bbbb"))
	h.Close()
	_ = e2.Close()
	e3, err := h19gOpen(t, devName)
	if err != nil {
		t.Fatalf("the device Open accepted and Close closed no longer opens: %v", err)
	}
	defer e3.Close()
	if _, err := e3.Stat("b"); err != nil {
		t.Errorf("b lost: %v", err)
	}
	if got := readAll(t, e3, "a"); !bytes.HasPrefix(got, data) {
		t.Errorf("a lost its data")
	}
}

// A data record whose header (checksum valid) carries a size past
// MaxFileSize, or one that is negative as an int64 (not SizeUnknown):
// replay sets the file's size to it (Stat shows -9223372036854775808),
// and the checkpoint Open writes is refused by decodeCheckpoint, so after
// one clean Close the device no longer opens. Cause: record.go
// DecodeHeader does not bound Size, recover.go replayRecord applies
// int64(h.Size) unchecked.
func TestH19gRecordSizePastMaxFileSizeBricksDevice(t *testing.T) {
	for _, size := range []uint64{MaxFileSize + BlockSize, 1 << 63} {
		devName, e, _ := h19gBase(t)
		id := e.byName["a"].id
		seq := e.seq.Load() + 10
		blk := bytes.Repeat([]byte{7}, BlockSize)
		h19gCraftRecord(t, e, &RecordHeader{Kind: KindData, Seq: seq, File: id, Size: size, DataLen: BlockSize,
			Extents: []RecordExtent{{FileOff: 0, Len: BlockSize, Version: seq}}, Sums: []uint32{Checksum(blk)}}, blk)
		e.crashForTest()
		e2, err := h19gOpen(t, devName)
		if err != nil {
			continue // refused with an error: fine
		}
		if fi, err := e2.Stat("a"); err == nil && (fi.Size < 0 || fi.Size > MaxFileSize) {
			t.Errorf("record size %d: Open gives a a size of %d", size, fi.Size)
		}
		_ = e2.Close()
		e3, err := h19gOpen(t, devName)
		if err != nil {
			t.Errorf("record size %d: the device Open accepted and Close closed no longer opens: %v", size, err)
			continue
		}
		e3.Close()
	}
}
