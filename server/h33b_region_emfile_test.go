package server_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/server"
)

// TestH33bOutOfDescriptorsForARegionSaysSo: a daemon whose descriptor
// limit leaves room to accept a client but not to make its region
// (memfd_create fails with EMFILE) refuses the client with EMFILE and
// says it is out of descriptors, the daemon's log says so too, and the
// refusal is no protocol error of the client's.
//
// Before, the client was refused with ENOMEM and told "the daemon's
// --max-shared-memory has no room for this client's region ... restart
// the daemon with a larger --max-shared-memory", which does not help;
// the daemon logged "closing connection: bad hello" and counted a
// protocol error, as if the client had broken the protocol.
func TestH33bOutOfDescriptorsForARegionSaysSo(t *testing.T) {
	d := newServe(t)
	pid := d.cmd.Process.Pid
	var old unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, nil, &old); err != nil {
		t.Skipf("cannot read the daemon's descriptor limit: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	// The accepted socket takes the only descriptor left below the
	// limit; the region's memfd finds none. A descriptor the daemon's
	// runtime opens meanwhile (rare) makes the accept itself wait:
	// lower the limit again and retry.
	for try := 0; ; try++ {
		limit := secondFreeDescriptor(t, pid)
		if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: limit, Max: old.Max}, nil); err != nil {
			t.Skipf("cannot lower the daemon's descriptor limit: %v", err)
		}
		dctx, dcancel := context.WithTimeout(ctx, 3*time.Second)
		var c *server.Client
		c, err = server.Dial(dctx, d.socket, 1<<20)
		timedOut := dctx.Err() != nil
		dcancel()
		if c != nil {
			c.Close()
		}
		if !timedOut || try == 5 {
			break
		}
	}
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &old, nil); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(err, syscall.EMFILE) || !strings.Contains(err.Error(), "descriptors") ||
		strings.Contains(err.Error(), "--max-shared-memory") {
		t.Errorf("a client the daemon has no descriptor for: %v; want EMFILE saying the daemon is out of descriptors", err)
	}
	// The daemon is fine once it has descriptors again.
	c := dialServe(t, d)
	if _, err := c.Stat(ctx, "missing"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat after the refusal: %v", err)
	}
	c.Close()
	if v := d.metricValue(t, "zonefold_server_protocol_errors_total"); v != 0 {
		t.Errorf("%v protocol errors counted for a client the daemon had no descriptor for", v)
	}
	if v := d.metricValue(t, "zonefold_server_refused_connections_total"); v != 1 {
		t.Errorf("%v refused connections counted, want 1", v)
	}
	log := d.stderr.String()
	if strings.Contains(log, "bad hello") || !strings.Contains(log, "too many open files") {
		t.Errorf("the daemon's log for a client it had no descriptor for:\n%s", log)
	}
	d.stop()
}

// secondFreeDescriptor is the second lowest descriptor number process
// pid has free: as its descriptor limit, it leaves the process one.
func secondFreeDescriptor(t *testing.T, pid int) uint64 {
	t.Helper()
	n, err := secondFree(pid)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// secondFree is secondFreeDescriptor for a process without a test
// (TestMain's modes).
func secondFree(pid int) (uint64, error) {
	dir, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	if err != nil {
		return 0, err
	}
	defer dir.Close()
	fds, err := dir.Readdirnames(-1)
	if err != nil {
		return 0, err
	}
	used := map[uint64]bool{}
	for _, fd := range fds {
		n, err := strconv.ParseUint(fd, 10, 64)
		if err != nil {
			return 0, err
		}
		// The listing's own descriptor is free again once it is read.
		used[n] = pid != os.Getpid() || n != uint64(dir.Fd())
	}
	free := 0
	for n := uint64(0); ; n++ {
		if !used[n] {
			if free++; free == 2 {
				return n, nil
			}
		}
	}
}
