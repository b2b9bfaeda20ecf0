package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/zns"
)

// A daemon stopped while a request ignores cancellation still stops: a
// truncate (no context in the engine) whose tail's zeros are throttled
// behind dirty data the device refuses to take keeps running after the
// grace period and the cancellation; the server then closes the engine,
// which ends it with an error, and Serve returns. What was fsynced
// before is intact after reopening the device.
//
// Before, shutdown waited for the truncate for ever after canceling it
// (the hang guard fired).
func TestShutdownEndsRequestStalledPastCancellation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev")
	device := fmt.Sprintf("emu:%s?zone_size=1M&zones=24", path)
	dev, err := zns.Open(device, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	emu := dev.(*zns.Emu)
	cfg := engine.Config{CacheBytes: 8 << 20, DirtyLimit: 256 << 10}
	cfg.GC.Disabled = true // its passes would only fail, logging each
	e, err := engine.FormatAndOpen(dev, cfg)
	if err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(t.TempDir(), "zf.sock")
	l, err := Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	srv := New(e, Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Grace: 50 * time.Millisecond})
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, l.UnixListener) }()
	c := dial(t, socket)
	bg := context.Background()
	h, _, err := c.Open(bg, "t", OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	synced := bytes.Repeat([]byte("synced!!"), 8192)
	if _, err := c.WriteAt(bg, h, synced, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Fsync(bg, h); err != nil {
		t.Fatal(err)
	}
	d, _, err := c.Open(bg, "d", OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	// The device takes no more writes; dirty data just over the limit
	// stays dirty.
	emu.FailWrites(true)
	off := int64(0)
	for _, n := range []int{128 << 10, 128 << 10, 8 << 10} {
		if _, err := c.WriteAt(bg, d, bytes.Repeat([]byte{1}, n), off); err != nil {
			t.Fatal(err)
		}
		off += int64(n)
	}
	if th := e.Stats().Cache.Throttles; th != 0 {
		t.Fatalf("%d writes throttled before the truncate: the test wants only it throttled", th)
	}
	trunc := make(chan error, 1)
	go func() { trunc <- c.Truncate(bg, h, 1000) }()
	guard := time.After(time.Minute)
	for e.Stats().Cache.Throttles == 0 {
		select {
		case err := <-trunc:
			t.Fatalf("the truncate returned (%v) before it was throttled", err)
		case <-guard:
			t.Fatal("the truncate was not throttled within a minute")
		case <-time.After(time.Millisecond):
		}
	}
	stop() // SIGTERM
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Serve did not return within a minute of the shutdown (hang guard)")
	}
	if err := <-trunc; err == nil {
		t.Fatal("the stalled truncate succeeded on a device that takes no writes")
	}
	e.Close() // as Run does; the data never fsynced is lost
	e, err = engine.Open(device, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	f, err := e.Open("t")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(synced))
	if n, err := f.ReadAt(got, 0); n != len(got) || !bytes.Equal(got, synced) {
		t.Fatalf("t after reopen: %d bytes (%v), want the %d fsynced", n, err, len(synced))
	}
}
