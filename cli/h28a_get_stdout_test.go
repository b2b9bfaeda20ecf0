package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// TestH28aGetToOwnDescriptor: `zonefold get NAME /dev/stdout | consumer`
// failed with "open /proc/self/fd/.pipe:[825635].zonefold-get-...: no
// such file or directory", and so did a get to /dev/fd/N or
// /proc/self/fd/N of any pipe or socket (a systemd unit's stdout is
// one). get followed /dev/stdout to /proc/self/fd/1 and read that link's
// text, "pipe:[825635]", as a path: it names nothing, so get made its
// temporary in /proc/self/fd. A link on procfs is the kernel's handle on
// an open file, not a path: get must write the copy into the file it
// leads to, as cat NAME > /dev/stdout does. For a regular file that
// means into it where its descriptor stands, not a rename over its name:
// `get NAME /dev/stdout >> log` appended to log, not replaced it.
func TestH28aGetToOwnDescriptor(t *testing.T) {
	sock, _, _ := newDaemon(t)
	dir := t.TempDir()
	// Past a pipe's 64 KiB buffer and over get's chunk size: several
	// writes, each of which blocks until the reader has drained the pipe.
	want := bytes.Repeat([]byte("zonefold get to a descriptor "), 3<<20/29)
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, want, 0o644); err != nil {
		t.Fatal(err)
	}
	zonefold(t, "put", src, "f", "--socket", sock)

	t.Run("dev-stdout-pipe", func(t *testing.T) {
		// The binary, so that /dev/stdout is its stdout: a pipe, which
		// exec drains into a buffer.
		r := runBinary(t, "get", "f", "/dev/stdout", "--socket", sock)
		if r.status != 0 || r.stdout != string(want) {
			t.Fatalf("zonefold get f /dev/stdout | reader: exit %d, reader got %d bytes (want %d), stderr: %s",
				r.status, len(r.stdout), len(want), r.stderr)
		}
	})

	// The test process's own descriptors, read by a goroutine while get
	// writes.
	pipe := func(t *testing.T) (r io.ReadCloser, w *os.File) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		return r, w
	}
	socket := func(t *testing.T) (io.ReadCloser, *os.File) {
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		return os.NewFile(uintptr(fds[0]), "socket-r"), os.NewFile(uintptr(fds[1]), "socket-w")
	}
	for _, tc := range []struct {
		name string
		open func(t *testing.T) (io.ReadCloser, *os.File)
		path string // a format for the descriptor's number
	}{
		{"dev-fd-pipe", pipe, "/dev/fd/%d"},
		{"proc-self-fd-pipe", pipe, "/proc/self/fd/%d"},
		{"dev-fd-socket", socket, "/dev/fd/%d"},
		{"proc-self-fd-socket", socket, "/proc/self/fd/%d"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, w := tc.open(t)
			defer r.Close()
			got := make(chan []byte, 1)
			go func() {
				b, _ := io.ReadAll(r)
				got <- b
			}()
			local := fmt.Sprintf(tc.path, w.Fd())
			var out, errb bytes.Buffer
			code := Main([]string{"get", "f", local, "--socket", sock}, &out, &errb)
			w.Close() // the reader's EOF: get's own copy is closed by now
			b := <-got
			if code != 0 || !bytes.Equal(b, want) {
				t.Fatalf("zonefold get f %s (a %s): exit %d, reader got %d bytes (want %d), stderr: %s",
					local, tc.name, code, len(b), len(want), errb.String())
			}
		})
	}

	t.Run("other-process-pipe", func(t *testing.T) {
		// /proc/PID/fd/1 of another process (here sleep's stdout, a
		// pipe): open(2) of the link opens the pipe.
		r, w := pipe(t)
		defer r.Close()
		sleep := exec.Command("sleep", "60")
		sleep.Stdout = w
		if err := sleep.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { sleep.Process.Kill(); sleep.Wait() }()
		got := make(chan []byte, 1)
		go func() {
			b, _ := io.ReadAll(r)
			got <- b
		}()
		local := fmt.Sprintf("/proc/%d/fd/1", sleep.Process.Pid)
		var out, errb bytes.Buffer
		code := Main([]string{"get", "f", local, "--socket", sock}, &out, &errb)
		w.Close()
		sleep.Process.Kill() // its copy of w: the reader's EOF
		b := <-got
		if code != 0 || !bytes.Equal(b, want) {
			t.Fatalf("zonefold get f %s (sleep's stdout, a pipe): exit %d, reader got %d bytes (want %d), stderr: %s",
				local, code, len(b), len(want), errb.String())
		}
	})

	t.Run("other-process-file", func(t *testing.T) {
		// /proc/PID/fd/1 of another process writing a regular file
		// that holds more than f: the file that process has open is
		// truncated and written, as cp f does (get used to take the
		// link's text for the file's name and rename a temporary over
		// it, right only while the file keeps that name).
		dst := filepath.Join(dir, "other")
		if err := os.WriteFile(dst, bytes.Repeat([]byte("x"), 2*len(want)), 0o644); err != nil {
			t.Fatal(err)
		}
		w, err := os.OpenFile(dst, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		sleep := exec.Command("sleep", "60")
		sleep.Stdout = w
		if err := sleep.Start(); err != nil {
			t.Fatal(err)
		}
		w.Close()
		defer func() { sleep.Process.Kill(); sleep.Wait() }()
		local := fmt.Sprintf("/proc/%d/fd/1", sleep.Process.Pid)
		var out, errb bytes.Buffer
		code := Main([]string{"get", "f", local, "--socket", sock}, &out, &errb)
		b, err := os.ReadFile(dst)
		if err != nil {
			t.Fatal(err)
		}
		if code != 0 || !bytes.Equal(b, want) {
			t.Fatalf("zonefold get f %s (sleep's stdout, a file of %d bytes): exit %d, the file holds %d bytes (want f's %d), stderr: %s",
				local, 2*len(want), code, len(b), len(want), errb.String())
		}
	})

	t.Run("closed-descriptor", func(t *testing.T) {
		// /dev/fd/N of no open descriptor: an error naming LOCAL, not
		// a temporary get could not make in /dev/fd. N is the
		// descriptor limit, which no descriptor reaches (a number just
		// closed may be reused meanwhile by the daemon in this process).
		var lim syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
		local := fmt.Sprintf("/dev/fd/%d", lim.Cur)
		var out, errb bytes.Buffer
		code := Main([]string{"get", "f", local, "--socket", sock}, &out, &errb)
		if wantErr := "zonefold: stat " + local + ": no such file or directory\n"; code != 1 || errb.String() != wantErr {
			t.Fatalf("zonefold get f %s (a closed descriptor): exit %d, stderr %q; want exit 1, stderr %q",
				local, code, errb.String(), wantErr)
		}
	})

	t.Run("dev-fd-append", func(t *testing.T) {
		// get f /dev/stdout >> log, with log as this process's own
		// descriptor: the copy lands after what log held.
		log := filepath.Join(dir, "log")
		old := []byte("kept line\n")
		if err := os.WriteFile(log, old, 0o644); err != nil {
			t.Fatal(err)
		}
		w, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		local := fmt.Sprintf("/dev/fd/%d", w.Fd())
		var out, errb bytes.Buffer
		code := Main([]string{"get", "f", local, "--socket", sock}, &out, &errb)
		w.Close()
		b, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		if code != 0 || !bytes.Equal(b, append(old, want...)) {
			t.Fatalf("zonefold get f %s (log open for appending): exit %d, log holds %d bytes starting %q; want its %d bytes then f's %d, as cat f >> log gives; stderr: %s",
				local, code, len(b), b[:min(len(b), 16)], len(old), len(want), errb.String())
		}
	})
}
