package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/zonefold/zonefold/server"
)

// TestServeStopsCleanlyOnHangup: a daemon whose terminal goes away
// (SIGHUP: the window closed, the ssh session dropped) stops as it does
// on SIGTERM: it writes back what clients wrote and never fsynced,
// checkpoints and exits 0. Without a handler, Go's default for SIGHUP
// ended it at once, like a kill -9: no writeback, no checkpoint, the
// unsynced writes it had acknowledged lost.
func TestServeStopsCleanlyOnHangup(t *testing.T) {
	device := "emu:" + filepath.Join(t.TempDir(), "dev") + "?zone_size=4M&zones=16"
	d := startDaemon(t, device)
	ctx := context.Background()
	c, err := server.Dial(ctx, d.socket, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	h, _, err := c.Open(ctx, "unsynced", server.OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte("acknowledged, never fsynced "), 1000)
	if _, err := c.WriteAt(ctx, h, want, 0); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if st := d.stop(t, syscall.SIGHUP); st != 0 {
		t.Fatalf("serve after SIGHUP: %v, want exit 0\n%s", d.cmd.ProcessState, d.stderr.String())
	}

	d = startDaemon(t, device)
	c, err = server.Dial(ctx, d.socket, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h, size, err := c.Open(ctx, "unsynced", 0)
	if err != nil || size != int64(len(want)) {
		t.Fatalf("after the hangup and a restart: unsynced is %d bytes, %v; want %d", size, err, len(want))
	}
	got := make([]byte, len(want))
	if _, err := c.ReadAt(ctx, h, got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("after the hangup and a restart: unsynced differs from what was written (%v)", err)
	}
}
