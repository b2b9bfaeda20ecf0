package engine

import (
	"bytes"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"
)

// churnOwed overwrites 6 MiB of the rig's file from 16384 (its big
// part and past it) a MiB at a time, rounds times, without an fsync:
// more than the dirty limit (4 MiB), so writeback runs, and far more
// than the 16 MiB device holds, but never more than 6 MiB of it live. It
// returns the first write error.
func churnOwed(t *testing.T, r *truncGCRig, rounds int) error {
	t.Helper()
	p := make([]byte, 1<<20)
	for i := 0; i < rounds; i++ {
		for j := range p {
			p[j] = byte(i + j%7)
		}
		if _, err := r.f.WriteAt(p, 16384+int64(i%6)<<20); err != nil {
			t.Logf("round %d: %v", i, err)
			return err
		}
	}
	return nil
}

// TestUndoOwedOverwritesWithoutFsyncFit: one transient flush failure
// during a truncate and its undo leaves the undo's commit owed; the
// device is healthy from then on. The file is then overwritten (no
// fsync) with 40 MiB through a 16 MiB device, 6 MiB live: without the
// owed commit this succeeds (the control), GC reclaiming the old copies.
// While the commit is owed every replaced extent stays counted valid and
// GC skips every zone holding the file's data, so writers run out of
// room (ENOSPC) on a healthy, mostly-garbage device.
func TestUndoOwedOverwritesWithoutFsyncFit(t *testing.T) {
	t.Run("control", func(t *testing.T) {
		r := newTruncGCRig(t)
		if err := churnOwed(t, r, 40); err != nil {
			t.Fatalf("overwrites without an owed commit: %v", err)
		}
	})
	t.Run("owed", func(t *testing.T) {
		r := undoFlushFails(t)
		if !r.f.f.undoOwed() {
			t.Fatal("no commit owed")
		}
		err := churnOwed(t, r, 40)
		r.f.f.mu.RLock()
		var n int
		if r.f.f.undo != nil {
			n = len(r.f.f.undo.replaced)
		}
		r.f.f.mu.RUnlock()
		t.Logf("undoState.replaced holds %d extents", n)
		if err != nil {
			t.Errorf("overwrites while the undo's commit is owed (healthy device): %v", err)
		}
	})
}

// TestUndoOwedFullDeviceThenFsyncFreesRoom: after the overwrites above
// ran out of room, the file's own fsync still gets its commit admitted
// (one block) and written, which frees the pinned copies: writes then
// succeed again. (Passes: the ENOSPC ends at the file's next fsync, and
// only then.)
func TestUndoOwedFullDeviceThenFsyncFreesRoom(t *testing.T) {
	r := undoFlushFails(t)
	werr := churnOwed(t, r, 40)
	t.Logf("churn: %v", werr)
	if err := r.f.Sync(); err != nil {
		t.Fatalf("fsync on a healthy device: %v", err)
	}
	if r.f.f.undoOwed() {
		t.Error("the commit is still owed")
	}
	if err := churnOwed(t, r, 12); err != nil {
		t.Errorf("writes after the fsync: %v", err)
	}
}

// checkOwedCrash checks what a crash may bring "a" back as, given the bytes
// before the failed truncate and the writes since (each a candidate
// applied in order): the file as it was, with a prefix of the writes,
// or cut to 5000 bytes (the zeros' record durable, the undo not
// committed).
func (r *truncGCRig) checkOwedCrash(t *testing.T, what string, e2 *Engine, writes ...[]byte) {
	t.Helper()
	got := readAll(t, e2, "a")
	cur := append([]byte(nil), r.before...)
	cands := [][]byte{append([]byte(nil), cur...)}
	for _, w := range writes {
		copy(cur[16384:], w)
		cands = append(cands, append([]byte(nil), cur...))
	}
	for i, c := range cands {
		if bytes.Equal(got, c) {
			t.Logf("%s: recovered as the file with %d of %d writes", what, i, len(writes))
			return
		}
	}
	if len(got) == 5000 && bytes.Equal(got, r.small[:5000]) {
		t.Logf("%s: recovered cut to 5000", what)
		return
	}
	first := -1
	for i := range min(len(got), len(cur)) {
		if got[i] != cur[i] {
			first = i
			break
		}
	}
	t.Errorf("%s: recovered %d bytes, neither the file (%d bytes, with a prefix of its writes) nor cut; first difference from the last at %d",
		what, len(got), len(cur), first)
}

func owedPattern(seed byte, n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = seed + byte(i%13)
	}
	return p
}

