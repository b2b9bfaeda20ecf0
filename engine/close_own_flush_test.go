package engine

// Close bounds its own writeback, device flush and checkpoint once its
// context is done, whether or not it had to stop waiting for running
// operations (found by review rev53).

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
)

// TestCloseBoundsItsOwnFlushOnceContextIsDone: no operation is running;
// the file has dirty data (never fsynced). Close's context is already
// done. The device stops answering at Close's own device flush (held,
// the stand-in TestCloseReturnsWithAnFsyncStuckInItsFlush uses). Close
// found nothing to wait for; before the fix it wrote back and flushed
// without the closeAbandonWait bound and never returned: a daemon's
// SIGTERM with a dead device and no request in flight hung for ever.
// Close must return, with an error that wraps its context's.
func TestCloseBoundsItsOwnFlushOnceContextIsDone(t *testing.T) {
	_, _, held, e := openHeldFlush(t, true)
	f := mustCreate(t, e, "f")
	if _, err := f.WriteAt(bytes.Repeat([]byte{1}, 3*BlockSize), 0); err != nil {
		t.Fatal(err)
	}
	held.armed.Store(true)
	defer close(held.release)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	closed := make(chan error, 1)
	go func() { closed <- e.CloseContext(ctx) }()
	select {
	case <-held.flushed:
	case err := <-closed:
		t.Fatalf("Close returned before any device flush: %v", err)
	}
	select {
	case err := <-closed:
		t.Logf("Close: %v", err)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Close gave up on its stuck flush with %v, want an error wrapping its context's", err)
		}
	case <-time.After(closeAbandonWait + 10*time.Second):
		t.Fatalf("CloseContext (done context, no operation running) still waits for its own device flush after %v", closeAbandonWait+10*time.Second)
	}
}
