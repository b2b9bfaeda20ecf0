package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zonefold/zonefold/internal/syncbuf"
	"github.com/zonefold/zonefold/server"
)

// TestH28aRepeatedSIGTERMStopsServeCleanly: `timeout 1h zonefold serve
// ...` never stopped cleanly. GNU timeout, when the time is up, sends
// its SIGTERM to the command and then to its own process group, which
// holds the command: serve got two SIGTERMs microseconds apart, took the
// second for "a second signal stops it at once" and exited 143 with its
// dirty data never written back (a write answered OK, lost without a
// crash), no checkpoint, and its socket and SOCKET.lock left behind. So
// did serve under any supervisor that signals both the process and its
// group (kill PID; kill -- -PGID). SIGTERM asks for the clean stop, and
// asking again is not asking for a crash: the stop escalates only on
// SIGINT (Ctrl-C again) or SIGKILL, what supervisors send when they are
// done waiting.
//
// timeout is made to expire by SIGALRM, its timer's signal, once serve
// has acknowledged the writes: no wall clock decides anything.
func TestH28aRepeatedSIGTERMStopsServeCleanly(t *testing.T) {
	timeoutBin, err := exec.LookPath("timeout")
	if err != nil {
		t.Skipf("no timeout(1): %v", err)
	}
	for _, tc := range []struct {
		name string
		// start returns serve's command, wrapped or not.
		start func(args []string) *exec.Cmd
		// stop sends the stop request to the command started.
		stop func(cmd *exec.Cmd)
		// exit is the status that says serve stopped cleanly.
		exit int
	}{
		{"timeout", func(args []string) *exec.Cmd {
			// --preserve-status: timeout exits with serve's status.
			return exec.Command(timeoutBin, append([]string{"--preserve-status", "1h", zonefoldBinary(t)}, args...)...)
		}, func(cmd *exec.Cmd) {
			cmd.Process.Signal(syscall.SIGALRM)
		}, 0},
		{"pid-then-group", func(args []string) *exec.Cmd {
			return exec.Command(zonefoldBinary(t), args...)
		}, func(cmd *exec.Cmd) {
			cmd.Process.Signal(syscall.SIGTERM)
			syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		}, 0},
		// timeout -s INT: the same two signals, both SIGINT. Only
		// microseconds apart they are one request, not Ctrl-C pressed
		// again (TestSIGINTAgainLaterStopsServeAtOnce keeps that).
		{"timeout-s-INT", func(args []string) *exec.Cmd {
			return exec.Command(timeoutBin, append([]string{"-s", "INT", "--preserve-status", "1h", zonefoldBinary(t)}, args...)...)
		}, func(cmd *exec.Cmd) {
			cmd.Process.Signal(syscall.SIGALRM)
		}, 0},
		{"pid-then-group-INT", func(args []string) *exec.Cmd {
			return exec.Command(zonefoldBinary(t), args...)
		}, func(cmd *exec.Cmd) {
			cmd.Process.Signal(syscall.SIGINT)
			syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
		}, 0},
		{"hangup-then-term", func(args []string) *exec.Cmd {
			return exec.Command(zonefoldBinary(t), args...)
		}, func(cmd *exec.Cmd) {
			// The terminal went away, then the session's supervisor
			// stops what is left.
			cmd.Process.Signal(syscall.SIGHUP)
			cmd.Process.Signal(syscall.SIGTERM)
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			dev := "emu:" + filepath.Join(dir, "dev") + "?zone_size=4M&zones=32"
			d := &daemonProc{socket: filepath.Join(dir, "zf.sock")}
			d.cmd = tc.start([]string{"serve", dev, "--format", "--socket", d.socket, "--cache", "64M"})
			// Its own process group: a signal to the group reaches
			// only it (timeout makes its own anyway).
			d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			d.cmd.Stderr = &d.stderr
			d.done = runServe(t, d.cmd, &d.stderr)
			t.Cleanup(func() {
				syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
				<-d.done
			})
			// Dirty, never fsynced: a clean stop writes it back.
			want := bytes.Repeat([]byte("written back at the stop "), 8<<20/25)
			c, err := server.Dial(context.Background(), d.socket, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			h, _, err := c.Open(context.Background(), "dirty", server.OpenCreate)
			if err != nil {
				t.Fatal(err)
			}
			for off := 0; off < len(want); off += 512 << 10 {
				if _, err := c.WriteAt(context.Background(), h, want[off:min(off+512<<10, len(want))], int64(off)); err != nil {
					t.Fatal(err)
				}
			}
			c.Close()

			tc.stop(d.cmd)
			select {
			case <-d.done:
			case <-time.After(time.Minute):
				t.Fatalf("serve did not stop within a minute\n%s", d.stderr.String())
			}
			if st := d.cmd.ProcessState.ExitCode(); st != tc.exit {
				t.Fatalf("serve stopped by %s: exit %d, want %d (a clean stop)\nstderr: %s", tc.name, st, tc.exit, d.stderr.String())
			}
			for _, left := range []string{d.socket, d.socket + ".lock"} {
				if exists(left) {
					t.Errorf("serve stopped by %s left %s behind", tc.name, left)
				}
			}
			// The next daemon serves what the stop wrote back.
			t.Cleanup(serveInProcess(t, dev, d.socket))
			c, err = server.Dial(context.Background(), d.socket, 8<<20)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if got := content(t, c, "dirty"); !bytes.Equal(got, want) {
				t.Fatalf("serve stopped by %s: the file written before the stop holds %d bytes, want its %d: its unsynced writes were not written back",
					tc.name, len(got), len(want))
			}
		})
	}
}

// TestH28aGetToAFIFONoReaderStopsAtSIGTERM: `zonefold get NAME FIFO`
// while nothing reads the FIFO waits in open(2) for a reader, which no
// signal ends: the first SIGTERM was recorded and ignored, and get went
// on waiting. Only a second signal ended it, and a second SIGTERM no
// longer does (TestH28aRepeatedSIGTERMStopsServeCleanly): get must stop
// at the first, 143, leaving the FIFO as it was.
func TestH28aGetToAFIFONoReaderStopsAtSIGTERM(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, "emu:"+filepath.Join(dir, "dev")+"?zone_size=4M&zones=16")
	local := filepath.Join(dir, "local")
	if err := os.WriteFile(local, []byte("for nobody\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := runBinary(t, "put", local, "f", "--socket", d.socket); r.status != 0 {
		t.Fatalf("put: %+v", r)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd, stderr, done := startZonefold(t, "get", "f", fifo, "--socket", d.socket)
	// The signal must find get in open(2) of the FIFO, waiting for a
	// reader: the test waits until /proc shows that wait.
	waitOpenFIFO(t, cmd.Process.Pid, done)
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("get f %s (a FIFO nothing reads) still runs a minute after SIGTERM; want it stopped (exit 143); stderr %q", fifo, stderr.String())
	}
	if st := cmd.ProcessState.ExitCode(); st != 143 {
		t.Fatalf("get to a FIFO with no reader, SIGTERM: exit %d, stderr %q; want 143", st, stderr.String())
	}
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("after an interrupted get, %s is %v (%v), want the FIFO", fifo, fi, err)
	}
}

