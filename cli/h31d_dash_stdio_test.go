package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// runBinaryIn runs the binary in dir with stdin, to completion (within a
// minute).
func runBinaryIn(t *testing.T, dir string, stdin io.Reader, args ...string) (stdout []byte, stderr string, status int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, zonefoldBinary(t), args...)
	cmd.Dir, cmd.Stdin = dir, stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return out.Bytes(), errb.String(), cmd.ProcessState.ExitCode()
}

// TestH31dDashIsStdinAndStdout: `put - NAME` did not read stdin (it
// failed: "open -: no such file or directory", or copied a local file
// named "-"), and `get NAME -` created a local file named "-" in the
// current directory and wrote nothing to stdout. As Unix tools do, "-"
// is stdin for put and stdout for get now: binary data (every byte
// value, past put's 4 MiB chunk and a pipe's buffer) goes round trip
// unchanged, and no file named "-" is read or made. A local file named
// "-" is still reached as ./-.
func TestH31dDashIsStdinAndStdout(t *testing.T) {
	sock, _, _ := newDaemon(t)
	dir := t.TempDir()
	want := make([]byte, 5<<20+123)
	rand.New(rand.NewSource(31)).Read(want)
	copy(want, []byte{0, '\n', 0xff, '\r', 0x1a, 0})

	// Through a pipe (exec feeds a reader through one).
	_, stderr, status := runBinaryIn(t, dir, bytes.NewReader(want), "put", "-", "bin", "--socket", sock)
	if status != 0 {
		t.Fatalf("put - bin < pipe: exit %d: %s", status, stderr)
	}
	got, stderr, status := runBinaryIn(t, dir, nil, "get", "bin", "-", "--socket", sock)
	if status != 0 || !bytes.Equal(got, want) {
		t.Fatalf("get bin - > pipe: exit %d, %d bytes (want %d, same: %v): %s", status, len(got), len(want), bytes.Equal(got, want), stderr)
	}
	if exists(filepath.Join(dir, "-")) {
		t.Fatalf("put or get made a local file named -")
	}

	// Stdin a regular file, stdout a regular file (the shell's < and >).
	in := filepath.Join(t.TempDir(), "in")
	if err := os.WriteFile(in, want[:1<<20], 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, stderr, status := runBinaryIn(t, dir, f, "put", "-", "file", "--socket", sock); status != 0 {
		t.Fatalf("put - file < regular file: exit %d: %s", status, stderr)
	}
	outPath := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command(zonefoldBinary(t), "get", "file", "-", "--socket", sock)
	cmd.Dir = dir
	out, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("get file - > regular file: %v: %s", err, errb.String())
	}
	out.Close()
	if b, _ := os.ReadFile(outPath); !bytes.Equal(b, want[:1<<20]) {
		t.Fatalf("get file - > regular file: %d bytes, not what put - stored", len(b))
	}

	// ./- is the local file named "-".
	if err := os.WriteFile(filepath.Join(dir, "-"), []byte("dash"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, status := runBinaryIn(t, dir, bytes.NewReader([]byte("stdin")), "put", "./-", "dash", "--socket", sock); status != 0 {
		t.Fatalf("put ./- dash: exit %d: %s", status, stderr)
	}
	if got, _, _ := runBinaryIn(t, dir, nil, "get", "dash", "-", "--socket", sock); string(got) != "dash" {
		t.Fatalf("put ./- stored %q, want the local file's %q", got, "dash")
	}
}
