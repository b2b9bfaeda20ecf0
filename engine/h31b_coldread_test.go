package engine

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
	"time"
)

// h31bFlip flips a byte of the emu device's backing file at device
// offset dev, under the open engine (the emu reads the file as it is).
func h31bFlip(t *testing.T, e *Engine, devName string, dev int64) {
	t.Helper()
	flipFileByte(t, devName, emuOf(t, e).FileOffset(dev))
}

// h31bStartOne begins one read with StartRead and waits for its end.
func h31bStartOne(t *testing.T, e *Engine, h *File, p []byte, off int64) readEnd {
	t.Helper()
	d := readDone{make(chan readEnd, 1)}
	if startReads(e, h, [][]byte{p}, []int64{off}, d) != 1 {
		t.Fatalf("StartRead at %d did not begin", off)
	}
	select {
	case r := <-d.ch:
		return r
	case <-time.After(20 * time.Second):
		t.Fatalf("the read StartRead began at %d never ended", off)
		return readEnd{}
	}
}

// TestH31bStartReadOfABadBlock: a cold read begun with StartRead whose
// folio has a block that fails its checksum (a flipped byte on the
// device) ends with EIO (the checksum error named); one whose device
// read fails is handed back to be read with ReadAtContext (EIO there if
// it fails again); either puts nothing in the cache (the folio is not
// served from it), and copies nothing wrong into the reader's buffer as
// a success; the folios beside it read fine, and once the device is
// right again the same read returns the file's bytes.
func TestH31bStartReadOfABadBlock(t *testing.T) {
	const bs, n = 64 << 10, 8
	devName := emuDevice(t, 16, "4M", "")
	e := formatOpen(t, devName, smallConfig())
	data := pattern((n+1)*bs, 3)
	createSynced(t, e, "a", data)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = reopen(t, devName, smallConfig())
	t.Cleanup(func() { e.Close() })
	h, err := e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.ReadAt(make([]byte, bs), n*bs); err != nil { // the file's cache state
		t.Fatal(err)
	}
	bad := devOf(t, e, "a", 3*bs+8192).dev + 100
	h31bFlip(t, e, devName, bad)
	st := e.Stats()
	p := make([]byte, bs)
	r := h31bStartOne(t, e, h, p, 3*bs)
	if r.err == nil || !errors.Is(r.err, syscall.EIO) || !errors.Is(r.err, ErrChecksum) || r.again {
		t.Fatalf("StartRead of a folio with a flipped byte: %+v, want EIO (checksum)", r)
	}
	if got := e.Stats().ChecksumErrs - st.ChecksumErrs; got != 1 {
		t.Errorf("%d checksum errors counted, want 1", got)
	}
	if h.ReadCached(make([]byte, bs), 3*bs) {
		t.Fatal("the folio that failed its checksum is in the cache")
	}
	// Its neighbours are fine.
	for _, off := range []int64{2 * bs, 4 * bs} {
		if r := h31bStartOne(t, e, h, p, off); r.err != nil || r.n != bs || !bytes.Equal(p, data[off:off+bs]) {
			t.Fatalf("read at %d beside the bad block: %+v", off, r)
		}
	}
	// Still bad: still EIO, not a cached success.
	if r := h31bStartOne(t, e, h, p, 3*bs); !errors.Is(r.err, ErrChecksum) {
		t.Fatalf("second StartRead of the bad folio: %+v", r)
	}
	h31bFlip(t, e, devName, bad) // repaired
	clear(p)
	if r := h31bStartOne(t, e, h, p, 3*bs); r.err != nil || r.n != bs || !bytes.Equal(p, data[3*bs:4*bs]) {
		t.Fatalf("StartRead once the block is right again: %+v (bytes equal %v)", r, bytes.Equal(p, data[3*bs:4*bs]))
	}

	// A device read that fails: the read is handed back (again), for
	// ReadAtContext, whose read is read again alone before it fails
	// (the block layer fails a read merged with one of a bad block);
	// on bad media that read fails too, with EIO.
	emuOf(t, e).FailReadBad(1)
	if r := h31bStartOne(t, e, h, p, 5*bs); r.err != nil || r.n != 0 || !r.again {
		t.Fatalf("StartRead whose device read fails: %+v, want it handed back (again)", r)
	}
	if h.ReadCached(make([]byte, bs), 5*bs) {
		t.Fatal("the folio whose device read failed is in the cache")
	}
	if _, err := h.ReadAt(p, 5*bs); !errors.Is(err, syscall.EIO) {
		t.Fatalf("ReadAt of the bad media StartRead handed back: %v, want EIO", err)
	}
	emuOf(t, e).FailRead(0) // healed
	clear(p)
	if r := h31bStartOne(t, e, h, p, 5*bs); r.err != nil || r.n != bs || !bytes.Equal(p, data[5*bs:6*bs]) {
		t.Fatalf("StartRead once the device reads again: %+v", r)
	}
	if free := len(e.coldScratch.free); free != readScratches {
		t.Errorf("%d of %d cold read scratches free after the reads ended", free, readScratches)
	}
	if free := len(e.scratch.free); free != readScratches {
		t.Errorf("%d of %d read scratches free after the reads ended", free, readScratches)
	}
}
