package server_test

// fio jobs whose files fail at open or at close: the engine must hand
// fio the error, and leave fio's file state as fio requires.

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/server"
)

// fioFails runs fio with args against socket and requires that it exits
// on its own (not killed by a signal, as by an assertion or a heap
// corruption abort) with an error whose text contains want.
func fioFails(t *testing.T, socket string, want string, args ...string) string {
	t.Helper()
	fio, engine := fioEnv(t)
	cmd := exec.Command(fio, append([]string{"--ioengine=external:" + engine, "--sock=" + socket}, args...)...)
	cmd.Dir = t.TempDir()
	b, err := cmd.CombinedOutput()
	out := string(b)
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("fio %v: want a failed job, got %v\n%s", args, err, out)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Fatalf("fio %v was killed by %v (an abort in fio or the engine)\n%s", args, ws.Signal(), out)
	}
	for _, bad := range []string{"double free", "corruption", "Assertion", "assertion"} {
		if strings.Contains(out, bad) {
			t.Fatalf("fio %v: %q in its output\n%s", args, bad, out)
		}
	}
	if !strings.Contains(out, want) {
		t.Fatalf("fio %v: want %q in its output\n%s", args, want, out)
	}
	return out
}

// TestFioFailedLayoutWithFsyncOnClose: a read job whose layout truncate
// the daemon refuses (the end is past the largest file) fails with the
// daemon's error. Before the fix, with fsync_on_close=1, open_file
// returned the failure with f->fd still set to its memfd, and fio
// aborted in an assertion or with "double free or corruption".
func TestFioFailedLayoutWithFsyncOnClose(t *testing.T) {
	fioEnv(t)
	d := newServe(t)
	for _, foc := range []string{"0", "1"} {
		t.Run("fsync_on_close="+foc, func(t *testing.T) {
			fioFails(t, d.socket, "zonefold lay out", "--name=far", "--filename=far"+foc, "--rw=read",
				"--bs=64k", "--offset=1125899906842624", "--size=1m", "--fsync_on_close="+foc)
			// Every handle the job opened is closed: before the fix the
			// failed job left its handle open on the daemon.
			if o, c := d.requests(t, "open"), d.requests(t, "close"); o == 0 || o != c {
				t.Fatalf("the daemon served %d opens and %d closes", o, c)
			}
		})
	}
	d.stop()
}

// requests is the daemon's count of requests served with operation op.
func (d *daemonProc) requests(t *testing.T, op string) int64 {
	t.Helper()
	return int64(d.metricValue(t, `zonefold_server_requests_total{op="`+op+`"}`))
}

// TestFioReportsFailedFsyncs: a flush of the device fails with EIO while
// fio's job syncs, once at close (fsync_on_close=1) and once after a
// sync=1 write, once at fio's end_fsync; fio must report the EIO.
// Before the fix the engine dropped the error of the fsync at close (fio
// ignores close_file's return) and of fio's own fsync io_us (fio ignores
// their errors), and those jobs ended with err=0; sync=1 passed before.
func TestFioReportsFailedFsyncs(t *testing.T) {
	fioEnv(t)
	for _, tc := range []struct {
		opt   string
		flush int // the flush that fails: the job's fsyncs come first
		want  string
	}{
		{"--sync=1", 1, "error=Input/output error"},
		{"--end_fsync=1", 1, "func=zonefold fsync, error=Input/output error"},
		// fio's end-of-job fsync, then the engine's at close.
		{"--fsync_on_close=1", 1, "func=zonefold fsync, error=Input/output error"},
		{"--fsync_on_close=1", 2, "func=zonefold fsync_on_close, error=Input/output error"},
	} {
		opt := tc.opt
		t.Run(fmt.Sprintf("%s/flush%d", opt, tc.flush), func(t *testing.T) {
			socket, emu, e := server.NewTestDaemonEmuEngine(t)
			if tc.flush == 2 {
				// The fsync at close follows fio's with nothing
				// written between, and an fsync that has nothing
				// new to make durable flushes nothing: a deferred
				// create just before it gives it a flush to run.
				var fsyncs atomic.Int32
				server.HookExec(t, func(q *server.Request, _ *server.Reply) {
					if q.Op != server.OpFsync || q.Handle == 0 || fsyncs.Add(1) != 2 {
						return
					}
					if f, err := e.OpenFile("eio-other", engine.OCreate|engine.ODeferSync); err != nil {
						t.Errorf("deferred create before the fsync at close: %v", err)
					} else {
						f.Close()
					}
				})
			}
			// The file exists, so that the job's open (a create is
			// durable when answered) flushes nothing.
			ctx := context.Background()
			c, err := server.Dial(ctx, socket, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			h, _, err := c.Open(ctx, "eio", server.OpenCreate)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.CloseFile(ctx, h); err != nil {
				t.Fatal(err)
			}
			emu.FailFlush(tc.flush)
			// fallocate=none: no grow before the job (a truncate,
			// durable when answered) takes a flush of its own.
			fioFails(t, socket, tc.want, "--name=eio", "--filename=eio", "--rw=write", "--bs=64k", "--size=1m",
				"--fallocate=none", opt)
		})
	}
}

// TestFioRefusesRepliesWithForeignTags: replies whose tags name no
// request the engine has outstanding fail the job with EPROTO — before
// the fix the engine took any even or odd tag for an io_u's address
// (fio crashed on an odd one) and completed an io_u twice for a repeated
// tag.
func TestFioRefusesRepliesWithForeignTags(t *testing.T) {
	fioEnv(t)
	for _, tc := range []struct {
		name string
		sync string
		f    func(first *uint64) func(uint64) uint64
	}{
		{"odd", "0", func(*uint64) func(uint64) uint64 { return func(tag uint64) uint64 { return tag | 0x1001 } }},
		{"repeated", "0", repeatFirst},
		{"repeated-sync", "1", repeatFirst},
	} {
		t.Run(tc.name, func(t *testing.T) {
			socket := server.NewTestDaemon(t)
			var first uint64
			server.RewriteReplyTags(t, server.OpWrite, tc.f(&first))
			fioFails(t, socket, "error=Protocol error", "--name=tags", "--filename=tags", "--rw=write",
				"--bs=4k", "--size=1m", "--iodepth=4", "--sync="+tc.sync)
		})
	}
}

// TestFioRefusesStaleReplies: a reply that carries the tag of an earlier
// request, one already answered (a stale or duplicated reply from a
// broken daemon), fails the job with EPROTO. The engine reuses a freed
// slot at once, so such a tag names whatever request holds the slot now:
// before tags carried the slot's generation, the engine completed that
// other request with the stale reply's result, and at iodepth=1 (the
// same slot every time) the job ran to the end with every reply shifted
// by one.
func TestFioRefusesStaleReplies(t *testing.T) {
	fioEnv(t)
	for _, depth := range []string{"1", "4"} {
		t.Run("iodepth="+depth, func(t *testing.T) {
			socket := server.NewTestDaemon(t)
			var prev uint64
			server.RewriteReplyTags(t, server.OpWrite, func(tag uint64) uint64 {
				if prev == 0 {
					prev = tag
					return tag
				}
				stale := prev
				prev = tag
				return stale
			})
			fioFails(t, socket, "error=Protocol error", "--name=stale", "--filename=stale", "--rw=write",
				"--bs=4k", "--size=1m", "--iodepth="+depth)
		})
	}
}

// repeatFirst gives every write's reply the first write's tag.
func repeatFirst(first *uint64) func(uint64) uint64 {
	return func(tag uint64) uint64 {
		if *first == 0 {
			*first = tag
		}
		return *first
	}
}