// TestUndoOwedCheckpointThenOverwriteCrash: a checkpoint while the
// commit is owed saves the file (its size and mapping, the undo's
// records included); a write since replaces extents the checkpoint
// maps. GC's empty-zone reset, another file's fsync, then a crash:
// recovery from the checkpoint plus the log must give the file as it
// was (saved by the checkpoint), or with W.
func TestUndoOwedCheckpointThenOverwriteCrash(t *testing.T) {
	for _, setup := range []string{"flush-fails", "zeros-write-fails"} {
		t.Run(setup, func(t *testing.T) {
			var r *truncGCRig
			if setup == "flush-fails" {
				r = undoFlushFails(t)
			} else {
				r = undoZerosWriteFails(t)
			}
			w := owedPattern(100, 256<<10)
			if err := r.e.checkpoint(); err != nil {
				t.Fatal(err)
			}
			r.writeBack(t, w)
			e2 := r.resetEmptyThenCrash(t)
			defer e2.Close()
			r.checkOwedCrash(t, "checkpoint while owed, overwrite, crash", e2, w)
			got := readAll(t, e2, "a")
			if len(got) == 5000 {
				t.Error("the checkpoint saved the file whole; recovery cut it")
			}
		})
	}
}

// undoZerosWriteFails: the tail's zeros never reach the device and the
// undo's first flush fails: the commit stays owed.
func undoZerosWriteFails(t *testing.T) *truncGCRig {
	t.Helper()
	holdOwed(t)
	r := newTruncGCRig(t)
	t.Cleanup(func() { testHookTruncateTail, testHookTruncateUndo = nil, nil })
	testHookTruncateTail = func(e *Engine) {
		testHookTruncateTail = nil
		emuOf(t, e).FailWrite(1) // the tail's zeros
	}
	testHookTruncateUndo = func(e *Engine, back bool) {
		if back {
			emuOf(t, e).FailFlush(1) // undoCut's first flush
		}
	}
	// The failed truncate reports the zeros' failed write to its handle
	// (File.seenWith), which is the only one: nothing is left for the
	// tests' fsyncs to report but their own failures.
	if err := r.f.Truncate(5000); !errors.Is(err, syscall.EIO) {
		t.Fatalf("truncate: %v, want the zeros' EIO", err)
	}
	testHookTruncateUndo = nil
	if !r.f.f.undoOwed() {
		t.Fatal("the failed undo owes no commit")
	}
	if err := r.e.wb.FlushFileSeen(t.Context(), r.f.f.id, &r.f.errSeen); err != nil {
		t.Fatalf("the handle's fsync would report again what its failed truncate did: %v", err)
	}
	return r
}

// TestUndoOwedCloseReopenKeepsWrites: Engine.Close while the commit is owed, after
// writes: Close writes back and checkpoints, and the reopened file has
// the writes.
func TestUndoOwedCloseReopenKeepsWrites(t *testing.T) {
	r := undoFlushFails(t)
	w := owedPattern(3, 100000)
	if _, err := r.f.WriteAt(w, 16384); err != nil {
		t.Fatal(err)
	}
	if err := r.e.Close(); err != nil {
		t.Fatal(err)
	}
	e2 := reopen(t, r.devName, r.cfg)
	r.e = e2
	want := append([]byte(nil), r.before...)
	copy(want[16384:], w)
	sameBytes(t, "closed while owed, reopened", readAll(t, e2, "a"), want)
	checkFsck(t, r.devName)
}

