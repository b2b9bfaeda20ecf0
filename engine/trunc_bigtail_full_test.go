package engine

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
)

// TestTruncateBigFileIntoItsDataOnAFullDevice: a device filled by one
// file's fsynced data (no garbage anywhere, until 4 KiB writes are
// refused); truncating that file to a size inside its first block frees
// nearly all of it, but first writes that block's tail as zeros (a block
// and a header). A user frees space so: the truncate must succeed, and
// hold after a power cut. (Carried as "truncate into a data-holding tail
// refused on a full device": it holds on main; the tail's admission runs
// GC at any gain, minGCGain, and fits where a write of a block is
// refused.)
func TestTruncateBigFileIntoItsDataOnAFullDevice(t *testing.T) {
	devName := memDevice(t, 12, "1M")
	cfg := Config{CacheBytes: 8 << 20, DirtyLimit: 4 << 20}
	e := formatOpen(t, devName, cfg)
	f := mustCreate(t, e, "big")
	var size int64
	for _, n := range []int{64 << 10, BlockSize} {
		size = fillFile(t, f, size, bytes.Repeat([]byte{0x5a}, n))
	}
	t.Logf("file of %d bytes fills the device", size)
	err := f.Truncate(5000)
	t.Logf("truncate to 5000: %v", err)
	if err != nil {
		t.Fatalf("truncating a %d-byte file to 5000 on the device it fills: %v", size, err)
	}
	e = powerCutReopen(t, e, devName, cfg)
	defer e.Close()
	if got := readAll(t, e, "big"); !bytes.Equal(got, bytes.Repeat([]byte{0x5a}, 5000)) {
		t.Fatalf("after a power cut: %d bytes, want the first 5000 written", len(got))
	}
}

// fillFile appends p to f from size, fsynced, until the device refuses,
// and returns the size that held.
func fillFile(t *testing.T, f *File, size int64, p []byte) int64 {
	t.Helper()
	for {
		_, err := f.WriteAt(p, size)
		if err == nil {
			err = f.Sync()
		}
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
		size += int64(len(p))
	}
	if err := f.Truncate(size); err != nil { // drop what the failed write left
		t.Fatal(err)
	}
	return size
}
