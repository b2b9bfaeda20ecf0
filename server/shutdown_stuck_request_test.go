package server

// cli serve and docs/protocol.md promise that a request
// that ignores its cancellation too (stuck on a device that stopped
// answering) is given up after the grace periods and the engine's wait,
// and the daemon exits 1. Server.shutdown closed the engine and then
// waited for every connection to end, with no bound: the request given
// up still holds its connection, so Run never returned (this failed at
// the 30 s guard). Now it waits one more grace period, then returns an
// error that says connections were left.

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestShutdownReturnsWithARequestThatIgnoresCancellation(t *testing.T) {
	cfg := testConfig(emuDevice(t), filepath.Join(t.TempDir(), "zf.sock"))
	cfg.Grace = 50 * time.Millisecond
	d := startDaemon(t, cfg)
	ctx := context.Background()
	c := dial(t, d.socket)
	h, _, err := c.Open(ctx, "f", OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	// The stand-in for a request stuck on the device: it ignores its
	// context, as a device flush or an append that never completes does.
	held, release := holdOp(t, OpFsync)
	go c.Fsync(ctx, h)
	<-held
	d.cancel()
	d.cancel = nil
	select {
	case err := <-d.done:
		if err == nil || !strings.Contains(err.Error(), "connections still open a grace period after the engine closed: 1") {
			t.Fatalf("Run after a shutdown that left a stuck request: %v, want an error that says one connection was left (serve exits 1)", err)
		}
	case <-time.After(30 * time.Second):
		release()
		<-d.done
		t.Fatal("Run did not return within 30 s of shutdown (grace 50 ms) with one request that ignores its cancellation: shutdown waits for its connection after closing the engine")
	}
}
