package engine

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// releaseAbandoned closes what a Close that stopped waiting for running
// operations left open (the cache, the device), once the test has seen
// those operations end: as close does after a drain that completed.
func (e *Engine) releaseAbandoned() {
	e.stopColdFinisher()
	e.cache.Close()
	e.dev.Close()
	e.stopCompleter()
	e.hdrs.close()
	e.scratch.close()
}

// A write still running when Close stops waiting for operations (its
// context ended) finishes after Close has written everything back and
// checkpointed: nothing writes its data back any more, so it must not
// acknowledge it. It fails with ErrClosed; Close's error says the
// operation was given up and that every acknowledged write is durable.
// After reopening, the data fsynced before is there.
//
// Before, the write returned success and its data, dirty in a cache
// nobody wrote back, was gone after reopening: an acknowledged write
// lost on a clean shutdown, and Close's error said only that operations
// were still running.
func TestCloseGivesUpOnLateWriteWithoutAcknowledgingIt(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	h := mustCreate(t, e, "f")
	synced := bytes.Repeat([]byte("synced.."), 4096)
	if _, err := h.WriteAt(synced, 0); err != nil {
		t.Fatal(err)
	}
	if err := h.Sync(); err != nil {
		t.Fatal(err)
	}
	// The next write parks once admitted, before its data enters the
	// cache: the stand-in for a write held up past Close's wait (a GC
	// pass on a slow device).
	var armed atomic.Bool
	parked, release := make(chan struct{}), make(chan struct{})
	testHookWritePiece = func(*Engine) {
		if armed.CompareAndSwap(true, false) {
			close(parked)
			<-release
		}
	}
	t.Cleanup(func() { testHookWritePiece = nil })
	armed.Store(true)
	late := bytes.Repeat([]byte("late...."), 4096)
	type result struct {
		n   int
		err error
	}
	wrote := make(chan result, 1)
	go func() {
		n, err := h.WriteAt(late, int64(len(synced)))
		wrote <- result{n, err}
	}()
	select {
	case <-parked:
	case <-time.After(2 * time.Minute):
		t.Fatal("the write did not reach the cache within two minutes (hang guard)")
	}
	// Close's wait for running operations ends at once: the write is
	// still running.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cerr := e.CloseContext(ctx)
	close(release)
	var w result
	select {
	case w = <-wrote:
	case <-time.After(2 * time.Minute):
		t.Fatal("the write did not return within two minutes (hang guard)")
	}
	if cerr == nil {
		t.Fatal("Close returned nil with a write still running")
	}
	if !errors.Is(cerr, context.Canceled) {
		t.Errorf("Close: %v, want it to wrap the context's error", cerr)
	}
	// Everything acknowledged was written back: the error says so, and
	// says what happens to the operation given up.
	for _, want := range []string{"1 operation", "ErrClosed", "acknowledged data is durable"} {
		if !strings.Contains(cerr.Error(), want) {
			t.Errorf("Close: %q does not say %q", cerr, want)
		}
	}
	e.releaseAbandoned()
	e = reopen(t, devName, cfg)
	defer e.Close()
	got := readAll(t, e, "f")
	if w.err == nil && !bytes.Equal(got, append(append([]byte(nil), synced...), late...)) {
		t.Fatalf("the write finished after Close gave up was acknowledged (%d bytes) and is lost after reopening (%d bytes there)", w.n, len(got))
	}
	if !errors.Is(w.err, ErrClosed) || w.n != 0 {
		t.Fatalf("write finished after Close gave up: %d, %v; want 0, ErrClosed", w.n, w.err)
	}
	if len(got) < len(synced) || !bytes.Equal(got[:len(synced)], synced) {
		t.Fatalf("fsynced bytes differ after reopening (%d bytes)", len(got))
	}
}