// TestUndoOwedSettlingFsyncCrashAtEachRecord: the file's fsync writes the owed
// commit; a flush from elsewhere and a crash at each record of the file
// it numbers must recover the file as it was, with the write, or cut;
// after the fsync, a crash must give the file with the write. The write
// leaves the commit owed (testWriteLeavesOwed): since writes settle it
// first, the fsync found nothing owed and the test passed with an fsync
// that did not settle at all (review rev53); it now checks the commit is
// owed when the fsync begins.
func TestUndoOwedSettlingFsyncCrashAtEachRecord(t *testing.T) {
	t.Cleanup(func() { testHookNumbered = nil })
	for _, setup := range []string{"flush-fails", "zeros-write-fails"} {
		for k := 1; ; k++ {
			var r *truncGCRig
			if setup == "flush-fails" {
				r = undoFlushFails(t)
			} else {
				r = undoZerosWriteFails(t)
			}
			w := owedPattern(5, 300000)
			testWriteLeavesOwed = true // the fsync, not the write, settles
			_, err := r.f.WriteAt(w, 16384)
			testWriteLeavesOwed = false
			if err != nil {
				t.Fatal(err)
			}
			if !r.f.f.undoOwed() {
				t.Fatalf("%s: no commit owed as the fsync begins: it would settle nothing", setup)
			}
			n := 0
			testHookNumbered = func(e *Engine, ff *file) {
				if ff != r.f.f {
					return
				}
				if n++; n != k {
					return
				}
				r.landFlushCopy(t)
			}
			if err := r.f.Sync(); err != nil {
				t.Fatalf("%s: fsync: %v", setup, err)
			}
			testHookNumbered = nil
			if r.f.f.undoOwed() {
				t.Fatalf("%s: owed after the fsync", setup)
			}
			want := append([]byte(nil), r.before...)
			copy(want[16384:], w)
			if n < k {
				r.copyImage(t)
				e2 := reopen(t, r.copyName, r.cfg)
				sameBytes(t, setup+": after the fsync, a crash", readAll(t, e2, "a"), want)
				e2.Close()
				break
			}
			checkFsck(t, r.copyName)
			e2 := reopen(t, r.copyName, r.cfg)
			r.checkOwedCrash(t, fmt.Sprintf("%s: crash at record %d of %d of the settling fsync", setup, k, n), e2, w)
			e2.Close()
		}
	}
}

// TestUndoOwedFailedExtendingWriteCommitsNothing: a failed extending write
// logs the size that holds (keepSize: a truncate log record, flushed).
// While a failed truncate's undo owes its commit, that log record
// commits the undo's held records in recovery like the commit would,
// but without the undo being complete: here a piece of the cut range
// was never rewritten (its read failed; redo), the zeros' record is
// durable, and recovery maps the rest at the old size over a hole where
// the piece was cut. The file was fsynced whole before the truncate.
func TestUndoOwedFailedExtendingWriteCommitsNothing(t *testing.T) {
	holdOwed(t)
	r := newTruncGCRig(t)
	old := int64(len(r.before))
	t.Cleanup(func() { testHookTruncateUndo = nil })
	r.e.cache.EvictClean(1 << 40) // the cut range is read from the device
	testHookTruncateUndo = func(e *Engine, back bool) {
		if back {
			emuOf(t, e).FailReadBad(1) // the undo's first piece
		}
	}
	emuOf(t, r.e).FailFlush(1) // the truncate's flush: the zeros' record on the device
	if err := r.f.Truncate(5000); err == nil {
		t.Fatal("truncate succeeded")
	} else {
		t.Logf("truncate: %v", err)
	}
	testHookTruncateUndo = nil
	emuOf(t, r.e).FailRead(0) // healed
	if !r.f.f.undoOwed() {
		t.Fatal("no commit owed")
	}
	sameBytes(t, "after the failed truncate", readAll(t, r.e, "a"), r.before)
	// An extending write whose piece fails (its block's read, for the
	// bytes it keeps, fails): the size grown for it goes back, logged.
	r.e.cache.EvictClean(1 << 40)
	emuOf(t, r.e).FailReadBad(1)
	if _, err := r.f.WriteAt(make([]byte, 200), old-100); err == nil {
		t.Fatal("the extending write succeeded")
	} else {
		t.Logf("extending write: %v", err)
	}
	emuOf(t, r.e).FailRead(0) // healed
	if got := r.f.Size(); got != old {
		t.Fatalf("size %d after the failed write, want %d", got, old)
	}
	r.copyImage(t) // a crash now (the log record was flushed)
	checkFsck(t, r.copyName)
	r.checkCopy(t, "an owed commit, a failed extending write, then a crash")
}

// TestUndoOwedOtherFileChurnFits: while "a" owes its undo's commit
// (and is not written), another file is overwritten and fsynced, 40 MiB
// through the 16 MiB device with 4 MiB live. GC skips every zone that
// holds any of "a"'s data (errTailUnsettled): does "b" run out of room?
func TestUndoOwedOtherFileChurnFits(t *testing.T) {
	for _, owed := range []bool{false, true} {
		t.Run(fmt.Sprint("owed=", owed), func(t *testing.T) {
			var r *truncGCRig
			if owed {
				r = undoFlushFails(t)
			} else {
				r = newTruncGCRig(t)
			}
			b := mustCreate(t, r.e, "b")
			p := make([]byte, 1<<20)
			for i := 0; i < 40; i++ {
				for j := range p {
					p[j] = byte(i + j%5)
				}
				if _, err := b.WriteAt(p, int64(i%4)<<20); err != nil {
					t.Fatalf("round %d: %v", i, err)
				}
				if err := b.Sync(); err != nil {
					t.Fatalf("round %d: sync: %v", i, err)
				}
			}
		})
	}
}

