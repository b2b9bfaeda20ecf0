package engine

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
)

// TestWriteWhoseSecondFillFailsIsShort: a write that starts and ends
// inside blocks the cache must read first, the second read failing with
// EIO (bad media: read again, it fails again), returns EIO and the count of the bytes it put in the file (a short
// write, as io.WriterAt allows): the file holds exactly those, live,
// never part of the rest, and after an fsync and a reopen.
func TestWriteWhoseSecondFillFailsIsShort(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	old := pattern(64<<10, 3)
	h := createSynced(t, e, "a", old)
	for fail := 1; fail <= 2; fail++ {
		e.cache.EvictClean(1 << 30)
		emuOf(t, e).FailReadBad(fail)
		p := bytes.Repeat([]byte{0xee}, 40000)
		const off = 1000
		n, err := h.WriteAt(p, off)
		emuOf(t, e).FailRead(0)
		if !errors.Is(err, syscall.EIO) {
			t.Fatalf("read %d failing: write: %d, %v; want EIO", fail, n, err)
		}
		copy(old[off:], p[:n])
		if got := readAll(t, e, "a"); !bytes.Equal(got, old) {
			t.Fatalf("read %d failing: the write returned %d bytes written, %v, and the file holds other bytes", fail, n, err)
		}
		t.Logf("read %d failing: %d bytes written, %v", fail, n, err)
	}
	if err := h.Sync(); err != nil {
		t.Fatal(err)
	}
	e = powerCutReopen(t, e, devName, cfg)
	defer e.Close()
	if got := readAll(t, e, "a"); !bytes.Equal(got, old) {
		t.Fatal("after a power cut the file differs from what the writes reported")
	}
}
