package cli

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestH18fPutOfAFIFONoWriterStopsAtSIGINT: `zonefold put FIFO NAME` while
// nothing has the FIFO open for writing yet (`put <(producer)` whose
// producer has not started, a named pipe whose writer is late) waits
// for a writer. The conventions promise that a signal stops any command,
// the commands that talk to the daemon cleanly at the first one (exit
// 130 after SIGINT). put opens LOCAL with os.Open before it arms its
// interrupt (the read deadline it sets when the context ends), and
// open(2) of a FIFO blocks until a writer comes: the first SIGINT is
// recorded and ignored; put keeps waiting until a second signal kills it.
func TestH18fPutOfAFIFONoWriterStopsAtSIGINT(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, "emu:"+filepath.Join(dir, "dev")+"?zone_size=4M&zones=16")
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(zonefoldBinary(t), "put", fifo, "f", "--socket", d.socket)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	time.Sleep(500 * time.Millisecond) // put is in open(2) of the FIFO
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("put %s f (a FIFO nothing writes to yet) still runs 10 s after SIGINT; want it stopped at once (exit 130), as the conventions promise; stderr %q", fifo, stderr.String())
	}
	if st := cmd.ProcessState.ExitCode(); st != 130 {
		t.Fatalf("put of a FIFO interrupted while waiting for a writer: exit %d, stderr %q; want 130", st, stderr.String())
	}
	if r := runBinary(t, "ls", "--socket", d.socket); r.stdout != "" {
		t.Fatalf("after an interrupted put, ls: %q", r.stdout)
	}
}