// TestUndoOwedNamespaceOpThenPowerCut: while the commit is owed (after a
// write to the file), the file is removed, renamed, removed and created
// anew, or left (kill -9); another file's fsync, then a power cut.
func TestUndoOwedNamespaceOpThenPowerCut(t *testing.T) {
	for _, op := range []string{"none", "remove", "rename", "recreate", "rename-fsync"} {
		t.Run(op, func(t *testing.T) {
			r := undoFlushFails(t)
			w := owedPattern(9, 200000)
			if _, err := r.f.WriteAt(w, 16384); err != nil {
				t.Fatal(err)
			}
			if err := r.e.wb.FlushFile(t.Context(), r.f.f.id); err != nil {
				t.Fatal(err)
			}
			name := "a"
			switch op {
			case "remove":
				if err := r.e.Remove("a"); err != nil {
					t.Fatal(err)
				}
			case "rename", "rename-fsync":
				if err := r.e.Rename("a", "c"); err != nil {
					t.Fatal(err)
				}
				name = "c"
				if op == "rename-fsync" {
					if err := r.f.Sync(); err != nil {
						t.Fatal(err)
					}
				}
			case "recreate":
				if err := r.e.Remove("a"); err != nil {
					t.Fatal(err)
				}
				createSynced(t, r.e, "a", []byte("new a"))
			}
			createSynced(t, r.e, "b", []byte("b"))
			if op == "remove" || op == "recreate" {
				checkValidCounts(t, r.e)
			}
			r.e = powerCutReopen(t, r.e, r.devName, r.cfg)
			want := append([]byte(nil), r.before...)
			copy(want[16384:], w)
			switch op {
			case "remove":
				if _, err := r.e.Stat("a"); err == nil {
					t.Error("the removed file came back")
				}
			case "recreate":
				sameBytes(t, "the new a", readAll(t, r.e, "a"), []byte("new a"))
			case "rename-fsync":
				sameBytes(t, "renamed and fsynced while owed", readAll(t, r.e, "c"), want)
			default:
				if name == "c" {
					if _, err := r.e.Stat("a"); err == nil {
						t.Error("the old name came back")
					}
					got := readAll(t, r.e, "c")
					if !bytes.Equal(got, r.before) && !bytes.Equal(got, want) && !(len(got) == 5000 && bytes.Equal(got, r.small[:5000])) {
						t.Errorf("renamed file: %d bytes, neither before, with the write, nor cut", len(got))
					}
				} else {
					r.checkOwedCrash(t, "kill -9 while owed", r.e, w)
				}
			}
			if err := r.e.Close(); err != nil {
				t.Fatal(err)
			}
			checkFsck(t, r.devName)
			r.e = reopen(t, r.devName, r.cfg)
		})
	}
}

// TestUndoOwedRetriesDoNotFillDevice: the undo's rewrite of the cut range
// (2 MiB) fails a piece's read, so its commit is owed with the whole
// range to rewrite again (redo). Each fsync tries again: it rewrites all
// of the range, while every copy the previous tries wrote stays counted
// valid (replaced) and GC skips the file. After a few tries that fail
// the same way (a flaky read), the device then healthy, the file's
// fsync must still succeed: the file holds 2 MiB of a 16 MiB device.
func TestUndoOwedRetriesDoNotFillDevice(t *testing.T) {
	holdOwed(t)
	r := newTruncGCRig(t)
	t.Cleanup(func() { testHookTruncateUndo = nil })
	r.e.cache.EvictClean(1 << 40)
	testHookTruncateUndo = func(e *Engine, back bool) {
		if back {
			emuOf(t, e).FailRead(1)
		}
	}
	emuOf(t, r.e).FailFlush(1)
	if err := r.f.Truncate(5000); err == nil {
		t.Fatal("truncate succeeded")
	}
	testHookTruncateUndo = nil
	for i := 0; i < 8; i++ {
		r.e.cache.EvictClean(1 << 40)
		emuOf(t, r.e).FailRead(1)
		err := r.f.Sync()
		emuOf(t, r.e).FailRead(0)
		r.f.f.mu.RLock()
		n := 0
		if r.f.f.undo != nil {
			n = len(r.f.f.undo.replaced)
		}
		r.f.f.mu.RUnlock()
		t.Logf("fsync %d with a read failing: %v; replaced %d", i, err, n)
	}
	if err := r.f.Sync(); err != nil {
		t.Errorf("fsync on a healthy device: %v", err)
	}
	if r.f.f.undoOwed() {
		t.Error("the commit is still owed")
	}
	sameBytes(t, "the file", readAll(t, r.e, "a"), r.before)
}

