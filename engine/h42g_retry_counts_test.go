package engine

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
)

// TestH42gRetryCountsOnce: a read whose batch the device fails once (a
// transient error, FailRead) is read again (readAlone); where the
// reread finds a block failing its checksum, the reader gets EIO for
// the checksum, counted once as a checksum error and not as a read
// error; where the reread reads, the reader gets the bytes and nothing
// is counted but the retry.
func TestH42gRetryCountsOnce(t *testing.T) {
	want := pattern(64<<10, 1)
	e, devName := reopenWithFlippedByte(t, want)
	// No readahead: each fault below is armed for one device read, the
	// test's own; a readahead read in flight beside it took the fault
	// instead (the test's read then succeeded), in about one run in
	// eight under -race.
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	cfg := smallConfig()
	cfg.ReadaheadMax = -1
	e = reopen(t, devName, cfg)
	defer e.Close()
	emu := emuOf(t, e)

	// Transient failure, intact block: the reread reads.
	before := e.Stats()
	emu.FailRead(1)
	got, err := readBlock(e, "a", 4096)
	if err != nil || !bytes.Equal(got, want[4096:8192]) {
		t.Fatalf("block at 4096 after a transient failure: %v (intact %v)", err, bytes.Equal(got, want[4096:8192]))
	}
	if d := e.Stats().Sub(before); d.ReadRetries != 1 || d.ReadErrs != 0 || d.ChecksumErrs != 0 {
		t.Fatalf("transient failure: retries %d, read errors %d, checksum errors %d; want 1, 0, 0", d.ReadRetries, d.ReadErrs, d.ChecksumErrs)
	}

	// Transient failure of a batch over the flipped block: the reread
	// finds the checksum.
	before = e.Stats()
	emu.FailRead(1)
	h, err := e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	e.cache.Forget(h.f.id)
	h.f.cached.Store(nil)
	_, err = h.ReadAt(make([]byte, 64<<10), 0)
	h.Close()
	if !errors.Is(err, syscall.EIO) || !errors.Is(err, ErrChecksum) {
		t.Fatalf("read over the flipped block after a transient failure: %v, want EIO (checksum)", err)
	}
	if d := e.Stats().Sub(before); d.ReadRetries != 1 || d.ReadErrs != 0 || d.ChecksumErrs != 1 {
		t.Fatalf("checksum found by the reread: retries %d, read errors %d, checksum errors %d; want 1, 0, 1", d.ReadRetries, d.ReadErrs, d.ChecksumErrs)
	}

	// Bad media (FailReadBad): the reread fails too; one read error.
	before = e.Stats()
	emu.FailReadBad(1)
	if _, err := readBlock(e, "a", 0); !errors.Is(err, syscall.EIO) || errors.Is(err, ErrChecksum) {
		t.Fatalf("read of a bad block: %v, want EIO (device)", err)
	}
	if d := e.Stats().Sub(before); d.ReadRetries != 1 || d.ReadErrs != 1 || d.ChecksumErrs != 0 {
		t.Fatalf("bad media: retries %d, read errors %d, checksum errors %d; want 1, 1, 0", d.ReadRetries, d.ReadErrs, d.ChecksumErrs)
	}
	emu.FailRead(0)
}
