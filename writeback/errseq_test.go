package writeback

import (
	"context"
	"testing"
)

// TestFlushFileReportsAFailureItWaitedFor: two FlushFiles of a file (an
// fsync and a sync of everything, say) that both find its data under a
// writeback that then fails must both return the error. The failed data
// is dirty again and neither wrote it: one that returned nil would let
// its fsync report success for data that is only in the cache, and a
// crash would lose it. (The error used to be handed to whichever caller
// took it first; the other returned nil.)
func TestFlushFileReportsAFailureItWaitedFor(t *testing.T) {
	store := &holdStore{calls: make(chan struct{}, 64), fail: true}
	w, c := newTestWriteback(t, store, Config{})
	ctx := context.Background()
	if _, err := c.Write(ctx, c.File(1), 0, make([]byte, 64<<10), nil); err != nil {
		t.Fatal(err)
	}
	// A background flush takes the data and holds it under writeback.
	bg := w.start(1)
	if bg == nil {
		t.Fatal("nothing to write back")
	}
	<-store.calls

	waiting := make(chan struct{}, 2)
	waited := make(chan struct{}, 2)
	turn := make(chan struct{})
	testHookFlushFile = func(_ uint64, after bool) {
		if !after {
			waiting <- struct{}{}
			return
		}
		waited <- struct{}{}
		<-turn
	}
	t.Cleanup(func() { testHookFlushFile = nil })

	results := make(chan error, 2)
	for range 2 {
		go func() { results <- w.FlushFile(ctx, 1) }()
	}
	// Both found everything under writeback and wait for it.
	<-waiting
	<-waiting
	store.release()
	if err := w.wait(bg); err == nil {
		t.Fatal("the background flush did not fail")
	}
	<-waited
	<-waited
	// One at a time: the first to go takes the error first.
	for i := range 2 {
		turn <- struct{}{}
		if err := <-results; err == nil {
			t.Fatalf("FlushFile %d of 2 returned nil; the data it waited for failed and is still dirty (%d bytes)",
				i+1, c.DirtyBytes())
		}
	}
	if d := c.DirtyBytes(); d != 64<<10 {
		t.Errorf("%d bytes dirty; want all %d (failed writes stay dirty)", d, 64<<10)
	}
}

// TestFlushFileLeaveErrorLeavesItForFlushFile: a flush on the file's
// behalf that its client did not ask for (the engine's background
// settler, say) writes back data whose earlier writeback failed, and
// succeeds; the failure is still the file's own FlushFile's (its fsync)
// to report, once.
func TestFlushFileLeaveErrorLeavesItForFlushFile(t *testing.T) {
	store := &holdStore{calls: make(chan struct{}, 64), fail: true}
	w, c := newTestWriteback(t, store, Config{})
	ctx := context.Background()
	if _, err := c.Write(ctx, c.File(1), 0, make([]byte, 64<<10), nil); err != nil {
		t.Fatal(err)
	}
	bg := w.start(1) // background writeback, which fails
	if bg == nil {
		t.Fatal("nothing to write back")
	}
	<-store.calls
	store.release()
	if err := w.wait(bg); err == nil {
		t.Fatal("the background flush did not fail")
	}
	store.fail = false
	res := make(chan error, 1)
	go func() { res <- w.FlushFileLeaveError(ctx, 1) }()
	<-store.calls
	store.release()
	if err := <-res; err != nil {
		t.Fatalf("FlushFileLeaveError of data that now reached the store: %v", err)
	}
	if d := c.DirtyBytes(); d != 0 {
		t.Fatalf("%d bytes still dirty", d)
	}
	if err := w.FlushFile(ctx, 1); err == nil {
		t.Error("FlushFile after FlushFileLeaveError returned nil; the failed writeback was reported to nobody")
	}
	if err := w.FlushFile(ctx, 1); err != nil {
		t.Errorf("the second FlushFile: %v, want nil (reported once)", err)
	}
}
