package engine

import (
	"bytes"
	"sync/atomic"
	"testing"
)

// TestAdmittedPieceCountsOnceWhileCopied: a write of one 2 MiB piece
// (MaxOrder 9) into a cache of 1 MiB, which cannot hold it: the copy
// waits for writeback to free memory, part of the piece dirty or already
// on the device meanwhile. What other writers' admission counts against
// the device's room (roomFor: dirty data and admitted writes) must
// count each byte of the piece once. Checked at every call for writeback
// the copy makes (testHookPressure). The room appends took is left out:
// an append in flight is both dirty and appended until it completes, a
// count of writeback, not of admission, and with the emu's flush off its
// table mutex (0f4defb) such appends overlapped the hook often enough to
// read a whole 1 MiB record twice (2 of 5 runs with -race).
//
// Failed before the fix: the piece's whole charge stayed admitted until
// its copy ended, so the part copied counted twice (once admitted, once
// dirty or appended), up to the whole piece: other writers got ENOSPC,
// or ran GC, for room that was free.
func TestAdmittedPieceCountsOnceWhileCopied(t *testing.T) {
	cfg := Config{CacheBytes: 1 << 20, DirtyLimit: 512 << 10, MaxOrder: 9}
	cfg.GC.Disabled = true
	e := formatOpen(t, emuDevice(t, 16, "1M", ""), cfg)
	defer e.Close()
	const size = 2 << 20
	if e.writePiece(0) != size {
		t.Fatalf("set-up: write piece %d, want %d", e.writePiece(0), size)
	}
	f := mustCreate(t, e, "big")
	defer f.Close()
	charge := writeCharge(0, size)
	var calls, worst atomic.Int64
	testHookPressure = func(e *Engine) {
		calls.Add(1)
		n := e.admitted.Load() + e.cache.DirtyBytes()
		for w := worst.Load(); n > w && !worst.CompareAndSwap(w, n); w = worst.Load() {
		}
	}
	defer func() { testHookPressure = nil }()
	want := bytes.Repeat([]byte{0x3c}, size)
	if _, err := f.WriteAt(want, 0); err != nil {
		t.Fatal(err)
	}
	testHookPressure = nil
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	// Headers and pads the writeback appends beside the data: far less
	// than this.
	const slack = 128 << 10
	t.Logf("%d calls for writeback during the copy; the piece counted at most %d bytes (charge %d)", calls.Load(), worst.Load(), charge)
	if calls.Load() == 0 {
		t.Fatal("set-up: the copy never called for writeback")
	}
	if worst.Load() > charge+slack {
		t.Fatalf("while copied, the %d-byte piece (charge %d) counted %d bytes against the device's room: its copied part twice", size, charge, worst.Load())
	}
	if got := readAll(t, e, "big"); !bytes.Equal(got, want) {
		t.Fatal("big reads back other bytes")
	}
}
