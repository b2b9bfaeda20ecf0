package cli

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zonefold/zonefold/server"
)

// TestServeOutlivesItsLogReader: `zonefold serve` whose stdout and
// stderr go to a pipe that nobody reads any more (a script that waited
// for the "serving" line with `| head -1` or `grep -m1`, a log shipper
// that died) keeps serving when it next logs, and a SIGTERM still stops
// it cleanly, writing back what clients never fsynced.
//
// A Go program dies of SIGPIPE when a write to its stdout or stderr finds
// the pipe closed, unless it handles or ignores the signal: the daemon
// died at its next log line (here a malformed request's warning; the
// "shutting down" line at a SIGTERM did the same), without writing back
// or checkpointing, like a kill -9, its clients' connections cut.
func TestServeOutlivesItsLogReader(t *testing.T) {
	dir := t.TempDir()
	device := "emu:" + filepath.Join(dir, "dev") + "?zone_size=4M&zones=16"
	socket := filepath.Join(dir, "zf.sock")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(zonefoldBinary(t), "serve", device, "--format", "--socket", socket, "--cache", "16M", "--log-info")
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	sc := bufio.NewScanner(r)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "serving ") {
	}
	// Whoever waited for the line goes away.
	r.Close()

	ctx := context.Background()
	c, err := server.Dial(ctx, socket, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	// A malformed request: the daemon logs it before it answers.
	if err := c.Submit([]server.Request{{Tag: 1, Op: 200}}); err != nil {
		t.Fatal(err)
	}
	reps := make([]server.Reply, server.MaxBatch)
	if n, err := c.Recv(reps); err != nil || n != 1 || reps[0].Status != server.StatusNoOp {
		t.Fatalf("malformed request: %d replies %v, %v; want ENOSYS", n, reps[:n], err)
	}
	c.Close()
	want := bytes.Repeat([]byte("written back at SIGTERM "), 1000)
	writeUnsynced(t, socket, "kept", want)
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(time.Minute):
		t.Fatal("the daemon did not stop within a minute of SIGTERM")
	}
	if st := cmd.ProcessState.ExitCode(); st != 0 {
		t.Fatalf("serve after SIGTERM: %v, want exit 0", cmd.ProcessState)
	}

	servedAfterRestart(t, device, "kept", want)
}

// writeUnsynced writes want to a new file name through the daemon on
// socket, without an fsync.
func writeUnsynced(t *testing.T, socket, name string, want []byte) {
	t.Helper()
	ctx := context.Background()
	c, err := server.Dial(ctx, socket, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h, _, err := c.Open(ctx, name, server.OpenCreate)
	if err == nil {
		_, err = c.WriteAt(ctx, h, want, 0)
	}
	if err != nil {
		t.Fatalf("write %s: %v", name, err)
	}
}

// servedAfterRestart starts a daemon on device again and requires that
// it serves name holding want.
func servedAfterRestart(t *testing.T, device, name string, want []byte) {
	t.Helper()
	d := startDaemon(t, device)
	ctx := context.Background()
	c, err := server.Dial(ctx, d.socket, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h, size, err := c.Open(ctx, name, 0)
	if err != nil || size != int64(len(want)) {
		t.Fatalf("after the restart: %s is %d bytes, %v; want %d", name, size, err, len(want))
	}
	got := make([]byte, len(want))
	if _, err := c.ReadAt(ctx, h, got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("after the restart: %s differs from what was written (%v)", name, err)
	}
}
