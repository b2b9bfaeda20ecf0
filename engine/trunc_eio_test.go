package engine

import (
	"bytes"
	"errors"
	"fmt"
	"syscall"
	"testing"
)

// TestTruncateTailEIOLeavesTheFile: a shrinking truncate to a size inside
// a block rewrites that block's tail as zeros and makes it durable before
// the truncate is logged. When that write fails with EIO, the truncate
// returns the error and the file is as it was, size and bytes (its dirty,
// unsynced bytes in the cut range included), at once, after a later
// fsync and after a crash; the same truncate then succeeds, and a file
// grown again reads zeros past the cut. Before, the failed truncate left
// the new size in memory while the log kept the old one: a reader saw
// 5000 bytes, and after a crash 10000 came back.
//
// nth is the append that fails: the first is the file's dirty data,
// which the truncate writes back before anything else, the second the
// tail's zeros.
func TestTruncateTailEIOLeavesTheFile(t *testing.T) {
	for _, nth := range []int{1, 2} {
		t.Run(fmt.Sprintf("append-%d-fails", nth), func(t *testing.T) { truncateTailEIO(t, nth) })
	}
}

func truncateTailEIO(t *testing.T, nth int) {
	devName, cfg, e, f := fileWithoutGC(t)
	defer func() { e.Close() }()
	want := bytes.Repeat([]byte("truncate"), 10000/8)
	if _, err := f.WriteAt(want, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	// Dirty bytes in the range the truncate would cut, in the tail block
	// and past it.
	dirty := bytes.Repeat([]byte{0xd1}, 4000)
	copy(want[5500:], dirty)
	if _, err := f.WriteAt(dirty, 5500); err != nil {
		t.Fatal(err)
	}
	emuOf(t, e).FailWrite(nth)
	err := f.Truncate(5000)
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("truncate with its tail's write failing: %v, want EIO", err)
	}
	check := func(when string) {
		t.Helper()
		if got := f.Size(); got != int64(len(want)) {
			t.Fatalf("%s: size %d, want %d: the failed truncate changed it", when, got, len(want))
		}
		if got := readAll(t, e, "a"); !bytes.Equal(got, want) {
			t.Fatalf("%s: the bytes differ from before the failed truncate", when)
		}
	}
	check("after the failed truncate")
	// The data is dirty again: a later fsync writes it (the first may
	// still report the failure) and succeeds once it is on the device.
	if err := f.Sync(); err != nil {
		if !errors.Is(err, syscall.EIO) {
			t.Fatalf("fsync after the failed truncate: %v, want nil or EIO", err)
		}
		if err := f.Sync(); err != nil {
			t.Fatalf("second fsync after the failed truncate: %v", err)
		}
	}
	check("after fsync")
	crash := func() {
		t.Helper()
		e.crashForTest()
		e = reopen(t, devName, cfg)
		var err error
		if f, err = e.Open("a"); err != nil {
			t.Fatal(err)
		}
	}
	crash()
	check("after a crash")
	if err := f.Truncate(5000); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(10000); err != nil {
		t.Fatal(err)
	}
	want = append(want[:5000:5000], make([]byte, 5000)...)
	check("after the truncate and a regrow")
	crash()
	check("after the truncate, a regrow and a crash")
}

// TestTruncateTailDurableBeforeLogged: a truncate into a block rewrites
// the block's tail as zeros, and that record must be durable before the
// truncate's log record is written. A device with a volatile cache may
// persist the log record and lose the tail's record in a power cut; the
// file would then come back cut, with the old bytes past its end, and a
// later grow would show them. So when the truncate reaches its log record,
// nothing it wrote may still be waiting for a flush.
func TestTruncateTailDurableBeforeLogged(t *testing.T) {
	_, _, e, f := fileWithoutGC(t)
	defer func() { e.Close() }()
	if _, err := f.WriteAt(bytes.Repeat([]byte("truncate"), 10000/8), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	emu := emuOf(t, e)
	var unflushed, ran bool
	testHookTruncateCut = func(*Engine) { ran, unflushed = true, emu.Unflushed() }
	t.Cleanup(func() { testHookTruncateCut = nil })
	if err := f.Truncate(5000); err != nil {
		t.Fatal(err)
	}
	if !ran {
		t.Fatal("the truncate never reached its log record")
	}
	if unflushed {
		t.Fatal("the tail's zeros were not durable when the truncate was logged")
	}
}

// fileWithoutGC opens a formatted 16 x 1 MiB emu with GC off (nothing but
// the test writes) and creates file "a" on it; devName and cfg reopen it.
func fileWithoutGC(t *testing.T) (devName string, cfg Config, e *Engine, f *File) {
	t.Helper()
	devName, cfg = memDevice(t, 16, "1M"), smallConfig()
	cfg.GC.Disabled = true
	e = formatOpen(t, devName, cfg)
	return devName, cfg, e, mustCreate(t, e, "a")
}
