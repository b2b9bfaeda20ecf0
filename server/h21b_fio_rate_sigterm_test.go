package server_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestH21bFioRateJobEndsWhenDaemonStops: a rate-limited fio job (--rate=)
// whose daemon is stopped with SIGTERM mid-job never ended: the engine
// logged "zonefold: the daemon closed the connection" about 20 times a
// second for ever, because getevents returned the error but left the
// job's requests in flight, and fio's rate-limited path (io_u_quiesce)
// waits for every queued io_u whatever getevents returns. The daemon's
// shutdown meanwhile waited three grace periods for the connection.
// By hand: serve, run fio --rw=randwrite --bs=64k --iodepth=32
// --numjobs=2 --size=48m --rate=40m, kill -TERM the daemon: fio was
// still there minutes later. The engine now fails the requests in flight
// once the connection is gone (abandon), and the job ends with the error.
// (Found by helper h21b.)
func TestH21bFioRateJobEndsWhenDaemonStops(t *testing.T) {
	fio, engine := fioEnv(t)
	d := newServe(t)
	c := dialServe(t, d)
	cmd := exec.Command(fio, "--name=rated", "--ioengine=external:"+engine, "--sock="+d.socket,
		"--filename=rated", "--rw=randwrite", "--bs=64k", "--iodepth=32", "--size=256m", "--rate=4m")
	cmd.Dir = t.TempDir()
	// A file, not a pipe: fio's job process (a child, in a session of
	// its own) holds its output open, and Wait would wait for a pipe's
	// copy to end with it, past killing fio itself.
	outFile, err := os.Create(filepath.Join(t.TempDir(), "fio.out"))
	if err != nil {
		t.Fatal(err)
	}
	defer outFile.Close()
	cmd.Stdout, cmd.Stderr = outFile, outFile
	out := fileText{outFile.Name()}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	exited := make(chan struct{})
	go func() { done <- cmd.Wait(); close(exited) }()
	defer func() {
		select {
		case <-exited:
		default:
			killTree(cmd.Process.Pid)
			<-exited
		}
	}()
	// Gate: the job is mid-way (256 MiB at 4 MiB/s takes a minute) once
	// the daemon has its file with data in it.
	for {
		if st, err := c.Stat(context.Background(), "rated"); err == nil && st.Size > 0 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("fio ended before the daemon stopped: %v\n%s", err, out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	c.Close()
	d.stop()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("fio exited 0 although its daemon went away mid-job:\n%s", h21bTail(out.String()))
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("fio is still running 30 s after its daemon stopped (SIGTERM); %d lines of %q so far:\n%s",
			strings.Count(out.String(), "\n"), "the daemon closed the connection", h21bTail(out.String()))
	}
}

// killTree kills pid's descendants (fio's job processes, which a kill
// of fio's process group misses), then pid.
func killTree(pid int) {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid)); err == nil {
		for _, f := range strings.Fields(string(b)) {
			if child, err := strconv.Atoi(f); err == nil {
				killTree(child)
			}
		}
	}
	syscall.Kill(pid, syscall.SIGKILL)
}

// fileText reads a file's text when printed.
type fileText struct{ name string }

func (f fileText) String() string {
	b, _ := os.ReadFile(f.name)
	return string(b)
}

func h21bTail(s string) string {
	if len(s) > 2000 {
		return s[len(s)-2000:]
	}
	return s
}
