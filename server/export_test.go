package server

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/zns"
)

// For the external tests (package server_test), which run fio against
// an in-process daemon when they need to hold its requests.
var HoldOps = holdOps

func NewTestDaemon(t *testing.T) (socket string) { return newDaemon(t).socket }

// RewriteReplyTags makes every daemon in the process a broken one: the
// reply to each request of op op gets the tag f returns for the
// request's tag (f is called from the daemon's goroutines, one at a
// time).
func RewriteReplyTags(t *testing.T, op Op, f func(tag uint64) uint64) {
	var mu sync.Mutex
	hook := func(q *Request, r *Reply) {
		if q.Op == op {
			mu.Lock()
			r.Tag = f(q.Tag)
			mu.Unlock()
		}
	}
	execHook.Store(&hook)
	t.Cleanup(func() { execHook.Store(nil) })
}

// NewTestDaemonEmu is an in-process daemon on an emu device the caller
// can inject faults into.
func NewTestDaemonEmu(t *testing.T) (socket string, emu *zns.Emu) {
	t.Helper()
	socket, emu, _ = newTestServerEmu(t, Options{})
	return socket, emu
}

// NewTestDaemonEmuEngine is NewTestDaemonEmu with the daemon's engine.
func NewTestDaemonEmuEngine(t *testing.T) (socket string, emu *zns.Emu, e *engine.Engine) {
	t.Helper()
	socket, emu, srv := newTestServerEmu(t, Options{})
	return socket, emu, srv.e
}

// HookExec makes f the daemon's exec hook (see execHook) until the test
// ends.
func HookExec(t *testing.T, f func(*Request, *Reply)) {
	execHook.Store(&f)
	t.Cleanup(func() { execHook.Store(nil) })
}

// newTestServerEmu is NewTestDaemonEmu with the server's options (Log
// defaults to discarding) and the server, for its counters. Its cleanup
// stops serving within 30 s or fails the test, and takes the device's
// faults away before the engine closes.
func newTestServerEmu(t *testing.T, opts Options) (socket string, emu *zns.Emu, srv *Server) {
	t.Helper()
	socket, emu, srv, _ = newTestServerEmuStop(t, opts)
	return socket, emu, srv
}

// newTestServerEmuStop is newTestServerEmu with stop, which shuts the
// server down (as the test's cleanup does, once) and returns Serve's
// result.
func newTestServerEmuStop(t *testing.T, opts Options) (socket string, emu *zns.Emu, srv *Server, stop func() error) {
	t.Helper()
	cfg := testConfig(emuDevice(t), filepath.Join(t.TempDir(), "zf.sock"))
	dev, err := zns.Open(cfg.Device, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	emu = dev.(*zns.Emu)
	if _, err := engine.Format(dev, engine.FormatOptions{}); err != nil {
		t.Fatal(err)
	}
	e, err := engine.OpenDevice(dev, cfg.Engine)
	if err != nil {
		t.Fatal(err)
	}
	l, err := Listen(cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	srv = New(e, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l.UnixListener) }()
	var once sync.Once
	var served error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case served = <-done:
			case <-time.After(30 * time.Second):
				t.Errorf("Serve did not return 30 s after cancel")
			}
		})
		return served
	}
	t.Cleanup(func() {
		emu.FailWrites(false)
		stop()
		l.Close()
		emu.FailFlush(0)
		e.Close() // may report the injected faults: not what is tested
	})
	return cfg.Socket, emu, srv, stop
}

// ClientSocketFD is c's socket descriptor, for tests that look at what
// is queued for it (SIOCINQ) or poll it for a pending reset, without
// reading.
func ClientSocketFD(c *Client) int {
	fd := -1
	if rc, err := c.uc.SyscallConn(); err == nil {
		rc.Control(func(d uintptr) { fd = int(d) })
	}
	return fd
}

// RingRepliesPublished is how many replies the daemon has published on
// c's completion ring that c has not consumed (rings only).
func RingRepliesPublished(c *Client) uint32 {
	return atomic.LoadUint32(c.ring.cqTail) - c.ring.head
}

// AwaitProgress is awaitProgress, for the external tests.
var AwaitProgress = awaitProgress

// RingDaemonSleeps says whether the daemon has said, on c's rings, that
// its reader sleeps: c's next submission rings the doorbell.
func RingDaemonSleeps(c *Client) bool {
	return atomic.LoadUint32(c.ring.sqFlags)&SQNeedWakeup != 0
}

// SetExecHook makes f the daemon's exec hook (run before each request,
// from the daemon's goroutines) for the rest of the process: for the
// test binary run as `zonefold serve` (TestMain), which has no test to
// clean up after.
func SetExecHook(f func(*Request, *Reply)) { execHook.Store(&f) }

// NewTestDaemonMaxConns is NewTestDaemon serving at most n clients at
// once (--max-clients).
func NewTestDaemonMaxConns(t *testing.T, n int) (socket string) {
	t.Helper()
	socket, _, _ = newTestServerEmu(t, Options{MaxConns: n})
	return socket
}
