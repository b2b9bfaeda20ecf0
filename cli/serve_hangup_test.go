package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"

	"github.com/zonefold/zonefold/server"
)

// TestServeStopsCleanlyOnHangup: a daemon whose terminal goes away
// (SIGHUP: the window closed, the ssh session dropped) stops as it does
// on SIGTERM: it writes back what clients wrote and never fsynced,
// checkpoints and exits 0. Without a handler, Go's default for SIGHUP
// ended it at once, like a kill -9: no writeback, no checkpoint, the
// unsynced writes it had acknowledged lost.
func TestServeStopsCleanlyOnHangup(t *testing.T) {
	device := "emu:" + filepath.Join(t.TempDir(), "dev") + "?zone_size=4M&zones=16"
	d := startDaemon(t, device)
	want := bytes.Repeat([]byte("acknowledged, never fsynced "), 1000)
	writeUnsynced(t, d.socket, "unsynced", want)
	if st := d.stop(t, syscall.SIGHUP); st != 0 {
		t.Fatalf("serve after SIGHUP: %v, want exit 0\n%s", d.cmd.ProcessState, d.stderr.String())
	}
	servedAfterRestart(t, device, "unsynced", want)
}

// TestServeUnderNohupIgnoresHangup: a daemon started with SIGHUP
// ignored (nohup) keeps serving through a hangup, as nohup promises;
// handling the signal must not undo that.
func TestServeUnderNohupIgnoresHangup(t *testing.T) {
	nohup, err := exec.LookPath("nohup")
	if err != nil {
		t.Skip("no nohup")
	}
	d := &daemonProc{socket: filepath.Join(t.TempDir(), "zf.sock")}
	device := "emu:" + filepath.Join(t.TempDir(), "dev") + "?zone_size=4M&zones=16"
	d.cmd = exec.Command(nohup, zonefoldBinary(t), "serve", device, "--format", "--socket", d.socket, "--cache", "16M")
	d.cmd.Stderr = &d.stderr
	d.done = runServe(t, d.cmd, &d.stderr)
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		<-d.done
	})
	// The disposition, once serve has set up its signals (it prints
	// "serving" after): SIGHUP still ignored.
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^SigIgn:\s*([0-9a-f]+)$`).FindSubmatch(status)
	if m == nil {
		t.Fatalf("no SigIgn in /proc/PID/status:\n%s", status)
	}
	if ign, _ := strconv.ParseUint(string(m[1]), 16, 64); ign&(1<<(syscall.SIGHUP-1)) == 0 {
		t.Fatalf("serve under nohup no longer ignores SIGHUP (SigIgn %s)", m[1])
	}
	d.cmd.Process.Signal(syscall.SIGHUP)
	ctx := context.Background()
	c, err := server.Dial(ctx, d.socket, 1<<20)
	if err != nil {
		t.Fatalf("after a SIGHUP under nohup: %v\n%s", err, d.stderr.String())
	}
	if _, _, err := c.Open(ctx, "served", server.OpenCreate); err != nil {
		t.Fatalf("after a SIGHUP under nohup: %v\n%s", err, d.stderr.String())
	}
	c.Close()
	if st := d.stop(t, syscall.SIGTERM); st != 0 {
		t.Fatalf("serve after SIGTERM: %v, want exit 0\n%s", d.cmd.ProcessState, d.stderr.String())
	}
}
