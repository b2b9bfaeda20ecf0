package engine

import (
	"bytes"
	"context"
	"testing"

	"golang.org/x/sys/unix"
)

// TestFsyncSurvivesAnAppendTheHostRefusedBesideIt: two files append to
// one zone in one writeback round; the emu device's host file refuses
// the second append (its file system full: here RLIMIT_FSIZE, EFBIG),
// the first lands. The first file's fsync returns nil, then the power
// goes: its data must be there after the restart.
//
// The emu had moved the zone's write pointer and running checksum over
// the refused append at submission, the Flush that fsync ran recorded
// that checksum, and the next Open, finding it wrong, took the zone back
// to the Flush before: "a", fsynced at 128 KiB, came back with 64 KiB.
func TestFsyncSurvivesAnAppendTheHostRefusedBesideIt(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	cfg.OpenZones = 1 // both files append to one zone
	e := formatOpen(t, devName, cfg)
	a, b := mustCreate(t, e, "a"), mustCreate(t, e, "b")
	pa, pb := bytes.Repeat([]byte{0xaa}, 64<<10), bytes.Repeat([]byte{0xbb}, 64<<10)
	if _, err := a.WriteAt(pa, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(); err != nil {
		t.Fatal(err)
	}
	z := a.f.mru.Load()
	used := z.alloc.Load()
	if _, err := a.WriteAt(pa, 64<<10); err != nil {
		t.Fatal(err)
	}
	if _, err := b.WriteAt(pb, 0); err != nil {
		t.Fatal(err)
	}
	// The next record (a header and 64 KiB) fits below the limit; the
	// one after it does not.
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	limit := unix.Rlimit{Cur: uint64(emuOf(t, e).FileOffset(z.start + used + 2*(BlockSize+64<<10) - 32<<10)), Max: old.Max}
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &limit); err != nil {
		t.Fatal(err)
	}
	errAll := e.Sync(context.Background())
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	if errAll == nil {
		t.Fatal("a writeback round the host refused part of succeeded")
	}
	synced := map[string][]byte{}
	if a.Sync() == nil {
		synced["a"] = append(bytes.Clone(pa), pa...)
	}
	if b.Sync() == nil {
		synced["b"] = pb
	}
	if len(synced) == 0 {
		t.Fatalf("neither file's fsync succeeded (sync of all: %v)", errAll)
	}
	e = powerCutReopen(t, e, devName, cfg)
	defer e.Close()
	for name, want := range synced {
		f, err := e.Open(name)
		if err != nil {
			t.Fatalf("%s, whose fsync returned nil: %v", name, err)
		}
		got := make([]byte, len(want))
		n, err := f.ReadAt(got, 0)
		if n != len(want) || !bytes.Equal(got, want) {
			t.Fatalf("%s, fsynced at %d bytes: %d bytes after the power cut (size %d, %v)", name, len(want), n, f.Size(), err)
		}
		f.Close()
	}
}
