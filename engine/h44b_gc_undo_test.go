package engine

import (
	"errors"
	"syscall"
	"testing"
)

// TestH44bUndoAcrossGCCopyAndPowerCuts follows h42c's race to its end: a
// GC copy of file a's pieces, numbered before a truncate of a begins, is
// in flight while the truncate's flush fails and its undo rewrites the
// cut range (records without a size, mapped over what they replace with
// undoState.keep: undoState.replaced, which a crash before the commit
// maps again). The undo's first flush fails too, so the commit is owed.
// Two orders of the copy's landing:
//
//   - copy-after-undo (h42c): the undo's records land first; the copy
//     finds nothing of its version to move where they replaced, and
//     replaced keeps the victim's extents. mapRecord does not move them
//     to GC's copy, and the pass leaves the victim (errVictimChanged).
//   - copy-before-undo: the copy lands as the undo begins (before it
//     reads the cut range back) and moves all of the victim; the pass
//     flushes and logs the victim's reset, and settle resets it while
//     the commit is owed. replaced then holds extents of GC's copy.
//
// Either way the zones replaced points into are never reset or
// relocated while the commit is owed (a pass over them is skipped), and
// at each step a power cut leaves the right bytes: before the commit
// the file as it was or cut (checkCopy), after it (the file's fsync)
// exactly as it was, and after the zones the undo kept are reclaimed
// too; fsck finds every copy clean.
//
// On the follow-up h42c left (mapRecord moving replaced to GC's copy,
// as relocateTailOld moves tailOld, so the victim could be reset before
// the commit): the copy carries what the map held when it was numbered,
// the very extents the undo's later records replace, and GC's flush
// makes it durable before the victim's reset is logged, so recovery
// before the commit maps the same bytes from the copy (its number is
// above the originals'). Tried in h44b with that move added, every
// power-cut check here passed; only the set-up check of copy-after-undo
// (and h42c's) fails, as the victim is then reclaimed. Not a fix: the
// current order loses nothing, it only leaves the victim until the
// commit (counted in GCVictimsChanged).
func TestH44bUndoAcrossGCCopyAndPowerCuts(t *testing.T) {
	for _, order := range []string{"copy-after-undo", "copy-before-undo"} {
		t.Run(order, func(t *testing.T) {
			holdOwed(t)
			r := newH42cRig(t)
			e, victim := r.e, r.victim
			r.start(t)
			var res h42cResult
			before := r.before
			t.Cleanup(func() { testHookTruncateUndo = nil })
			testHookTruncateUndo = func(_ *Engine, back bool) {
				if !back {
					return
				}
				if order == "copy-before-undo" {
					// The old size is back and the undo owed;
					// undoCut has not read the cut range yet.
					r.release()
					res = <-r.done
				}
				r.emu.FailFlush(1) // undoCut's first flush
			}
			r.emu.FailFlush(1) // the truncate's
			if err := r.f.Truncate(5000); !errors.Is(err, syscall.EIO) {
				t.Fatalf("truncate: %v, want EIO", err)
			}
			testHookTruncateUndo = nil
			if !r.f.f.undoOwed() {
				t.Fatal("set-up: the failed truncate's undo owes no commit")
			}
			if order == "copy-after-undo" {
				res = r.finish(t)
			} else if d := e.Stats().GCHeaders - before.GCHeaders; d != BlockSize {
				t.Fatalf("set-up: GC wrote %d header bytes; want one record (the one held)", d)
			}
			t.Logf("collect: %v %v", res.ok, res.err)

			// Where what the undo's records replaced lies.
			r.f.f.mu.RLock()
			held := map[*zone]int64{}
			for _, x := range r.f.f.undo.replaced {
				held[e.zoneAt(x.dev)] += x.len
			}
			r.f.f.mu.RUnlock()
			if len(held) == 0 {
				t.Fatal("set-up: the undo's records replaced nothing")
			}
			switch inVictim := held[victim]; {
			case order == "copy-after-undo" && (inVictim == 0 || res.ok):
				t.Fatalf("set-up: the undo keeps %d bytes in the victim, the pass reclaimed it: %v; want the copy to land after the undo's records", inVictim, res.ok)
			case order == "copy-before-undo" && (inVictim != 0 || !res.ok || res.err != nil):
				t.Fatalf("set-up: the undo keeps %d bytes in the victim, the pass: %v %v; want the copy to move all of it first", inVictim, res.ok, res.err)
			}
			// A reset logged by the pass is made durable and done.
			e.gc.mu.Lock()
			_, serr := e.gc.settle(true)
			e.gc.mu.Unlock()
			if serr != nil {
				t.Fatalf("settle: %v", serr)
			}
			if order == "copy-before-undo" && victim.state.Load() == zoneFull {
				t.Fatal("set-up: the victim, all of it moved by GC's copy, was not reset")
			}
			// No pass takes a zone the undo keeps bytes in while the
			// commit is owed.
			for z, n := range held {
				if z.state.Load() != zoneFull {
					continue
				}
				ok, err := collectVictim(e, z)
				if ok || z.state.Load() != zoneFull || z.valid.Load() < n {
					t.Fatalf("a pass over zone %d, where the owed undo keeps %d bytes: reclaimed %v (%v), state %d, %d valid",
						z.idx, n, ok, err, z.state.Load(), z.valid.Load())
				}
			}
			r.copyImage(t)
			h41bFsckClean(t, r.copyName)
			r.checkCopy(t, "a crash before the undo's commit")

			if err := r.f.Sync(); err != nil {
				t.Fatalf("fsync commits the undo on a healthy device: %v", err)
			}
			if r.f.f.undoOwed() {
				t.Fatal("the undo owes its commit after the file's fsync")
			}
			r.copyImage(t)
			h44bCopyWhole(t, r, "a crash after the undo's commit")

			e.gc.mu.Lock()
			_, rerr := e.gc.resetEmpty()
			e.gc.mu.Unlock()
			if rerr != nil {
				t.Fatalf("resetEmpty after the commit: %v", rerr)
			}
			for z := range held {
				if z.state.Load() == zoneFull && z.valid.Load() == 0 {
					t.Fatalf("zone %d, empty since the commit, was not reset", z.idx)
				}
			}
			checkValidCounts(t, e) // replaced is garbage now, and uncounted
			r.copyImage(t)
			h44bCopyWhole(t, r, "a crash after the kept zones were reclaimed")

			// The power cut itself, on the device the engine ran on.
			e.crashForTest()
			if err := r.emu.PowerCut(); err != nil {
				t.Fatal(err)
			}
			r.emu.Close()
			h41bFsckClean(t, r.devName)
			e2 := reopen(t, r.devName, r.cfg)
			defer e2.Close()
			sameBytes(t, "after the power cut", readAll(t, e2, "a"), r.truncGCRig.before)
		})
	}
}

// h44bCopyWhole checks that the copied image (copyImage) is clean to
// fsck and holds file a exactly as before the failed truncate (what: the
// crash the copy stands for).
func h44bCopyWhole(t *testing.T, r *h42cRig, what string) {
	t.Helper()
	h41bFsckClean(t, r.copyName)
	e := reopen(t, r.copyName, r.cfg)
	defer e.Close()
	sameBytes(t, what, readAll(t, e, "a"), r.truncGCRig.before)
}
