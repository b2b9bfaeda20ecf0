package uring

import (
	"errors"
	"syscall"
	"testing"
)

// An entry that fails kills the ring, and the operations others left to
// it while it was in the kernel (their submits returned nil) fail with
// ECANCELED through their completions: none is abandoned. The failing
// entry is held in the doorway while the others combine and the ring's
// descriptor is broken under it.
func TestFailedEntryFailsWhatOthersLeftToIt(t *testing.T) {
	underEachWait(t, 64, testFailedEntryFailsWhatOthersLeftToIt)
}

func testFailedEntryFailsWhatOthersLeftToIt(t *testing.T, opts Options) {
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	in, release := holdFirstEntry(t, r)
	first := NewWaiter()
	firstErr := make(chan error, 1)
	go func() { firstErr <- r.Nop(first) }()
	<-in
	ws := make([]*Waiter, 4)
	for i := range ws {
		ws[i] = NewWaiter()
		if err := r.Nop(ws[i]); err != nil {
			t.Fatalf("Nop left to the entry in progress: %v", err)
		}
	}
	breakRing(t, r)
	close(release)
	if err := <-firstErr; err != nil {
		t.Fatalf("Nop whose entry failed: %v, want nil (the completion carries the failure)", err)
	}
	for i, w := range append(ws, first) {
		if res := waitOrHang(t, r, w, "Nop of the failed entry"); !errors.Is(res.Err("nop"), syscall.ECANCELED) {
			t.Errorf("Nop %d: %v, want ECANCELED", i, res.Err("nop"))
		}
	}
	if err := r.Nop(NewWaiter()); !errors.Is(err, ErrDead) {
		t.Errorf("submission after the failed entry: %v, want ErrDead", err)
	}
	if err := r.Close(); !errors.Is(err, ErrDead) {
		t.Errorf("Close: %v, want ErrDead", err)
	}
}
