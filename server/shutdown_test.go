package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/server"
	"github.com/zonefold/zonefold/zns"
)

// limitFileSize sets RLIMIT_FSIZE to v bytes (nothing if v is empty):
// writes at or past it fail with EFBIG (Go ignores SIGXFSZ), which makes
// the end of an emu device's file a device that fails every append.
func limitFileSize(v string) error {
	if v == "" {
		return nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return fmt.Errorf("ZONEFOLD_TEST_FSIZE=%q: %w", v, err)
	}
	return unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: n, Max: n})
}

// TestServeStoppedWithUnwritableDirtyDataExits1: a daemon stopped with
// SIGTERM while it holds dirty data it cannot write back (here its
// device fails every append past the first data zones) exits 1 with one
// short line saying so, leaves neither socket nor lock file, and loses
// nothing a client's fsync acknowledged: a new daemon serves the synced
// file whole. Only the data never fsynced is lost, as a kernel file
// system's is when writeback fails at unmount.
func TestServeStoppedWithUnwritableDirtyDataExits1(t *testing.T) {
	dir := t.TempDir()
	device := fmt.Sprintf("emu:%s?zone_size=1M&zones=12", filepath.Join(dir, "dev"))
	socket := filepath.Join(dir, "zf.sock")
	// Create the device before the limit: its file is 13 MiB, its zone i
	// at 1 MiB + i MiB. Zones 0 and 1 hold metadata; appends to data
	// zones past the first three fail.
	dev, err := zns.Open(device+"&format=1", zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dev.Close()
	d := startServe(t, device, socket, fmt.Sprintf("ZONEFOLD_TEST_FSIZE=%d", 6<<20))
	ctx := context.Background()
	c, err := server.Dial(ctx, socket, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	synced := bytes.Repeat([]byte("synced "), 64<<10/7)
	h, _, err := c.Open(ctx, "synced", server.OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteAt(ctx, h, synced, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Fsync(ctx, h); err != nil {
		t.Fatalf("fsync before the device failed: %v", err)
	}
	// Dirty data more than the writable zones hold: written back, some
	// of it must reach a zone the device fails.
	buf := bytes.Repeat([]byte{0x5a}, 256<<10)
	for i := range 12 {
		h, _, err := c.Open(ctx, fmt.Sprintf("dirty%d", i), server.OpenCreate)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.WriteAt(ctx, h, buf, 0); err != nil {
			t.Fatalf("write dirty%d: %v", i, err)
		}
	}
	c.Close()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-d.exited:
	case <-time.After(time.Minute):
		t.Fatalf("daemon did not exit after SIGTERM\n%s", d.stderr)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("daemon stopped with unwritable dirty data: %v, want exit status 1\n%s", err, d.stderr)
	}
	lines := strings.Split(strings.TrimSpace(d.stderr.String()), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "zonefold: ") || len(last) > 300 || !regexp.MustCompile(`data never fsynced of \d+ files? was not written back and is lost`).MatchString(last) {
		t.Fatalf("last line of the daemon's stderr: %q, want one short line saying the unsynced data was not written back\n%s", last, d.stderr)
	}
	t.Logf("exit 1: %s", last)
	for _, p := range []string{socket, socket + ".lock"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("the daemon left %s behind", p)
		}
	}
	// A daemon without the limit serves what was synced.
	d = startServe(t, device, socket)
	c, err = server.Dial(ctx, socket, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h, size, err := c.Open(ctx, "synced", 0)
	if err != nil {
		t.Fatalf("the synced file after the failed stop: %v", err)
	}
	got := make([]byte, size)
	if _, err := c.ReadAt(ctx, h, got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, synced) {
		t.Fatalf("the synced file after the failed stop: %d bytes, not the %d its fsync acknowledged", len(got), len(synced))
	}
	c.Close()
	d.stop()
}
