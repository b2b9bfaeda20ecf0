package server

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
)

// TestCanceledOpenLeavesNoHandle: a client's Open is canceled (its
// context) while the daemon runs it; the daemon opens the file all the
// same and its late reply carries a handle, which the Go client drops
// with the other late replies (drain). That handle then stays open in
// the daemon for as long as the connection lasts: it counts against
// MaxHandles (a client whose opens time out runs out of handles) and
// keeps the file open (its tail is never given up; a removed file's
// space waits for the handle). After the canceled open the client must
// still get all MaxHandles handles.
// (The client got MaxHandles-1.)
func TestCanceledOpenLeavesNoHandle(t *testing.T) {
	cfg := testConfig(emuDevice(t), filepath.Join(t.TempDir(), "zf.sock"))
	d := startDaemon(t, cfg)
	defer awaitShutdown(t, d)
	ctx := context.Background()
	c, err := Dial(ctx, d.socket, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	held, release := holdOp(t, OpOpen)
	octx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, _, err := c.Open(octx, "f", OpenCreate)
		errc <- err
	}()
	<-held
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled Open: %v, want context.Canceled", err)
	}
	release()
	opened := 0
	for opened < MaxHandles {
		if _, _, err := c.Open(ctx, "f", OpenCreate); err != nil {
			if !errors.Is(err, StatusTooMany) {
				t.Fatal(err)
			}
			break
		}
		opened++
	}
	if opened != MaxHandles {
		t.Fatalf("%d handles after a canceled open, want all %d: the canceled open's handle is still held", opened, MaxHandles)
	}
}
