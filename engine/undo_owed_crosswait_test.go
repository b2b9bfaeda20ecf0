package engine

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestUndoOwedTwoWritersNoCrossWait: two files each owe a failed
// truncate's undo commit (no background settler has started yet), and
// two writers overwrite them, one each, without an fsync, through a
// device that holds a fraction of what they write: admission runs GC,
// and GC skips every zone holding data of a file that owes its commit
// (tailUnsettled), so a writer whose pass skipped the other file's zone
// waits for that file's settler (waitSettled). The settler needs that
// file's wmu. Had a writer kept its own file owed while it held its
// wmu, each writer would wait for the settler the other one blocks: it
// did (tailSettleWait, maxTailWaits: 40 s), then ENOSPC on a device of
// garbage. A write settles its own file's commit first
// (WriteAtContext), so neither writer holds an owed file's wmu while it
// waits, and both must succeed.
func TestUndoOwedTwoWritersNoCrossWait(t *testing.T) {
	testNoSettler = true
	t.Cleanup(func() { testNoSettler = false })
	ra := newTruncGCRig(t)
	b := mustCreate(t, ra.e, "b")
	copiesThenBig(t, b, 20, 2<<20)
	rb := &truncGCRig{devName: ra.devName, cfg: ra.cfg, e: ra.e, f: b}
	failUndoFlush(t, ra)
	failUndoFlush(t, rb)
	if !ra.f.f.undoOwed() || !rb.f.f.undoOwed() {
		t.Fatal("set-up: a commit is not owed")
	}
	// From now on a writer short of space starts a file's settler when
	// its pass skips that file's zone (settleSoon).
	testNoSettler = false
	// The first writer to wait for a settler waits for the other writer
	// to come to such a wait too (both in admission, each holding its
	// own file's wmu), so that the cross-wait, if the code allows it,
	// happens every run. The bound only keeps a run in which the other
	// writer never waits from stalling; it decides nothing.
	var mu sync.Mutex
	arrived := 0
	both := make(chan struct{})
	testHookTailWait = func(*Engine) {
		mu.Lock()
		arrived++
		n := arrived
		mu.Unlock()
		switch n {
		case 1:
			select {
			case <-both:
			case <-time.After(5 * time.Second):
			}
		case 2:
			close(both)
		}
	}
	t.Cleanup(func() { testHookTailWait = nil })
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, f := range []*File{ra.f, rb.f} {
		wg.Go(func() {
			p := make([]byte, 512<<10)
			for round := range 40 {
				for j := range p {
					p[j] = byte(round + i + j%11)
				}
				if _, err := f.WriteAt(p, 16384+int64(round%4)*int64(len(p))); err != nil {
					errs[i] = fmt.Errorf("%s, round %d: %w", f.Name(), round, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Errorf("overwrites of two files owing their commits (healthy device): %v", err)
		}
	}
	st := ra.e.Stats()
	mu.Lock()
	t.Logf("GC resets %d, copied %d; writers' waits for a settler %d", st.GCResets, st.GCCopied, arrived)
	mu.Unlock()
}
