package engine

import (
	"bytes"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"
)

// churnShifted overwrites 6 MiB of the rig's file from 16384 without an
// fsync, as churnOwed does, but each 1 MiB write starts 384 KiB past the
// last one's (mod 6 MiB): a write replaces parts of two earlier ones, so
// a zone ends up holding both garbage and live copies, and only a
// relocating GC pass frees room (churnOwed's aligned overwrites leave
// whole zones of garbage, which resetEmpty takes without a copy).
func churnShifted(t *testing.T, r *truncGCRig, rounds int) error {
	t.Helper()
	p := make([]byte, 1<<20)
	const span = 6 << 20
	for i := 0; i < rounds; i++ {
		for j := range p {
			p[j] = byte(i + j%7)
		}
		off := int64(i*(384<<10)) % (span - 1<<20)
		if _, err := r.f.WriteAt(p, 16384+off); err != nil {
			t.Logf("round %d: %v", i, err)
			return err
		}
	}
	return nil
}

// TestUndoOwedShiftedOverwritesFit: as
// TestUndoOwedOverwritesWithoutFsyncFit, but the overwrites are not
// aligned with the earlier ones: a zone ends up holding both garbage
// and live copies of the file, and GC skips every zone holding data of
// a file that owes its commit (tailUnsettled), so the healthy device
// ran out of room while the control fit, until a write settled the
// commit first.
func TestUndoOwedShiftedOverwritesFit(t *testing.T) {
	t.Run("control", func(t *testing.T) {
		r := newTruncGCRig(t)
		if err := churnShifted(t, r, 40); err != nil {
			t.Fatalf("overwrites without an owed commit: %v", err)
		}
	})
	t.Run("owed", func(t *testing.T) {
		r := undoFlushFails(t)
		if !r.f.f.undoOwed() {
			t.Fatal("no commit owed")
		}
		if err := churnShifted(t, r, 40); err != nil {
			t.Errorf("overwrites while the undo's commit is owed (healthy device): %v", err)
		}
	})
}

// TestUndoOwedShiftedFullThenFsync: after the unaligned overwrites
// above ran out of room, the file's fsync (which writes the owed commit
// first) must succeed on the healthy device, and writes after it too.
func TestUndoOwedShiftedFullThenFsync(t *testing.T) {
	r := undoFlushFails(t)
	werr := churnShifted(t, r, 40)
	t.Logf("churn: %v", werr)
	for i := 0; i < 3; i++ {
		err := r.f.Sync()
		t.Logf("fsync %d: %v (owed %v)", i, err, r.f.f.undoOwed())
		if err == nil {
			break
		}
	}
	if r.f.f.undoOwed() {
		t.Error("the commit is still owed after three fsyncs on a healthy device")
	}
	if err := churnShifted(t, r, 12); err != nil {
		t.Errorf("writes after the fsync: %v", err)
	}
}

