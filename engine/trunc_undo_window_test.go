package engine

import (
	"errors"
	"fmt"
	"io/fs"
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
	emuOf(t, r.e).FailFlush(1)
	r.truncateFails(t, &ran, "a checkpoint during the undo, then a crash")
}

// TestTruncateUndoWritebackOfZeros: a truncate whose tail's zeros fail to
// reach the device (EIO) leaves them dirty in the cache, and puts the
// file back. Writeback of the file before the tail's old bytes are back
// in the cache (the flusher, as the undo
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
		// As the flusher does: the zeros' failure, before it, stays
		// for the file's fsync (TestTruncateLeavesWritebackErrorToFsync).
		if err := e.wb.FlushFileLeaveError(t.Context(), r.f.f.id); err != nil {
			t.Errorf("write back the file as its undo begins: %v", err)
		}
		createSynced(t, e, "b", []byte("b")) // a device flush
		r.copyImage(t)
	}
	r.truncateFails(t, &ran, "writeback during the undo, another file's fsync, then a crash")
}

// TestTruncateNamespaceOpMidTruncate: a remove or rename of a file, or a
// rename over it, numbered while a truncate of it is on its way (its tail
// pending, or a failed truncate putting it back) is applied as it is
// acknowledged, whatever the truncate's records do after it: after the
// failed truncate and a power cut, the name shows what the operation left
// there, with the bytes from before the truncate, and fsck finds nothing
// lost. The operations take the namespace lock, never the file's write
// lock the truncate holds, so they can land at any of these points.
func TestTruncateNamespaceOpMidTruncate(t *testing.T) {
	ops := []struct {
		name string
		run  func(t *testing.T, e *Engine)
		// check runs after the crash; before is the file's bytes
		// before the truncate.
		check func(t *testing.T, e *Engine, before []byte)
	}{
		{"remove", func(t *testing.T, e *Engine) {
			if err := e.Remove("a"); err != nil {
				t.Error(err)
			}
		}, func(t *testing.T, e *Engine, _ []byte) {
			if _, err := e.Stat("a"); err == nil {
				t.Error("the removed file came back")
			}
		}},
		{"rename", func(t *testing.T, e *Engine) {
			if err := e.Rename("a", "c"); err != nil {
				t.Error(err)
			}
		}, func(t *testing.T, e *Engine, before []byte) {
			if _, err := e.Stat("a"); err == nil {
				t.Error("the old name came back")
			}
			sameBytes(t, "the renamed file", readAll(t, e, "c"), before)
		}},
		{"rename-over", func(t *testing.T, e *Engine) {
			createSynced(t, e, "b", []byte("the file renamed over a"))
			if err := e.Rename("b", "a"); err != nil {
				t.Error(err)
			}
		}, func(t *testing.T, e *Engine, _ []byte) {
			sameBytes(t, "the file renamed over a", readAll(t, e, "a"), []byte("the file renamed over a"))
		}},
	}
	for _, op := range ops {
		for _, at := range []string{"tail-pending", "undo", "undone"} {
			t.Run(op.name+"/"+at, func(t *testing.T) {
				r := newTruncGCRig(t)
				ran := false
				if at == "tail-pending" {
					// The operation's own flush comes before the
					// truncate's: arm the failure after it.
					testHookTruncateTail = func(e *Engine) {
						ran = true
						op.run(t, e)
						emuOf(t, e).FailFlush(1)
					}
				} else {
					emuOf(t, r.e).FailFlush(1)
					testHookTruncateUndo = func(e *Engine, back bool) {
						if ran || back != (at == "undone") {
							return
						}
						ran = true
						op.run(t, e)
					}
				}
				t.Cleanup(func() { testHookTruncateTail, testHookTruncateUndo = nil, nil })
				// A remove or rename over that lands while the tail
				// is pending fails the truncate as the handle's next
				// operation would (the file was removed).
				if err := r.f.Truncate(5000); err != nil && !errors.Is(err, syscall.EIO) && !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("truncate: %v, want EIO, ErrNotExist or nil", err)
				}
				testHookTruncateTail, testHookTruncateUndo = nil, nil
				if !ran {
					t.Fatal("hook never ran")
				}
				// Nothing of the truncate's pinned old tail stays
				// counted (a removed file's least of all).
				checkValidCounts(t, r.e)
				r.e = powerCutReopen(t, r.e, r.devName, r.cfg)
				op.check(t, r.e, r.before)
				if err := r.e.Close(); err != nil {
					t.Fatal(err)
				}
				checkFsck(t, r.devName)
				r.e = reopen(t, r.devName, r.cfg)
			})
		}
	}
}

