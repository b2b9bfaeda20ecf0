package cli

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zonefold/zonefold/server"
)

// h32bInWchan reports whether a thread of process pid sleeps in a kernel
// function whose name holds fn (its wchan: pipe_read, pipe_write).
func h32bInWchan(pid int, fn string) bool {
	tasks, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "wchan"))
	for _, w := range tasks {
		if b, err := os.ReadFile(w); err == nil && strings.Contains(string(b), fn) {
			return true
		}
	}
	return false
}

// h32bOnPipe starts the binary with args, its stdin (toStdin) or stdout
// one end of a pipe, passed as a blocking descriptor (exec takes its
// Fd), as a shell's pipeline passes it; it returns the test's end of
// the pipe (closed at the end of the test), a channel closed once the
// process has exited and its stderr (read it only then). The process
// is killed at the end of the test.
func h32bOnPipe(t *testing.T, toStdin bool, args ...string) (*exec.Cmd, chan struct{}, *bytes.Buffer, *os.File) {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(zonefoldBinary(t), args...)
	ours, theirs := pr, pw
	if toStdin {
		ours, theirs = pw, pr
		cmd.Stdin = pr
	} else {
		cmd.Stdout = pw
	}
	t.Cleanup(func() { ours.Close() })
	stderr := &bytes.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	return cmd, done, stderr, ours
}

// h32bAwaitWchan waits until a thread of process pid sleeps in fn (see
// h32bInWchan); it skips the test if none does within 30 s (wchan not
// readable here).
func h32bAwaitWchan(t *testing.T, pid int, fn string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !h32bInWchan(pid, fn); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Skipf("cannot see process %d sleep in %s (wchan) in 30 s", pid, fn)
		}
	}
}

// h32bWriteFile makes name hold data on the daemon, durably.
func h32bWriteFile(t *testing.T, c *server.Client, name string, data []byte) {
	t.Helper()
	ctx := context.Background()
	h, _, err := c.Open(ctx, name, server.OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteAt(ctx, h, data, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Fsync(ctx, h); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseFile(ctx, h); err != nil {
		t.Fatal(err)
	}
}

// h32bOneSIGINT sends cmd (what: how the test runs it) one SIGINT and
// checks that it ends within 10 s (done closes when it has) with exit
// 130 and "interrupted by SIGINT" on stderr.
func h32bOneSIGINT(t *testing.T, cmd *exec.Cmd, done <-chan struct{}, stderr *bytes.Buffer, what string) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("%s still ran 10 s after one SIGINT; want it stopped (exit 130); stderr %q", what, stderr.String())
	}
	if st := cmd.ProcessState.ExitCode(); st != 130 || !strings.Contains(stderr.String(), "interrupted by SIGINT") {
		t.Errorf("%s, interrupted: exit %d, stderr %q; want 130 and 'interrupted by SIGINT'", what, st, stderr.String())
	}
}

// TestH32bPutFromAQuietPipeStopsAtOneSIGINT: `producer | zonefold put -
// NAME` whose producer wrote part of its output and then nothing (still
// running, the pipe open) has put blocked in a read of stdin, a pipe in
// blocking mode as a shell makes it. One SIGINT (Ctrl-C) must stop it
// (exit 130, "interrupted by SIGINT"), as the conventions promise for a
// command that stops cleanly; and NAME must be as it was (put's help:
// NAME changes only once the whole input is in and durable), not the
// part that was copied, nor may the put's temporary file stay.
//
// Before, put armed its interrupt as a read deadline, which a
// descriptor in blocking mode does not take (os.NewFile leaves it out
// of the poller): the first SIGINT was recorded and the read went on
// waiting; only a second one stopped it.
func TestH32bPutFromAQuietPipeStopsAtOneSIGINT(t *testing.T) {
	sock, c, _ := newDaemon(t)
	old := []byte("f as it was before the put\n")
	h32bWriteFile(t, c, "f", old)
	cmd, done, stderr, pw := h32bOnPipe(t, true, "put", "-", "f", "--socket", sock)
	// More than one of put's 4 MiB chunks, then nothing: the first
	// chunk reaches the daemon (in put's temporary file), the rest
	// waits in put's read for the chunk's remainder.
	part := bytes.Repeat([]byte("partial."), (5<<20)/8)
	wrote := make(chan error, 1)
	go func() { _, err := pw.Write(part); wrote <- err }()
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatal(err)
		}
	case <-done:
		t.Fatalf("put exited before reading its input: %s", stderr.String()) // exited: Wait is done with stderr
	case <-time.After(30 * time.Second):
		t.Fatal("put did not read its input in 30 s")
	}
	// Until put sleeps in its read of stdin (its wchan).
	h32bAwaitWchan(t, cmd.Process.Pid, "pipe_read")
	h32bOneSIGINT(t, cmd, done, stderr, "put - f reading a quiet pipe")
	if got := content(t, c, "f"); !bytes.Equal(got, old) {
		t.Errorf("after an interrupted put, f holds %d bytes (%.20q...), not what it held before", len(got), got)
	}
	noTemporaries(t, c)
}

