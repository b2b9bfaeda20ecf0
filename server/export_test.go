package server

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"

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
	srv := New(e, Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l.UnixListener) }()
	t.Cleanup(func() {
		cancel()
		<-done
		l.Close()
		emu.FailFlush(0)
		e.Close() // may report the injected faults: not what is tested
	})
	return cfg.Socket, emu
}
