package engine

// Close bounded by its context: cli serve and docs/protocol.md say a
// request stuck on a device that stopped answering is given up after the
// engine's wait and the daemon exits 1. These tests hold one device
// flush (the stand-in for a device that does not answer it) and ask
// CloseContext, its context already done, to return. Both hung before
// Close bounded its writeback and checkpoint after giving up on running
// operations (closeAbandonWait) and set its closing bit under no lock.

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

// An fsync whose device flush does not return: Close stops waiting for
// it at once (its context is done), writes back and checkpoints; the
// checkpoint's flush joins the group flush the fsync is running and
// waits for it. Close must give up on that and say what it means.
func TestCloseReturnsWithAnFsyncStuckInItsFlush(t *testing.T) {
	_, _, held, e := openHeldFlush(t, true)
	f := mustCreate(t, e, "f")
	if _, err := f.WriteAt(bytes.Repeat([]byte{1}, 3*BlockSize), 0); err != nil {
		t.Fatal(err)
	}
	held.armed.Store(true)
	synced := make(chan error, 1)
	go func() { synced <- f.Sync() }()
	within(t, held.flushed, "the fsync's flush")
	defer close(held.release)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	closed := make(chan error, 1)
	go func() { closed <- e.CloseContext(ctx) }()
	err := within(t, closed, "CloseContext (done context) with one fsync stuck in its device flush")
	if err == nil {
		t.Fatal("Close returned nil with an fsync still running")
	}
	mayBeLost(t, err)
}

// A durable Remove held nsMu across its record's flush (it waits for it
// without nsMu since b034be4, but still as a running operation); Close
// took nsMu before it looked at its context, so with that flush stuck
// Close waited for it, never set the closing bit (new operations were
// still admitted) and never returned.
func TestCloseReturnsWithARemoveStuckInItsFlush(t *testing.T) {
	_, _, held, e := openHeldFlush(t, true)
	f := mustCreate(t, e, "f")
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	held.armed.Store(true)
	removed := make(chan error, 1)
	go func() { removed <- e.Remove("f") }()
	within(t, held.flushed, "the remove's flush")
	defer close(held.release)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	closed := make(chan error, 1)
	go func() { closed <- e.CloseContext(ctx) }()
	err := within(t, closed, "CloseContext (done context) with one Remove stuck in its device flush")
	if err == nil {
		t.Fatal("Close returned nil with a Remove still running")
	}
	mayBeLost(t, err)
	if _, err := e.Create("new"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Create after Close returned: %v, want ErrClosed", err)
	}
}

// mayBeLost checks that Close's error, having given up on its
// checkpoint, wraps its context's error and says acknowledged data may
// not be durable.
func mayBeLost(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Close: %v, want it to wrap the context's error", err)
	}
	if !strings.Contains(err.Error(), "may not be durable") {
		t.Errorf("Close: %q does not say acknowledged data may not be durable", err)
	}
}
