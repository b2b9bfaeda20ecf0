package engine

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// TestUnsealWakesDrainWaiter: GC's seal of an idle open zone moves it
// among the draining zones until the device has finished it, and a writer
// that needs a zone meanwhile, with the open budget spent, waits in
// waitDrain. When GC gives the seal up instead (unseal: its gather found
// nothing to gain or failed, or the finish failed), the zone is open
// again and the writer must wake: nothing else may ever signal it.
// Before, unseal did not, and the writer slept until an unrelated
// completion, for good on an idle engine, with quiesce held shared, so
// that the next checkpoint blocked every write behind it. Here the
// writer itself gives the seal up just before it blocks (the wake-up it
// waits for must come from unseal), as GC's pass would have at any time.
func TestUnsealWakesDrainWaiter(t *testing.T) {
	cfg := smallConfig()
	cfg.GC.Disabled = true
	cfg.OpenZones = 2
	e := formatOpen(t, memDevice(t, 16, "1M"), cfg)
	defer e.Close()
	a := createSynced(t, e, "a", bytes.Repeat([]byte{1}, 64<<10))
	createSynced(t, e, "b", bytes.Repeat([]byte{2}, 64<<10))
	// a and b each have a zone of their own: the budget is spent, and
	// sealing a's takes it out of the open set but not off the budget.
	z := a.f.mru.Load()
	if z == nil || !e.placer.seal(z, z.alloc.Load()) {
		t.Fatal("could not seal a's zone")
	}
	var once sync.Once
	waited := false
	testHookWaitDrain = func() {
		once.Do(func() {
			waited = true
			e.placer.unseal(z)
		})
	}
	t.Cleanup(func() { testHookWaitDrain = nil })
	c := mustCreate(t, e, "c")
	if _, err := c.WriteAt(bytes.Repeat([]byte{3}, 8192), 0); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Sync() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		e.idle.Signal() // let the writer go, so that the engine closes
		err := <-done
		t.Fatalf("c's fsync was still blocked 20s after unseal (after a manual wake-up it returned %v)", err)
	}
	if !waited {
		t.Fatal("c's writeback never waited for the sealed zone: the test did not test unseal's wake-up")
	}
}
