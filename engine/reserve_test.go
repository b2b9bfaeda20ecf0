package engine

import (
	"errors"
	"syscall"
	"testing"
)

// writeUntilFull appends 64 KiB writes to h, fsyncing every 16, until
// one fails; it returns the bytes written and the failure.
func writeUntilFull(h *File) (int64, error) {
	buf := make([]byte, 64<<10)
	var off int64
	for i := 0; ; i++ {
		buf[0] = byte(i)
		n, err := h.WriteAt(buf, off)
		off += int64(n)
		if err == nil && i%16 == 15 {
			err = h.Sync()
		}
		if err != nil {
			return off, err
		}
	}
}

// fillReserve creates a file "table" and a file "log" allowed the
// reserve, and writes each until refused with ENOSPC (the log once the
// table is): it returns them and the bytes each took. The caller closes
// them.
func fillReserve(t *testing.T, e *Engine) (other, log *File, tables, logged int64) {
	t.Helper()
	other, err := e.Create("table")
	if err != nil {
		t.Fatal(err)
	}
	log, err = e.Create("log")
	if err != nil {
		other.Close()
		t.Fatal(err)
	}
	log.SetUseReserved(true)
	tables, err = writeUntilFull(other)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a file without the reserve, written until refused: %v, want ENOSPC", err)
	}
	logged, err = writeUntilFull(log)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a file allowed the reserve, written until refused: %v, want ENOSPC", err)
	}
	return other, log, tables, logged
}

// SetReserved keeps its bytes from files not allowed them: such a file
// is refused with ENOSPC while they are free, and a file allowed the
// reserve (File.SetUseReserved) then writes about as much again and is
// refused only when the device is full. Truncating, which takes no new
// space, is not held to the reserve.
func TestReservedSpaceOnlyForFilesAllowedIt(t *testing.T) {
	e := formatOpen(t, emuDevice(t, 24, "1M", ""), Config{CacheBytes: 4 << 20, DirtyLimit: 1 << 20})
	defer e.Close()
	const reserve = 4 << 20
	e.SetReserved(reserve)
	if got := e.Reserved(); got != reserve {
		t.Fatalf("Reserved() = %d, want %d", got, reserve)
	}
	other, log, tables, logged := fillReserve(t, e)
	defer other.Close()
	defer log.Close()
	t.Logf("capacity %d: refused the other file after %d bytes, the reserve's after %d more", e.Capacity(), tables, logged)
	if logged < reserve*3/4 {
		t.Fatalf("the file allowed the reserve wrote %d bytes once the other was refused, want most of the %d reserved", logged, reserve)
	}
	if tables+logged < e.Capacity()*3/4 {
		t.Fatalf("refused after %d bytes of a capacity of %d", tables+logged, e.Capacity())
	}
	if err := other.Truncate(tables / 2); err != nil {
		t.Fatalf("truncate the other file on a full device: %v", err)
	}
}
