package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/server"
)

// newDaemon serves a fresh emu device in process; it returns the socket
// and a client, both closed at the end of the test.
func newDaemon(t *testing.T) (sock string, c *server.Client, device string) {
	t.Helper()
	dir := t.TempDir()
	device = fmt.Sprintf("emu:%s?zone_size=4M&zones=32", filepath.Join(dir, "dev"))
	sock = filepath.Join(dir, "zf.sock")
	t.Cleanup(serveInProcess(t, device, sock))
	c, err := server.Dial(context.Background(), sock, 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return sock, c, device
}

// content reads a zonefold file whole.
func content(t *testing.T, c *server.Client, name string) []byte {
	t.Helper()
	ctx := context.Background()
	h, size, err := c.Open(ctx, name, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseFile(ctx, h)
	b := make([]byte, size)
	if n, err := c.ReadAt(ctx, h, b, 0); int64(n) != size || err != nil && err != io.EOF {
		t.Fatalf("read %s: %d of %d bytes, %v", name, n, size, err)
	}
	return b
}

// noTemporaries fails if a put left a temporary file.
func noTemporaries(t *testing.T, c *server.Client) {
	t.Helper()
	list, err := c.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list {
		if strings.HasPrefix(e.Name, server.TempPrefix) {
			t.Fatalf("a temporary file stays: %s (%d bytes)", e.Name, e.Size)
		}
	}
}

// put used to truncate its target first: a failed put (here of a
// directory) left 'keep' empty.
func TestPutOverAFileFailsAtomically(t *testing.T) {
	sock, c, _ := newDaemon(t)
	dir := t.TempDir()
	old := filepath.Join(dir, "old")
	want := bytes.Repeat([]byte("the old content "), 100_000)
	if err := os.WriteFile(old, want, 0o644); err != nil {
		t.Fatal(err)
	}
	zonefold(t, "put", old, "keep", "--socket", sock)
	var out, errb bytes.Buffer
	if code := Main([]string{"put", dir, "keep", "--socket", sock}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "is a directory") {
		t.Fatalf("put of a directory: exit %d, %q", code, errb.String())
	}
	if got := content(t, c, "keep"); !bytes.Equal(got, want) {
		t.Fatalf("a failed put changed its target: %d bytes, want the old %d", len(got), len(want))
	}
	noTemporaries(t, c)
	// A put that succeeds replaces the target whole.
	newer := filepath.Join(dir, "new")
	if err := os.WriteFile(newer, []byte("short"), 0o644); err != nil {
		t.Fatal(err)
	}
	zonefold(t, "put", newer, "keep", "--socket", sock)
	if got := content(t, c, "keep"); string(got) != "short" {
		t.Fatalf("after put: %q", got)
	}
	noTemporaries(t, c)
}

// An interrupted put (its context canceled mid-copy) leaves the target as
// it was and removes its temporary file.
func TestInterruptedPutLeavesTheTarget(t *testing.T) {
	sock, c, _ := newDaemon(t)
	ctx := context.Background()
	dir := t.TempDir()
	old := filepath.Join(dir, "old")
	if err := os.WriteFile(old, []byte("the old content"), 0o644); err != nil {
		t.Fatal(err)
	}
	zonefold(t, "put", old, "keep", "--socket", sock)
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	pc, err := server.Dial(ctx, sock, 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	putCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- runPut(putCtx, &session{Client: pc, socket: sock, out: io.Discard}, []string{fifo, "keep"})
	}()
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// Two chunks: put has written the first when the second is taken.
	if _, err := w.Write(make([]byte, 2*copyChunk)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		list, err := c.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 2 && strings.HasPrefix(list[0].Name, server.TempPrefix) && list[0].Size > 0 {
			break // put is mid-copy
		}
		if time.Now().After(deadline) {
			t.Fatalf("put wrote nothing to a temporary file: %+v", list)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel() // put waits for the FIFO's next bytes: the cancel must end that too
	if err := <-done; err == nil {
		t.Fatal("interrupted put succeeded")
	}
	if got := content(t, c, "keep"); string(got) != "the old content" {
		t.Fatalf("an interrupted put changed its target: %q", got)
	}
	noTemporaries(t, c)
}

// A put whose process died leaves its temporary file; the daemon's next
// start removes it, and nothing else.
func TestDaemonRemovesTemporariesAtStart(t *testing.T) {
	dir := t.TempDir()
	device := fmt.Sprintf("emu:%s?zone_size=4M&zones=32", filepath.Join(dir, "dev"))
	sock := filepath.Join(dir, "zf.sock")
	stop := serveInProcess(t, device, sock)
	ctx := context.Background()
	c, err := server.Dial(ctx, sock, 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{server.TempPrefix + "dead", "kept", ".zonefold-other"} {
		h, _, err := c.Open(ctx, name, server.OpenCreate)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.WriteAt(ctx, h, []byte("data"), 0); err != nil {
			t.Fatal(err)
		}
		if err := c.Fsync(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	stop()
	stop = serveInProcess(t, device, sock)
	defer stop()
	if out := zonefold(t, "ls", "--socket", sock); strings.Contains(out, server.TempPrefix) || !strings.Contains(out, "kept") || !strings.Contains(out, ".zonefold-other") {
		t.Fatalf("ls after restart: %q", out)
	}
}

// TestPutRefusesReservedName: put NAME with the reserved temporary prefix
// answered "durable", and the daemon's next start removed the file (it
// takes every such name for a dead put's leftover): acknowledged data
// lost. put must refuse the name (usage error) and change nothing.
func TestPutRefusesReservedName(t *testing.T) {
	device, sock, local := deviceAndLocalFile(t, "precious")
	stop := serveInProcess(t, device, sock)
	defer func() { stop() }()
	name := server.TempPrefix + "mine"
	var out, errb bytes.Buffer
	code := Main([]string{"put", local, name, "--socket", sock}, &out, &errb)
	if code == 0 {
		// What the user was told is durable must survive a restart.
		stop()
		stop = serveInProcess(t, device, sock)
		if ls := zonefold(t, "ls", "--socket", sock); !strings.Contains(ls, name) {
			t.Fatalf("put %s said %q, exit 0, and the file is gone after a restart (ls: %q)", name, out.String(), ls)
		}
		return
	}
	if code != 2 || !strings.Contains(errb.String(), server.TempPrefix) {
		t.Fatalf("put to a reserved name: exit %d, %q; want exit 2 naming the reserved prefix", code, errb.String())
	}
	if ls := zonefold(t, "ls", "--socket", sock); ls != "" {
		t.Fatalf("a refused put left files: %q", ls)
	}
}

// deviceAndLocalFile names an emu device and a daemon socket in a
// temporary folder, and writes a local file holding content there.
func deviceAndLocalFile(t *testing.T, content string) (device, sock, local string) {
	dir := t.TempDir()
	device = fmt.Sprintf("emu:%s?zone_size=4M&zones=32", filepath.Join(dir, "dev"))
	sock = filepath.Join(dir, "zf.sock")
	local = filepath.Join(dir, "local")
	if err := os.WriteFile(local, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return device, sock, local
}

// TestPutRefusesAnInvalidNameBeforeCopying: put to an empty name, a name
// over engine.MaxNameLen or one with a NUL copied the whole local file
// into a temporary and then failed at the rename, with an error naming
// the temporary ("rename .zonefold-tmp...: invalid argument"). It must
// refuse the name up front, as a usage error that says what is wrong
// with it, and write nothing.
func TestPutRefusesAnInvalidNameBeforeCopying(t *testing.T) {
	device, sock, local := deviceAndLocalFile(t, "precious")
	stop := serveInProcess(t, device, sock)
	defer stop()
	for _, tc := range []struct{ what, name, says string }{
		{"empty", "", "empty"},
		{"too long", strings.Repeat("n", engine.MaxNameLen+1), "256 bytes"},
		{"NUL", "a\x00b", "NUL"},
	} {
		var out, errb bytes.Buffer
		code := Main([]string{"put", local, tc.name, "--socket", sock}, &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), tc.says) || strings.Contains(errb.String(), server.TempPrefix) {
			t.Errorf("put to a name %s: exit %d, %q; want exit 2 saying %q, not naming a temporary", tc.what, code, errb.String(), tc.says)
		}
	}
	if st := zonefold(t, "stat", "--json", "--socket", sock); !strings.Contains(st, `"host_written":0,`) && !strings.Contains(st, `"host_written": 0,`) {
		t.Errorf("refused puts wrote data: %s", st)
	}
}

// TestPutSaysANameAsLsDoes: put's line names the file as ls lists it. A
// name with a newline printed "a" and "b: 3 B, durable" on two lines,
// which ls prints quoted, "a\nb", as one.
func TestPutSaysANameAsLsDoes(t *testing.T) {
	device, sock, local := deviceAndLocalFile(t, "abc")
	stop := serveInProcess(t, device, sock)
	defer stop()
	for _, name := range []string{"a\nb", `"q`, "plain"} {
		var out, errb bytes.Buffer
		if code := Main([]string{"put", local, name, "--socket", sock}, &out, &errb); code != 0 {
			t.Fatalf("put %q: exit %d, %q", name, code, errb.String())
		}
		if want := listedName(name) + ": 3 B, durable\n"; out.String() != want {
			t.Errorf("put %q printed %q; want %q", name, out.String(), want)
		}
	}
}
