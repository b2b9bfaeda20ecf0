package server_test

// A flood of connections that runs the daemon out of
// file descriptors must not stop the daemon.

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/server"
)

// TestAcceptEMFILEDoesNotStopTheDaemon: the daemon's descriptor limit
// is lowered to a few more than it uses, and clients connect until its
// accept fails with EMFILE. The daemon must go on serving: a client that
// was connected before keeps being answered, and once the flood goes a new
// client is served.
//
// Before the fix Serve took any accept error but a timeout as the end of
// the listener: the daemon shut every session down and exited 1 with
// "server: accept: accept unix ...: too many open files". Any local user
// able to connect could stop the daemon for everyone this way whenever
// --max-clients was above what RLIMIT_NOFILE left room for.
func TestAcceptEMFILEDoesNotStopTheDaemon(t *testing.T) {
	d := newServe(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before, err := server.Dial(ctx, d.socket, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	h, _, err := before.Open(ctx, "kept", server.OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	pid := d.cmd.Process.Pid
	fds, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	if err != nil {
		t.Fatal(err)
	}
	limit := uint64(len(fds) + 4)
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: limit, Max: limit}, nil); err != nil {
		t.Skipf("cannot lower the daemon's descriptor limit: %v", err)
	}
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	for range 3 * limit {
		c, err := net.Dial("unixpacket", d.socket)
		if err != nil {
			break
		}
		flood = append(flood, c)
	}
	// Let the daemon's accept loop meet the limit.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-d.exited:
			t.Fatalf("the daemon exited when its accept ran out of descriptors (%d connections flooding): %v\n%s",
				len(flood), err, d.stderr)
		case <-time.After(50 * time.Millisecond):
		}
		if _, err := before.WriteAt(ctx, h, []byte("still served"), 0); err != nil {
			t.Fatalf("a client connected before the flood lost its daemon: %v\n%s", err, d.stderr)
		}
	}
	for _, c := range flood {
		c.Close()
	}
	flood = nil
	// Until the daemon has accepted and ended the flood's connections
	// still queued, it may lack a descriptor for a new client's region:
	// that is a refusal that says to try again (EMFILE), not a hang.
	after, err := server.Dial(ctx, d.socket, 1<<20)
	for errors.Is(err, server.StatusTooMany) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
		after, err = server.Dial(ctx, d.socket, 1<<20)
	}
	if err != nil {
		t.Fatalf("after the flood went, a new client is refused: %v\n%s", err, d.stderr)
	}
	defer after.Close()
	if _, err := after.Stat(ctx, "kept"); err != nil {
		t.Fatalf("after the flood went: %v", err)
	}
	if err := before.Fsync(ctx, h); err != nil {
		t.Fatal(err)
	}
	before.Close()
	after.Close()
	d.stop()
}