// TestH32bGetToAStalledPipeStopsAtOneSIGINT: `zonefold get NAME - |
// consumer` whose consumer stops reading (still running, the pipe open)
// has get blocked in a write of stdout, a pipe in blocking mode as a
// shell makes it. One SIGINT must stop it (exit 130, "interrupted by
// SIGINT"). Before, get's interrupt was a write deadline, which a
// descriptor in blocking mode does not take: only a second SIGINT
// stopped it.
func TestH32bGetToAStalledPipeStopsAtOneSIGINT(t *testing.T) {
	sock, c, _ := newDaemon(t)
	h32bWriteFile(t, c, "f", bytes.Repeat([]byte("contents"), (2<<20)/8))
	cmd, done, stderr, _ := h32bOnPipe(t, false, "get", "f", "-", "--socket", sock)
	h32bAwaitWchan(t, cmd.Process.Pid, "pipe_write")
	h32bOneSIGINT(t, cmd, done, stderr, "get f - into a pipe nobody reads")
}

// TestH32bPutInAPipelineCtrlC: Ctrl-C at a terminal sends SIGINT to the
// whole foreground pipeline, `producer | zonefold put - NAME`: the
// producer dies of it at the same moment, and put then reads the end of
// its input. That end is no complete input: put must not take it for
// one and rename the part it got over NAME (NAME must stay as it was,
// exit 130). Rounds, since which put sees first (its signal or the end
// of the pipe) is up to the scheduler.
func TestH32bPutInAPipelineCtrlC(t *testing.T) {
	sock, c, _ := newDaemon(t)
	old := []byte("f as it was before the put\n")
	h32bWriteFile(t, c, "f", old)
	for round := range 8 {
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		// A chunk and a half of put's, then nothing until the signal.
		producer := exec.Command("sh", "-c", "head -c 6291456 /dev/zero; exec sleep 100")
		producer.Stdout = pw
		producer.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := producer.Start(); err != nil {
			t.Fatal(err)
		}
		pgid := producer.Process.Pid
		put := exec.Command(zonefoldBinary(t), "put", "-", "f", "--socket", sock)
		put.Stdin = pr
		var stderr bytes.Buffer
		put.Stderr = &stderr
		put.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
		if err := put.Start(); err != nil {
			producer.Process.Kill()
			t.Fatal(err)
		}
		pr.Close()
		pw.Close()
		done := make(chan struct{})
		go func() { put.Wait(); close(done) }()
		for deadline := time.Now().Add(30 * time.Second); !h32bInWchan(put.Process.Pid, "pipe_read") || !h32bInWchan(pgid, "hrtimer_nanosleep") && !h32bInWchan(pgid, "nanosleep"); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				syscall.Kill(-pgid, syscall.SIGKILL)
				<-done
				producer.Wait()
				t.Skipf("round %d: cannot see put wait for more input and the producer sleep (wchan) in 30 s", round)
			}
		}
		if err := syscall.Kill(-pgid, syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			syscall.Kill(-pgid, syscall.SIGKILL)
			<-done
			t.Fatalf("round %d: put still ran 10 s after the pipeline's SIGINT; stderr %q", round, stderr.String())
		}
		producer.Wait()
		if st := put.ProcessState.ExitCode(); st != 130 {
			t.Errorf("round %d: put interrupted with its producer: exit %d, stderr %q; want 130", round, st, stderr.String())
		}
		if got := content(t, c, "f"); !bytes.Equal(got, old) {
			t.Fatalf("round %d: after Ctrl-C of the pipeline, f holds %d bytes, not what it held before: the part read was taken for the whole input", round, len(got))
		}
	}
}
