package cli

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runWithClosed runs the binary with descriptor fd (0 or 1) closed, as
// a shell's <&- or >&- leaves it, and returns its stderr and exit code.
func runWithClosed(t *testing.T, fd int, args ...string) (stderr string, status int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	redir := map[int]string{0: "<&-", 1: ">&-"}[fd]
	cmd := exec.CommandContext(ctx, "/bin/sh", append([]string{"-c", `exec "$0" "$@" ` + redir, zonefoldBinary(t)}, args...)...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if fd != 1 {
		cmd.Stdout = &bytes.Buffer{}
	}
	_ = cmd.Run()
	return errb.String(), cmd.ProcessState.ExitCode()
}

// TestH46lClosedStdioIsAnError: the Go runtime opens /dev/null (read and
// write) on a standard descriptor closed at start, so `put - NAME <&-`
// replaced NAME with an empty file and said it was durable (exit 0). A
// closed stdin is an error now, as cat says "Bad file descriptor", and
// NAME is left as it was. A stdout is not checked (see stdio).
// /dev/null given by the shell (< /dev/null, > /dev/null) is still read
// or written as before.
func TestH46lClosedStdioIsAnError(t *testing.T) {
	sock, _, _ := newDaemon(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	want := []byte("precious contents\n")
	if err := os.WriteFile(src, want, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, status := runBinaryIn(t, dir, nil, "put", src, "keep", "--socket", sock); status != 0 {
		t.Fatalf("put %s keep: exit %d: %s", src, status, stderr)
	}

	for _, local := range []string{"-", "/dev/stdin", "/proc/self/fd/0"} {
		stderr, status := runWithClosed(t, 0, "put", local, "keep", "--socket", sock)
		if status != 1 || !strings.Contains(stderr, "closed") {
			t.Errorf("put %s keep <&-: exit %d, stderr %q; want exit 1 and an error saying stdin is closed", local, status, stderr)
		}
		if got, stderr, status := runBinaryIn(t, dir, nil, "get", "keep", "-", "--socket", sock); status != 0 || !bytes.Equal(got, want) {
			t.Fatalf("after put %s keep <&-, keep holds %q (exit %d, %s); want %q as it was", local, got, status, stderr, want)
		}
	}

	// A stdout of /dev/null open for reading and writing, as Python's
	// subprocess.DEVNULL gives it, is indistinguishable from a closed
	// one the runtime filled: get writes there (a sink loses nothing
	// stored), and so do ls and stat.
	for _, args := range [][]string{{"get", "keep", "-"}, {"get", "keep", "/dev/stdout"}, {"ls"}, {"stat"}} {
		cmd := exec.Command("/bin/sh", append([]string{"-c", `exec "$0" "$@" --socket "` + sock + `" 1<>/dev/null`, zonefoldBinary(t)}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%v 1<>/dev/null: %v: %s", args, err, out)
		}
	}

	// /dev/null that the shell opened is an empty input and a sink.
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if _, stderr, status := runBinaryIn(t, dir, null, "put", "-", "empty", "--socket", sock); status != 0 {
		t.Errorf("put - empty < /dev/null: exit %d: %s", status, stderr)
	}
	cmd := exec.Command("/bin/sh", "-c", `exec "$0" get keep - --socket "$1" > /dev/null`, zonefoldBinary(t), sock)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("get keep - > /dev/null: %v: %s", err, out)
	}
}
