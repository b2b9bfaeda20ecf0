package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/uring"
)

// writeRaw writes data at offset off of zone, as the engine's own writes
// go, but behind its back.
func writeRaw(t *testing.T, e *Engine, zone int, off int64, data []byte) {
	t.Helper()
	buf, err := unix.Mmap(-1, 0, len(data), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(buf)
	copy(buf, data)
	if err := e.writeZone(zone, off, buf, uring.NewWaiter()); err != nil {
		t.Fatal(err)
	}
}

// landUnflushed writes data at offset off of zone as a write that reached
// the medium but was never flushed, then cuts the power: the device's
// write pointer stays where the last flush left it, below those bytes.
func landUnflushed(t *testing.T, e *Engine, zone int, off int64, data []byte) {
	t.Helper()
	writeRaw(t, e, zone, off, data)
	emu := emuOf(t, e)
	if err := emu.PowerCut(); err != nil {
		t.Fatal(err)
	}
	if err := emu.Close(); err != nil {
		t.Fatal(err)
	}
}

// createSynced creates name with data, fsynced.
func createSynced(t *testing.T, e *Engine, name string, data []byte) *File {
	t.Helper()
	h, err := e.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := h.Sync(); err != nil {
		t.Fatal(err)
	}
	return h
}

// An operation record that reached the metadata zone past its flushed
// write pointer was never acknowledged. Recovery finishes that zone (it
// moves the log to the other one): the record must not come back then,
// where a later recovery would replay it over newer operations.
func TestUnflushedOperationStaysLost(t *testing.T) {
	devName := emuDevice(t, 16, "256K", "")
	e := formatOpen(t, devName, smallConfig())
	if _, err := e.Create("a"); err != nil {
		t.Fatal(err)
	}
	id := e.byName["a"].id
	m := e.meta
	zone, off := e.sb.metaAt(m.active, m.wp)
	stale := nsOp{kind: opRename, file: id, name: "b"}
	payload := encodeOp(stale)
	rec := make([]byte, metaRecordLen(len(payload)))
	// Numbered well above what the engine handed out: unflushed work
	// took those numbers before the power went.
	encodeMeta(rec, e.sb.FS(), metaOp, e.seq.Load()+100, payload)
	e.crashForTest()
	landUnflushed(t, e, zone, off, rec)

	for round := range 2 {
		e = reopen(t, devName, smallConfig())
		if _, err := e.Stat("a"); err != nil {
			t.Fatalf("round %d: a: %v", round, err)
		}
		if _, err := e.Stat("b"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("round %d: b exists (%v): the unacknowledged rename came back", round, err)
		}
		// Anything durable after recovery persists the zone states it
		// left, the finished metadata zone among them.
		if err := e.dev.Flush(); err != nil {
			t.Fatal(err)
		}
		e.crashForTest()
		emu := emuOf(t, e)
		if err := emu.PowerCut(); err != nil {
			t.Fatal(err)
		}
		emu.Close()
	}
}

// A data record that reached a zone past its flushed write pointer, torn
// by the power cut, was never acknowledged. Recovery finishes the zone;
// when GC later reclaims that zone and the power fails before its reset
// is durable, the next recovery scans the zone from its start: the lost
// record must not be there to replay over acknowledged data (it carries
// a sequence number from before the first power cut, above the ones
// handed out since).
func TestTornRecordStaysLostAfterFinish(t *testing.T) {
	devName := emuDevice(t, 16, "256K", "")
	cfg := smallConfig()
	cfg.GC.Disabled = true
	e := formatOpen(t, devName, cfg)
	want := bytes.Repeat([]byte("acked!"), 64<<10/6+1)[:64<<10]
	f := createSynced(t, e, "a", want).f
	z := f.mru.Load()
	// The lost record: a's first block, and a size that cuts it short.
	rec := make([]byte, 2*BlockSize)
	stale := bytes.Repeat([]byte{0xee}, BlockSize)
	copy(rec[BlockSize:], stale)
	hdr := RecordHeader{FS: e.sb.FS(), Kind: KindData, Seq: e.seq.Load() + 100, File: f.id, Size: BlockSize,
		DataLen: BlockSize, Sums: []uint32{Checksum(stale)}, Extents: []RecordExtent{{FileOff: 0, Len: BlockSize, Version: e.seq.Load() + 100}}}
	if err := EncodeHeader(&hdr, rec); err != nil {
		t.Fatal(err)
	}
	e.crashForTest()
	writeRaw(t, e, z.idx, z.alloc.Load(), rec)
	emu := emuOf(t, e)
	// Its header reached the medium, its data did not: a torn record.
	if err := emu.TearLastWrite(BlockSize); err != nil {
		t.Fatal(err)
	}
	emu.Close()

	check := func(e *Engine, when string) {
		t.Helper()
		if got := readAll(t, e, "a"); !bytes.Equal(got, want) {
			t.Fatalf("%s: a has %d bytes (first %x), want the %d acknowledged", when, len(got), got[:min(8, len(got))], len(want))
		}
	}
	e = reopen(t, devName, cfg) // finishes the torn zone
	check(e, "after the tear")
	if moved, err := e.gc.pass(gcUrgent); err != nil || !moved {
		t.Fatalf("gc pass: moved %v, %v", moved, err)
	}
	// GC's reset is logged, not yet durable on the device.
	e.crashForTest()
	emu = emuOf(t, e)
	if err := emu.PowerCut(); err != nil {
		t.Fatal(err)
	}
	emu.Close()
	e = reopen(t, devName, cfg)
	defer e.Close()
	check(e, "after GC reclaimed the finished zone")
}

// A checkpoint maps data records that completed before it; a device may
// make the checkpoint durable before them (writes to different zones
// before a flush persist in any order; on the emu, a checkpoint written
// into a metadata zone whose reset a power cut undid stays readable).
// So the data must be durable first: recovery from that checkpoint must
// never find its mappings pointing at bytes the power cut took.
func TestCheckpointNeverMapsDataLostToAPowerCut(t *testing.T) {
	devName := emuDevice(t, 16, "256K", "")
	cfg := smallConfig()
	cfg.GC.Disabled = true
	e := formatOpen(t, devName, cfg)
	v1 := bytes.Repeat([]byte{1}, 64<<10)
	h := createSynced(t, e, "a", v1)
	// Fill the other metadata zone well past the next checkpoint's
	// length, then switch back: a reset of it that a power cut undoes
	// leaves the new checkpoint readable there.
	if err := e.checkpoint(); err != nil {
		t.Fatal(err)
	}
	for i := range 12 {
		if _, err := e.Create(fmt.Sprintf("pad%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.checkpoint(); err != nil {
		t.Fatal(err)
	}
	// a's next version is appended, not flushed; the checkpoint that maps
	// it never becomes durable.
	v2 := bytes.Repeat([]byte{2}, 64<<10)
	if _, err := h.WriteAt(v2, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.wb.FlushFile(context.Background(), h.f.id); err != nil {
		t.Fatal(err)
	}
	emu := emuOf(t, e)
	emu.FailFlush(1)
	if err := e.checkpoint(); err == nil {
		t.Fatal("checkpoint succeeded although the device flush failed")
	}
	e.crashForTest()
	if err := emu.PowerCut(); err != nil {
		t.Fatal(err)
	}
	emu.Close()
	e = reopen(t, devName, cfg)
	defer e.Close()
	if got := readAll(t, e, "a"); !bytes.Equal(got, v1) && !bytes.Equal(got, v2) {
		t.Fatalf("a is neither version after the power cut: %d bytes, first %x", len(got), got[:8])
	}
}