// TestUndoOwedSettledWithoutFsync: one transient flush failure during a
// truncate and its undo leaves the commit owed; the device is healthy
// from then on and nothing fsyncs the file. The background settler
// writes the commit: the state ends, what it kept counted valid is
// released, and a crash then brings the file back whole. (Before it the
// commit stayed owed until the file's next fsync, truncate or
// Engine.Sync, and GC kept away from the file's zones meanwhile.)
func TestUndoOwedSettledWithoutFsync(t *testing.T) {
	r := newTruncGCRig(t)
	failUndoFlush(t, r)
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	for {
		ch := r.e.idle.Wait() // each try of the settler signals it
		if !r.f.f.undoOwed() {
			break
		}
		select {
		case <-ch:
		case <-timer.C:
			t.Fatal("the commit is still owed 30s after the failed truncate, with no fsync")
		}
	}
	checkValidCounts(t, r.e)
	sameBytes(t, "after the settled undo", readAll(t, r.e, "a"), r.before)
	r.crashFinds(t, "settled in the background, then a crash", r.before)
}

// TestUndoOwedCheckpointEndsIt: a checkpoint while the commit is owed
// saves the file whole (recovery starts from its map, the zeros' record
// before it never replayed), so it ends the owed state: the extents the
// state kept counted valid (those the undo's rewrite of the cut range
// replaced) are garbage from then on, and the file's records carry its
// size again. The file, overwritten since, must come back with the
// overwrite after GC's empty-zone reset and a crash.
func TestUndoOwedCheckpointEndsIt(t *testing.T) {
	r := undoFlushFails(t)
	r.f.f.mu.RLock()
	pinned := len(r.f.f.undo.replaced)
	r.f.f.mu.RUnlock()
	if pinned == 0 {
		t.Fatal("the undo's rewrite replaced nothing the owed state keeps")
	}
	if err := r.e.checkpoint(); err != nil {
		t.Fatal(err)
	}
	if r.f.f.undoOwed() {
		t.Fatal("the commit is still owed after a checkpoint saved the file")
	}
	checkValidCounts(t, r.e)
	w := owedPattern(50, 256<<10)
	r.writeBack(t, w)
	e2 := r.resetEmptyThenCrash(t)
	defer e2.Close()
	want := append([]byte(nil), r.before...)
	copy(want[16384:], w)
	sameBytes(t, "checkpoint while owed, an overwrite, then a crash", readAll(t, e2, "a"), want)
}

// writeBack writes p at 16384 in the rig's file and writes it back (as
// the flusher would), without an fsync. A commit the file owes is
// written first, as for any write (WriteAtContext).
func (r *truncGCRig) writeBack(t *testing.T, p []byte) {
	t.Helper()
	if _, err := r.f.WriteAt(p, 16384); err != nil {
		t.Fatal(err)
	}
	if err := r.e.wb.FlushFile(t.Context(), r.f.f.id); err != nil {
		t.Fatal(err)
	}
}

// resetEmptyThenCrash runs GC's empty-zone reset, then another file's
// fsync, then crashes (a copy of the image): it returns the engine
// recovered from the copy, which fsck found sound.
func (r *truncGCRig) resetEmptyThenCrash(t *testing.T) *Engine {
	t.Helper()
	r.e.gc.mu.Lock()
	ok, err := r.e.gc.resetEmpty()
	r.e.gc.mu.Unlock()
	t.Logf("resetEmpty: %v %v", ok, err)
	createSynced(t, r.e, "b", []byte("b"))
	r.copyImage(t)
	checkFsck(t, r.copyName)
	return reopen(t, r.copyName, r.cfg)
}

// crashFinds copies the image (a crash now), checks it with fsck and
// checks that recovery from it finds "a" holding want.
func (r *truncGCRig) crashFinds(t *testing.T, what string, want []byte) {
	t.Helper()
	r.copyImage(t)
	checkFsck(t, r.copyName)
	e2 := reopen(t, r.copyName, r.cfg)
	defer e2.Close()
	sameBytes(t, what, readAll(t, e2, "a"), want)
}
