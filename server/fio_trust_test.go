package server_test

// fio jobs whose writes fio counts as durable when they complete: every
// byte of them must survive a kill -9 of the daemon.

import (
	"strings"
	"syscall"
	"testing"
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