// waitOpenFIFO waits until a thread of process pid sleeps in the kernel
// opening a FIFO (its wchan wait_for_partner, fifo_open on older
// kernels), failing the test if the process ends first.
func waitOpenFIFO(t *testing.T, pid int, done <-chan struct{}) {
	t.Helper()
	for {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/wchan", pid))
		for _, w := range tasks {
			if b, _ := os.ReadFile(w); string(b) == "wait_for_partner" || string(b) == "fifo_open" {
				return
			}
		}
		select {
		case <-done:
			t.Fatal("the command ended before it opened the FIFO")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestH28aSIGINTWhileStoppingStopsAtOnce: the escalation that stays. put,
// told to stop by a signal, removes its temporary file through the
// daemon before it exits; the daemon here is frozen (SIGSTOP), so that
// clean stop waits (up to put's 10 s bound). A SIGINT then (Ctrl-C
// again) must end put at once, 130, whatever it waits for; it is not one
// more request for the same clean stop, as a repeated SIGTERM is. After
// a first SIGINT the second must come later than sameRequestWindow to
// be Ctrl-C pressed again: sooner, it is the one request sent twice, as
// `timeout -s INT` sends its signal to the command and then to its
// process group (TestSIGINTTwiceAtOnceIsOneRequest).
func TestH28aSIGINTWhileStoppingStopsAtOnce(t *testing.T) {
	for _, first := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(signalName(first), func(t *testing.T) { testSIGINTWhileStopping(t, first, true) })
	}
}

// TestSIGINTTwiceAtOnceIsOneRequest: two SIGINTs within
// sameRequestWindow ask for one clean stop. They used to stop put (and
// serve, with its unsynced writes) at once: `timeout -s INT 1h zonefold
// serve ...` lost acknowledged writes whenever its two signals reached
// serve one after the other rather than merged into one.
//
// The window is wall time between Main's loop taking the two signals,
// and the test can send the second only once put shows it took the
// first (it closed its connection): on a loaded machine (CI105 ran the
// race-instrumented engine tests beside it) that can take longer than
// the window, and put then rightly stops at once. Such a round is
// tried again; the test fails if every one of five stopped at once.
func TestSIGINTTwiceAtOnceIsOneRequest(t *testing.T) {
	for round := range 5 {
		missed := testSIGINTWhileStopping(t, syscall.SIGINT, false)
		if missed == "" {
			return
		}
		t.Logf("round %d: put stopped at once, the two SIGINTs taken more than %v apart (%s)", round, sameRequestWindow, missed)
	}
	t.Fatal("put stopped at once in each of 5 rounds when a second SIGINT came with the first; want it taken for the same request and the clean stop kept")
}

// testSIGINTWhileStopping stops a put whose daemon is frozen with first,
// then sends SIGINT: after sameRequestWindow if later (put must end at
// once, 130), else at once (put must go on with its clean stop, and end
// it once the daemon runs again). If not later and put stopped at once,
// it returns how (the caller decides), else "".
func testSIGINTWhileStopping(t *testing.T, first syscall.Signal, later bool) string {
	dir := t.TempDir()
	d := startDaemon(t, "emu:"+filepath.Join(dir, "dev")+"?zone_size=4M&zones=16")
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	// Read and write: the open does not wait for put, and the FIFO
	// never ends, so put copies this and waits for more.
	w, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// One chunk and a bit: put writes its first chunk to the daemon
	// and then waits for more (a write that ends when put has read it
	// all, or at the test's end, which closes w).
	go w.Write(bytes.Repeat([]byte("p"), copyChunk+4096))
	cmd, stderr, done := startZonefold(t, "put", fifo, "f", "--socket", d.socket)
	// put is copying once its temporary has data: put writes only once
	// its open's reply is in, and only from then does its stop remove
	// the temporary itself (before that, the daemon removes it as put's
	// connection ends, and put rightly exits at once; with "the
	// temporary is listed" as the sign, 5 of 40 runs failed that way).
	c, err := server.Dial(context.Background(), d.socket, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	giveUp := time.After(time.Minute)
	for copying := false; !copying; {
		list, err := c.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range list {
			copying = copying || strings.HasPrefix(e.Name, server.TempPrefix) && e.Size > 0
		}
		select {
		case <-done:
			t.Fatalf("put ended before it copied the FIFO: %v, stderr %q", cmd.ProcessState, stderr.String())
		case <-giveUp:
			t.Fatalf("put made no temporary file within a minute; stderr %q", stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	c.Close()
	d.cmd.Process.Signal(syscall.SIGSTOP)
	defer d.cmd.Process.Signal(syscall.SIGCONT)
	// kill returns before the daemon has stopped: until it has, it may
	// still answer put's stop (whose remove then found the temporary
	// gone with put's first connection, and put exited at once).
	waitStopped(t, d.cmd.Process.Pid)
	// SIGINT must come once put has taken the SIGTERM and is stopping
	// (both pending at once, SIGINT, the lower number, would be taken
	// first): the sign is that put closed its connection, to remove its
	// temporary through a new one.
	before := sockets(cmd.Process.Pid)
	sentFirst := time.Now()
	cmd.Process.Signal(first)
	for stopping := false; !stopping; {
		now := sockets(cmd.Process.Pid)
		for s := range before {
			stopping = stopping || !now[s]
		}
		select {
		case <-done:
			t.Fatalf("put ended at %s before the SIGINT (exit %d): its clean stop did not wait for the frozen daemon; stderr %q",
				signalName(first), cmd.ProcessState.ExitCode(), stderr.String())
		case <-giveUp:
			t.Fatalf("put did not start stopping within a minute of %s; stderr %q", signalName(first), stderr.String())
		case <-time.After(time.Millisecond):
		}
	}
	if first == syscall.SIGINT && later {
		// Ctrl-C pressed again, not the same request sent twice.
		time.Sleep(2 * sameRequestWindow)
	}
	gap := time.Since(sentFirst)
	cmd.Process.Signal(syscall.SIGINT)
	if !later {
		// The same request: put says so and goes on waiting for the
		// frozen daemon, then ends its clean stop once it runs.
		for !strings.Contains(stderr.String(), "same request") {
			select {
			case <-done:
				return fmt.Sprintf("exit %d, the second SIGINT sent %v after the first; stderr %q",
					cmd.ProcessState.ExitCode(), gap.Round(time.Millisecond), stderr.String())
			case <-giveUp:
				t.Fatalf("put said nothing of the second SIGINT within a minute; stderr %q", stderr.String())
			case <-time.After(time.Millisecond):
			}
		}
		d.cmd.Process.Signal(syscall.SIGCONT)
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatalf("put still runs a minute after its daemon ran again; stderr %q", stderr.String())
		}
		if st := cmd.ProcessState.ExitCode(); st != 130 {
			t.Fatalf("put stopped cleanly by SIGINT: exit %d, want 130; stderr %q", st, stderr.String())
		}
		// Its clean stop removed its temporary file.
		c, err := server.Dial(context.Background(), d.socket, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		list, err := c.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range list {
			if strings.HasPrefix(e.Name, server.TempPrefix) {
				t.Fatalf("put stopped by SIGINT left its temporary %s: not a clean stop; stderr %q", e.Name, stderr.String())
			}
		}
		return ""
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("put still runs a minute after %s then SIGINT; stderr %q", signalName(first), stderr.String())
	}
	if st := cmd.ProcessState.ExitCode(); st != 130 {
		t.Fatalf("put stopped by %s then SIGINT, its daemon frozen: exit %d, stderr %q; want 130 (SIGINT stops at once)", signalName(first), st, stderr.String())
	}
	return ""
}

// sockets is the set of sockets process pid has open ("socket:[inode]").
// waitStopped waits until process pid is stopped (state T in
// /proc/PID/stat), for up to a minute.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	for giveUp := time.Now().Add(time.Minute); time.Now().Before(giveUp); time.Sleep(time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		// The state follows the command name, which is in parentheses.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && bytes.HasPrefix(b[i+1:], []byte(" T")) {
			return
		}
	}
	t.Fatalf("process %d did not stop within a minute of SIGSTOP", pid)
}

func sockets(pid int) map[string]bool {
	out := map[string]bool{}
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && strings.HasPrefix(l, "socket:") {
			out[l] = true
		}
	}
	return out
}

// startZonefold starts the binary with args, keeping its stderr; done closes
// when it has exited. The test's end kills it.
func startZonefold(t *testing.T, args ...string) (cmd *exec.Cmd, stderr *syncbuf.Buffer, done chan struct{}) {
	t.Helper()
	cmd = exec.Command(zonefoldBinary(t), args...)
	stderr = &syncbuf.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done = make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	return cmd, stderr, done
}
