package engine

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

// TestCloseReturnsWithABackgroundGCPassStuckInTheDevice: the background
// collector's pass waits in a device flush that does not return (a
// device that stopped answering). No client operation is running, so
// Close's wait for operations ends at once, and Close (its own context,
// minutes away) must still return, saying acknowledged data may not be
// durable, rather than wait for the background goroutines for ever: the
// daemon's SIGTERM never ended. Close's bounds (closeAbandonWait) were
// only for operations it had stopped waiting for.
func TestCloseReturnsWithABackgroundGCPassStuckInTheDevice(t *testing.T) {
	_, _, held, e := openHeldFlush(t, true)
	f := mustCreate(t, e, "a")
	const size = 8 << 20
	if _, err := f.WriteAt(bytes.Repeat([]byte{1}, size), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	// From here the next device flush is held: the overwrite is written
	// back without one, and turns the zones it replaced into garbage,
	// which takes free zones below the watermark: the collector's pass
	// flushes before it resets or after it copies.
	held.armed.Store(true)
	if _, err := f.WriteAt(bytes.Repeat([]byte{2}, 2<<20), 0); err != nil {
		t.Fatal(err)
	}
	if err := e.wb.SyncAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if free, low := e.placer.freeCount(), e.cfg.GC.Low; free >= low {
		t.Fatalf("set-up: %d free zones, GC's low watermark %d: no background pass", free, low)
	}
	e.kickGC()
	within(t, held.flushed, "the background GC pass's device flush")
	defer close(held.release)
	if a := e.Stats().GCActive; a != 1 {
		t.Fatalf("set-up: %d GC passes at work on a victim while the flush is held, want the one", a)
	}
	closed := make(chan error, 1)
	go func() { closed <- e.Close() }()
	err := within(t, closed, "Close with the background GC pass stuck in a device flush")
	if err == nil {
		t.Fatal("Close returned nil with a GC pass still in the device")
	}
	if !strings.Contains(err.Error(), "may not be durable") {
		t.Errorf("Close: %q does not say acknowledged data may not be durable", err)
	}
	if _, err := e.Create("new"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Create after Close: %v, want ErrClosed", err)
	}
}
