package server

import (
	"context"
	"errors"
	"testing"
)

// TestCanceledOpenLeavesNoHandleOpen: an Open whose context is
// canceled while the daemon holds it returns context.Canceled; the
// daemon still opens the file and replies with a handle, which the next
// call's claim (drain) receives. Before the fix the drain dropped it
// and nobody could close that handle: it stayed open for the
// connection's life (MaxHandles of them and every Open failed EMFILE),
// and with it the engine's file handle (found by review rev53). Shown by
// closing the handle number the daemon reused: it must not be open, as
// the client never received it.
func TestCanceledOpenLeavesNoHandleOpen(t *testing.T) {
	d := newDaemon(t)
	for _, v := range hostileVersions {
		t.Run(v.name, func(t *testing.T) {
			ctx := context.Background()
			c := v.dial(t, d.socket)
			h1, _, err := c.Open(ctx, "x", OpenCreate)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.CloseFile(ctx, h1); err != nil {
				t.Fatal(err)
			}
			held, release := holdOp(t, OpOpen)
			octx, cancel := context.WithCancel(ctx)
			errc := make(chan error, 1)
			go func() { _, _, err := c.Open(octx, "y", OpenCreate); errc <- err }()
			<-held
			cancel()
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Fatalf("canceled Open: %v", err)
			}
			release()
			if _, err := c.Stat(ctx, "x"); err != nil { // drains the late reply
				t.Fatal(err)
			}
			if err := c.CloseFile(ctx, h1); err == nil {
				t.Errorf("handle %d, which the client closed and never received again, was open: the canceled Open's handle leaked (nothing closes it)", h1)
			} else {
				t.Logf("CloseFile(%d): %v", h1, err)
			}
		})
	}
}