// TestTruncateUndoOldTailZoneKept: a failed truncate maps its tail
// block's old bytes again, so the zone they are in must not be reset
// while it may, although the zeros' record mapped over them and no
// extent of the file points there. Here the old tail block is the only
// live piece of its zone (a GC copy of the file's blocks whose neighbours
// were rewritten since); a GC pass over that zone as the undo begins must
// leave it, else the old mapping, put back and saved by a checkpoint,
// points at a reset zone: after a crash the file read zeros there.
func TestTruncateUndoOldTailZoneKept(t *testing.T) {
	devName, cfg, e, f := fileWithoutGC(t)
	defer func() { e.Close() }()
	want := make([]byte, 10000)
	for i := range want {
		want[i] = byte(i%251 + 1)
	}
	for range 2 { // the second copy makes the first garbage, for GC
		if _, err := f.WriteAt(want, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	collectZone := func(z *zone) bool {
		e.gc.mu.Lock()
		defer e.gc.mu.Unlock()
		ok, err := e.gc.collectSealed(z, minGCGain)
		if err != nil {
			t.Errorf("collect zone %d: %v", z.idx, err)
		}
		return ok
	}
	// The file's three blocks move to a GC zone; blocks 0 and 2 are then
	// rewritten elsewhere, leaving block 1 (the tail block of a truncate
	// to 5000) alone there.
	if !collectZone(fileZone(t, e, f)) {
		t.Fatal("the file's zone was not collected")
	}
	var gcZone *zone
	f.f.mu.RLock()
	f.f.ext.lookup(BlockSize, BlockSize, func(x extent) { gcZone = e.zoneAt(x.dev) })
	f.f.mu.RUnlock()
	for _, r := range [][2]int{{0, BlockSize}, {2 * BlockSize, 10000}} {
		if _, err := f.WriteAt(want[r[0]:r[1]], int64(r[0])); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if z := fileZone(t, e, f); z == gcZone {
		t.Fatalf("block 0 is in the GC zone %d still", z.idx)
	}
	r := &truncGCRig{devName: devName, cfg: cfg, e: e, f: f, small: want, before: want}
	r.image()
	ran, collected := false, false
	testHookTruncateUndo = func(e *Engine, back bool) {
		if ran {
			return
		}
		if !back {
			collected = collectZone(gcZone)
			return
		}
		ran = true
		if err := e.checkpoint(); err != nil {
			t.Error(err)
		}
		r.copyImage(t)
	}
	emuOf(t, e).FailFlush(1)
	r.truncateFails(t, &ran, "a GC pass and a checkpoint during the undo, then a crash")
	t.Logf("the GC zone collected during the undo: %v", collected)
}

// truncateFails truncates the rig's file to 5000 bytes, which must fail
// (EIO) after the hooks set ran, leaving the file as it was with every
// zone's valid count right; then the copied image (crash: what led to
// the crash it stands for) must hold the file before or after.
func (r *truncGCRig) truncateFails(t *testing.T, ran *bool, crash string) {
	t.Helper()
	t.Cleanup(func() { testHookTruncateTail, testHookTruncateUndo = nil, nil })
	if err := r.f.Truncate(5000); !errors.Is(err, syscall.EIO) {
		t.Fatalf("truncate: %v, want EIO", err)
	}
	testHookTruncateTail, testHookTruncateUndo = nil, nil
	if !*ran {
		t.Fatal("the truncate never put the file back")
	}
	sameBytes(t, "after the failed truncate", readAll(t, r.e, "a"), r.before)
	checkValidCounts(t, r.e)
	r.checkCopy(t, crash)
}

// TestTruncateUndoFlushMidRewrite: a failed truncate's rewrite of the
// range its zeros' record cuts (undoCut) takes several records. A device
// flush from elsewhere (another file's fsync, a checkpoint) after some
// of them reached the device, then a crash, made the zeros' record and
// those durable without the rest: the last of them carried the old
// size, and the file came back at it with zeros past the tail block,
// where the rest were cut. Each undo record in turn is where the flush
// and the crash happen here: the copy must recover as the truncated
// file or as the old one, and fsck must find nothing lost.
func TestTruncateUndoFlushMidRewrite(t *testing.T) {
	t.Cleanup(func() { testHookNumbered = nil })
	for k := 1; ; k++ {
		r := newTruncGCRig(t)
		n := 0
		r.onUndoRecord(t, func(e *Engine, m int) {
			if n = m; n != k {
				return
			}
			// What is queued and in flight of the undo lands, and a
			// flush makes it durable, with the zeros' record.
			r.landFlushCopy(t)
		})
		emuOf(t, r.e).FailFlush(1)
		if err := r.f.Truncate(5000); !errors.Is(err, syscall.EIO) {
			t.Fatalf("truncate: %v, want EIO", err)
		}
		testHookNumbered = nil
		if n < k {
			// The tail's old bytes, at least one piece past the
			// block, and the commit.
			if n < 3 {
				t.Fatalf("the undo wrote %d records, want at least 3", n)
			}
			return
		}
		sameBytes(t, "after the failed truncate", readAll(t, r.e, "a"), r.before)
		what := fmt.Sprintf("a flush at undo record %d of %d, then a crash", k, n)
		checkFsck(t, r.copyName)
		r.checkCopy(t, what)
	}
}

// landFlushCopy, in a hook as a record is numbered, lets what is queued
// and in flight land, flushes the device (a flush from elsewhere) and
// copies the image (a crash right after it). It reports with t.Error.
func (r *truncGCRig) landFlushCopy(t *testing.T) {
	e := r.e
	_ = e.ring.Flush()
	e.waitUntil(func() bool { return e.inflight.Load() <= 0 })
	if err := e.flushDevice(t.Context()); err != nil {
		t.Error(err)
	}
	r.copyImage(t)
}
