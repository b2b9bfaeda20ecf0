package server_test

// fio jobs whose writes fio counts as durable when they complete: every
// byte of them must survive a kill -9 of the daemon.

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/zonefold/zonefold/server"
)

// kill9 kills the daemon with SIGKILL and waits for it to go.
func (d *daemonProc) kill9() {
	d.t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		d.t.Fatal(err)
	}
	<-d.exited
}

// TestFioSyncWritesSurviveKill9 writes with sync=1 (O_SYNC: each write
// is durable when it completes) and dsync=1, and nothing else — no fsync
// requests, no end_fsync — kills the daemon with SIGKILL and verifies on
// a new daemon: every write fio saw complete must read back.
func TestFioSyncWritesSurviveKill9(t *testing.T) {
	fioEnv(t)
	for _, opt := range []string{"--sync=1", "--sync=dsync"} {
		t.Run(opt, func(t *testing.T) {
			d := newServe(t)
			name := "sync-" + strings.TrimPrefix(opt, "--sync=")
			job := func(extra ...string) []string {
				return fioArgs(t, d, name, append([]string{"--rw=write", "--size=2m", "--iodepth=8",
					"--verify=crc32c"}, extra...)...)
			}
			out, err := runFioWatched(t, d, job(opt, "--do_verify=0")...)
			if err != nil || !strings.Contains(out, "err= 0") {
				t.Fatalf("write: %v\n%s", err, out)
			}
			d.kill9()
			d = startServe(t, d.device, d.socket)
			out, err = runFioWatched(t, d, job("--verify_only=1")...)
			if err != nil || strings.Contains(out, "verify:") || !strings.Contains(out, "err= 0") {
				t.Fatalf("fio's %s writes completed, yet after kill -9 they do not verify: %v\n%s", opt, err, out)
			}
			d.stop()
		})
	}
}

// TestTruncateIsDurableWhenAnswered: a truncate's size is durable when
// answered (docs/protocol.md), so after shrink and grow, then kill -9,
// the file has the grown size and the bytes the shrink cut off read back
// as zeros — never the old data.
func TestTruncateIsDurableWhenAnswered(t *testing.T) {
	d := newServe(t)
	ctx := context.Background()
	c, err := server.Dial(ctx, d.socket, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	const size, cut = 1 << 20, 4096
	old := bytes.Repeat([]byte{0xaa}, size)
	files := []string{"shrink-grow", "shrink", "grow", "trunc-open"}
	for _, name := range files {
		h, _, err := c.Open(ctx, name, server.OpenCreate)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.WriteAt(ctx, h, old, 0); err != nil {
			t.Fatal(err)
		}
		if err := c.Fsync(ctx, h); err != nil {
			t.Fatal(err)
		}
		switch name {
		case "shrink-grow":
			err = errors.Join(c.Truncate(ctx, h, cut), c.Truncate(ctx, h, size))
		case "shrink":
			err = c.Truncate(ctx, h, cut)
		case "grow":
			err = c.Truncate(ctx, h, 2*size)
		case "trunc-open":
			_, _, err = c.Open(ctx, name, server.OpenTrunc)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	d.kill9()
	c.Close()
	d = startServe(t, d.device, d.socket)
	c, err = server.Dial(ctx, d.socket, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := map[string][]byte{
		"shrink-grow": append(bytes.Clone(old[:cut]), make([]byte, size-cut)...),
		"shrink":      old[:cut],
		"grow":        append(bytes.Clone(old), make([]byte, size)...),
		"trunc-open":  {},
	}
	for _, name := range files {
		h, n, err := c.Open(ctx, name, 0)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := make([]byte, n)
		if n > 0 {
			if _, err := c.ReadAt(ctx, h, got, 0); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		if w := want[name]; !bytes.Equal(got, w) {
			i := 0
			for i < min(len(got), len(w)) && got[i] == w[i] {
				i++
			}
			t.Errorf("%s after kill -9: %d bytes, want %d; first difference at %d", name, len(got), len(w), i)
		}
	}
	d.stop()
}

// TestFioFsyncOnCloseIsDurable: with fsync_on_close=1 a file fio has
// closed is durable, even if the job then fails before its end-of-job
// fsync. The job writes one file, closes it (openfiles=1), then fails to
// open a second whose name is too long; the daemon is killed with
// SIGKILL and the first file must verify on a new daemon. Before the
// fix fio failed the job at the first close with EBADF (it calls
// fsync(2) on the file's descriptor, which the engine did not have) and
// the file was never synced: after the kill it was empty.
func TestFioFsyncOnCloseIsDurable(t *testing.T) {
	fioEnv(t)
	d := newServe(t)
	job := func(files string, extra ...string) []string {
		return append(fioArgs(t, d, "on-close", "--filename="+files, "--filesize=1m", "--rw=write", "--bs=64k",
			"--iodepth=4", "--verify=crc32c"), extra...)
	}
	out, _ := runFioWatched(t, d, job("on-close:"+strings.Repeat("x", 300), "--openfiles=1",
		"--file_service_type=sequential", "--fsync_on_close=1", "--do_verify=0")...)
	if !strings.Contains(out, "File name too long") || strings.Contains(out, "Bad file descriptor") {
		t.Fatalf("want the job to fail only at the second file's open:\n%s", out)
	}
	d.kill9()
	d = startServe(t, d.device, d.socket)
	out, err := runFioWatched(t, d, job("on-close", "--verify_only=1")...)
	if err != nil || strings.Contains(out, "verify:") || !strings.Contains(out, "err= 0") {
		t.Fatalf("a file fio closed with fsync_on_close=1 does not verify after kill -9: %v\n%s", err, out)
	}
	d.stop()
}
