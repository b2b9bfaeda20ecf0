package engine

import (
	"errors"
	"syscall"
	"testing"
)

// TestTruncateUndoCheckpoint: a truncate whose device flush fails puts
// the file back (zeroTail, undoCut) after its zeros' record completed and
// was mapped. A checkpoint taken while it does so (here as the old size
// and tail are back, before undoCut writes anything) flushes the zeros'
// record and must not save the old size over the zeroed block: a crash
// before undoCut's records reach the device brought the file back with
// zeros where its fsynced bytes were. The checkpoint must carry the file
// as it was (or as cut, with zeros past the cut).
func TestTruncateUndoCheckpoint(t *testing.T) {
	r := newTruncGCRig(t)
	ran := false
	testHookTruncateUndo = func(e *Engine, back bool) {
		if !back || ran {
			return
		}
		ran = true
		if err := e.checkpoint(); err != nil {
			t.Error(err)
			return
		}
		r.copyImage(t)
	}
	t.Cleanup(func() { testHookTruncateUndo = nil })
	emuOf(t, r.e).FailFlush(1)
	if err := r.f.Truncate(5000); !errors.Is(err, syscall.EIO) {
		t.Fatalf("truncate with its flush failing: %v, want EIO", err)
	}
	testHookTruncateUndo = nil
	if !ran {
		t.Fatal("the truncate never put the file back")
	}
	sameBytes(t, "after the failed truncate", readAll(t, r.e, "a"), r.before)
	r.checkCopy(t, "a checkpoint during the undo, then a crash")
}

// TestTruncateUndoWritebackOfZeros: a truncate whose tail's zeros fail to
// reach the device (EIO) leaves them dirty in the cache, and puts the
// file back. Writeback of the file before the tail's old bytes are back
// in the cache (the flusher; here the file's own FlushFile, as the undo
// begins) wrote the zeros in a record carrying the old size: made durable
// by another file's fsync, then a crash before undoCut's records, and the
// file came back whole in size with zeros where its fsynced bytes were.
// A record of those zeros must carry the truncate's size (it is the
// truncate's tail, retried), or none must be written.
func TestTruncateUndoWritebackOfZeros(t *testing.T) {
	r := newTruncGCRig(t)
	armed, ran := false, false
	testHookTruncateTail = func(e *Engine) {
		if !armed {
			armed = true
			emuOf(t, e).FailWrite(1) // the tail's zeros
		}
	}
	testHookTruncateUndo = func(e *Engine, back bool) {
		if back || ran {
			return
		}
		ran = true
		if err := e.wb.FlushFile(t.Context(), r.f.f.id); err != nil {
			t.Errorf("write back the file as its undo begins: %v", err)
		}
		createSynced(t, e, "b", []byte("b")) // a device flush
		r.copyImage(t)
	}
	t.Cleanup(func() { testHookTruncateTail, testHookTruncateUndo = nil, nil })
	if err := r.f.Truncate(5000); !errors.Is(err, syscall.EIO) {
		t.Fatalf("truncate with its tail's write failing: %v, want EIO", err)
	}
	testHookTruncateTail, testHookTruncateUndo = nil, nil
	if !ran {
		t.Fatal("the truncate never put the file back")
	}
	sameBytes(t, "after the failed truncate", readAll(t, r.e, "a"), r.before)
	r.checkCopy(t, "writeback during the undo, another file's fsync, then a crash")
}
