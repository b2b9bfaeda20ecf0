package server_test

// fio jobs whose writes fio counts as durable when they complete: every
// byte of them must survive a kill -9 of the daemon.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zonefold/zonefold/internal/syncbuf"
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

// dialServe dials d with a 4 MiB region.
func dialServe(t *testing.T, d *daemonProc) *server.Client {
	t.Helper()
	return dialSocket(t, d.socket)
}

// dialSocket dials the daemon on socket with a 4 MiB region.
func dialSocket(t *testing.T, socket string) *server.Client {
	t.Helper()
	c, err := server.Dial(context.Background(), socket, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// crashRestart kills d with SIGKILL, closes c, and starts a new daemon on
// the device and dials it.
func (d *daemonProc) crashRestart(c *server.Client) (*daemonProc, *server.Client) {
	d.t.Helper()
	d.kill9()
	c.Close()
	d = startServe(d.t, d.device, d.socket)
	return d, dialServe(d.t, d)
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
	c := dialServe(t, d)
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
	d, c = d.crashRestart(c)
	defer c.Close()
	want := map[string][]byte{
		"shrink-grow": append(bytes.Clone(old[:cut]), make([]byte, size-cut)...),
		"shrink":      old[:cut],
		"grow":        append(bytes.Clone(old), make([]byte, size)...),
		"trunc-open":  {},
	}
	for _, name := range files {
		got := readWhole(t, c, name)
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
	// fallocate=none: with fio's default the job's setup sizes both
	// files first, and fails there at the second, as fio's setup does on
	// a kernel file system, before the job writes anything.
	out, _ := runFioWatched(t, d, job("on-close:"+strings.Repeat("x", 300), "--openfiles=1",
		"--file_service_type=sequential", "--fsync_on_close=1", "--do_verify=0", "--fallocate=none")...)
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

// TestFsyncCoversOtherClientsWrites: fsync is of the file, not of the
// handle or the connection: data one client wrote (and closed without
// syncing) is durable once another client's fsync of the same file, or
// its fsync of every file (handle 0), returns. Checked across kill -9.
func TestFsyncCoversOtherClientsWrites(t *testing.T) {
	d := newServe(t)
	ctx := context.Background()
	dial := func() *server.Client {
		c, err := server.Dial(ctx, d.socket, 4<<20)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	want := map[string][]byte{}
	for i, name := range []string{"by-handle", "by-all", "by-handle-open"} {
		data := bytes.Repeat([]byte{byte(i + 1)}, 300<<10)
		want[name] = data
		w, s := dial(), dial()
		h, _, err := w.Open(ctx, name, server.OpenCreate)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteAt(ctx, h, data, 0); err != nil {
			t.Fatal(err)
		}
		if name != "by-handle-open" {
			if err := w.CloseFile(ctx, h); err != nil {
				t.Fatal(err)
			}
		}
		if name == "by-all" {
			err = s.Fsync(ctx, 0)
		} else {
			var sh uint32
			if sh, _, err = s.Open(ctx, name, 0); err == nil {
				err = s.Fsync(ctx, sh)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		defer s.Close()
	}
	d.kill9()
	d = startServe(t, d.device, d.socket)
	c := dial()
	defer c.Close()
	for name, data := range want {
		if got := readWhole(t, c, name); !bytes.Equal(got, data) {
			t.Errorf("%s: %d bytes after kill -9, want the %d another client's fsync covered", name, len(got), len(data))
		}
	}
	d.stop()
}

// TestRenameOverAFileAcrossKill9: a rename that replaces a synced file
// with another synced file leaves, after kill -9 at any moment around
// it, one of the two whole — never neither, an empty or a mixed file.
// The kill comes right after the rename is answered, or while renames
// run back to back. A rename is durable when answered
// (docs/protocol.md): target holds this round's version of the last
// answered rename, or a later one whose rename was in flight.
func TestRenameOverAFileAcrossKill9(t *testing.T) {
	d := newServe(t)
	ctx := context.Background()
	for round := range 6 {
		versions := map[byte]bool{} // this round's only: no rollback to an earlier round
		c, err := server.Dial(ctx, d.socket, 4<<20)
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		put := func(name string, v byte) error {
			mu.Lock()
			versions[v] = true // before the write: it may land
			mu.Unlock()
			h, _, err := c.Open(ctx, name, server.OpenCreate|server.OpenTrunc)
			if err == nil {
				_, err = c.WriteAt(ctx, h, bytes.Repeat([]byte{v}, 200<<10+int(v)), 0)
			}
			if err == nil {
				err = c.Fsync(ctx, h)
			}
			if err == nil {
				err = c.CloseFile(ctx, h)
			}
			return err
		}
		base := byte(round * 40)
		if err := put("target", base+1); err != nil {
			t.Fatal(err)
		}
		answered := base + 1 // the version of target when the last rename was answered
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := byte(2); i < 40; i++ {
				if put("tmp", base+i) != nil || c.Rename(ctx, "tmp", "target") != nil {
					return // killed
				}
				mu.Lock()
				answered = base + i
				mu.Unlock()
				if round%2 == 0 {
					return // the kill right after the first rename
				}
			}
		}()
		if round%2 == 0 {
			<-done
		} else {
			time.Sleep(time.Duration(round) * 5 * time.Millisecond)
		}
		d.kill9()
		<-done
		c.Close()
		d = startServe(t, d.device, d.socket)
		c, err = server.Dial(ctx, d.socket, 4<<20)
		if err != nil {
			t.Fatal(err)
		}
		got := readWhole(t, c, "target")
		n := int64(len(got))
		if n == 0 {
			t.Fatalf("round %d: target is empty after kill -9", round)
		}
		v := got[0]
		if !versions[v] || n != 200<<10+int64(v) || !bytes.Equal(got, bytes.Repeat([]byte{v}, len(got))) {
			t.Fatalf("round %d: target after kill -9 is no version written this round: %d bytes, first byte %d", round, n, v)
		}
		if round%2 == 0 && answered != base+2 {
			t.Fatalf("round %d: the rename was not answered before the kill", round)
		}
		if v < answered {
			t.Fatalf("round %d: target after kill -9 is version %d, older than %d whose rename was answered", round, v, answered)
		}
		c.Close()
	}
	d.stop()
}

// TestFioLayoutNeverShrinksAFile: a fio job that reads grows its file
// to the end of its range at open when the file is shorter
// (zf_open_file): here the file is 1 MiB, the job's range, when fio sets
// the job up (no layout), and the job's exec_prerun puts a 4 KiB file
// in its place before the job opens it. If another client extends the
// file between the job's open and the grow, the grow must not cut it
// back. Deterministic: the daemon holds every truncate until another
// client has written 2 MiB; before the fix the engine laid out with a
// truncate, which then cut the file to the job's 1 MiB (found by 16 fio
// jobs on one file with offset_increment, randrw and verify: verify read
// zeros). The test reached the grow with create_on_open=1 before fio's
// create_on_open=1 stopped growing a file (h34d).
func TestFioLayoutNeverShrinksAFile(t *testing.T) {
	fio, engine := fioEnv(t)
	socket := server.NewTestDaemon(t)
	ctx0 := context.Background()
	c0, err := server.Dial(ctx0, socket, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := c0.CloseFile(ctx0, writeFile(t, c0, "shared", 0, make([]byte, 1<<20), false)); err != nil {
		t.Fatal(err)
	}
	c0.Close()
	short := filepath.Join(t.TempDir(), "short")
	if err := os.WriteFile(short, make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	held, release := server.HoldOps(t, server.OpTruncate)
	_, out, fioDone := startFioHeld(t, held, "the job's layout truncate", fio, "--name=layout",
		"--ioengine=external:"+engine, "--sock="+socket,
		"--filename=shared", "--rw=read", "--bs=64k", "--size=1m",
		"--exec_prerun=env ZONEFOLD_TEST_MAIN=zonefold "+os.Args[0]+" put --socket "+socket+" "+short+" shared")
	ctx := context.Background()
	c, err := server.Dial(ctx, socket, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h, _, err := c.Open(ctx, "shared", server.OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte("other client"), 2<<20/12)
	if _, err := c.WriteAt(ctx, h, want, 0); err != nil {
		t.Fatal(err)
	}
	release()
	if fioErr := <-fioDone; fioErr != nil {
		t.Fatalf("fio: %v\n%s", fioErr, out)
	}
	st, err := c.Stat(ctx, "shared")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if _, err := c.ReadAt(ctx, h, got, 0); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	if st.Size != int64(len(want)) || !bytes.Equal(got, want) {
		t.Fatalf("after a fio job laid the file out: %d bytes, want the other client's %d intact", st.Size, len(want))
	}
}

// startFioHeld starts fio with args and returns once the daemon holds
// one of its requests (held, from server.HoldOps: what names it), with
// fio's output and its exit; it fails the test if fio ends first or
// nothing is held within a minute.
func startFioHeld(t *testing.T, held <-chan struct{}, what, fio string, args ...string) (*exec.Cmd, *syncbuf.Buffer, <-chan error) {
	t.Helper()
	cmd := exec.Command(fio, args...)
	cmd.Dir = t.TempDir()
	out := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-held:
	case err := <-done:
		t.Fatalf("fio ended before the daemon held %s: %v\n%s", what, err, out)
	case <-time.After(time.Minute):
		t.Fatalf("the daemon held no %s of fio's within a minute:\n%s", what, out)
	}
	return cmd, out, done
}

// readWhole reads all of a file through c.
func readWhole(t *testing.T, c *server.Client, name string) []byte {
	t.Helper()
	ctx := context.Background()
	h, n, err := c.Open(ctx, name, 0)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	defer c.CloseFile(ctx, h)
	got := make([]byte, n)
	if n > 0 {
		if _, err := c.ReadAt(ctx, h, got, 0); err != nil {
			t.Fatalf("read %s: %v", name, err)
		}
	}
	return got
}