// TestSettlerLeavesWritebackErrorToFsync: a write of the file fails
// at writeback (background writeback, which leaves the error for the
// file's fsync, as Linux's errseq does: doc.go, crash consistency). The
// file's next fsync must report it, once. With a failed truncate's
// commit owed, the background settler's FlushFile (Engine.settleLater,
// undoCut's flushUndo) takes the error instead, and the client's fsync
// returns success: the failure is reported to nobody. Engine.Sync,
// which writes the owed commit first, takes it from the file's fsync
// the same way.
func TestSettlerLeavesWritebackErrorToFsync(t *testing.T) {
	for _, how := range []string{"not owed", "not owed, Engine.Sync", "owed, settler", "owed, Engine.Sync"} {
		t.Run(how, func(t *testing.T) {
			owed := strings.HasPrefix(how, "owed")
			testNoSettler = true
			t.Cleanup(func() { testNoSettler = false })
			r := newTruncGCRig(t)
			if owed {
				failUndoFlush(t, r)
				if !r.f.f.undoOwed() {
					t.Fatal("no commit owed")
				}
			}
			w := owedPattern(4, 300000)
			// The write leaves the commit owed (it settles it first
			// otherwise, before the failure: the settler and
			// Engine.Sync then had nothing to settle, and the test
			// passed with them taking the error, review rev53).
			testWriteLeavesOwed = true
			_, err := r.f.WriteAt(w, 16384)
			testWriteLeavesOwed = false
			if err != nil {
				t.Fatal(err)
			}
			if owed && !r.f.f.undoOwed() {
				t.Fatal("the write settled the commit: nothing left for the settler or Engine.Sync")
			}
			emuOf(t, r.e).FailWrite(1)
			err = r.e.wb.SyncAll(t.Context()) // background writeback
			t.Logf("writeback: %v", err)
			if err == nil {
				t.Fatal("the writeback did not fail")
			}
			if strings.HasSuffix(how, "Engine.Sync") {
				// syncfs: it may report the error, but leaves the
				// file's fsync its error all the same (doc.go).
				t.Logf("Engine.Sync: %v", r.e.Sync(t.Context()))
				if r.f.f.undoOwed() {
					t.Logf("Engine.Sync: %v", r.e.Sync(t.Context()))
				}
			}
			if how == "owed, settler" {
				testNoSettler = false
				r.e.settleLater(r.f.f)
				r.waitNotOwed(t)
			}
			if err := r.f.Sync(); !errors.Is(err, syscall.EIO) {
				t.Errorf("the file's fsync after its failed writeback: %v, want EIO", err)
				// Not lost, only unreported: the data is durable.
				want := append([]byte(nil), r.before...)
				copy(want[16384:], w)
				r.crashFinds(t, "fsync returned success, then a crash", want)
			}
		})
	}
}

// waitNotOwed waits until the rig's file owes no commit (a settler's
// try ended it), failing the test after a long time: a hang bound, not a
// decision.
func (r *truncGCRig) waitNotOwed(t *testing.T) {
	t.Helper()
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	for {
		ch := r.e.idle.Wait()
		if !r.f.f.undoOwed() {
			return
		}
		select {
		case <-ch:
		case <-timer.C:
			t.Fatal("the commit was never settled")
		}
	}
}

// TestCheckpointFlushFailsWhileOwed: a checkpoint while the commit
// is owed is written but its flush fails: it may be durable all the
// same (a later flush makes it so), yet the state is not ended
// (endOwed runs only on success). An overwrite since (which settles the
// commit first) replaces extents it maps; GC's empty-zone reset,
// another file's fsync and a crash must not leave the file mapping a
// reset zone. (Overwrites while owed, which made copies numbered since
// the state began garbage at once, are gone: a write settles first.)
func TestCheckpointFlushFailsWhileOwed(t *testing.T) {
	r := undoFlushFails(t)
	w2 := owedPattern(77, 3<<20)
	emuOf(t, r.e).FailFlush(2) // the checkpoint's second flush, after its record
	if err := r.e.checkpoint(); err == nil {
		t.Fatal("the checkpoint succeeded")
	} else {
		t.Logf("checkpoint: %v", err)
	}
	if !r.f.f.undoOwed() {
		t.Fatal("a checkpoint that failed ended the state")
	}
	r.writeBack(t, w2)
	e2 := r.resetEmptyThenCrash(t)
	defer e2.Close()
	got := readAll(t, e2, "a")
	grown := func(ws ...[]byte) []byte {
		c := append([]byte(nil), r.before...)
		for _, w := range ws {
			if n := 16384 + len(w); n > len(c) {
				c = append(c, make([]byte, n-len(c))...)
			}
			copy(c[16384:], w)
		}
		return c
	}
	for i, c := range [][]byte{r.before, grown(w2)} {
		if bytes.Equal(got, c) {
			t.Logf("recovered with %d of 1 write", i)
			return
		}
	}
	if len(got) == 5000 && bytes.Equal(got, r.small[:5000]) {
		t.Log("recovered cut")
		return
	}
	want := grown(w2)
	first := -1
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			first = i
			break
		}
	}
	t.Errorf("recovered %d bytes, neither the file with a prefix of its writes nor cut; first difference from the last at %d", len(got), first)
}
