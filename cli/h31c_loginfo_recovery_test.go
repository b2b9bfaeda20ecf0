package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestServeLogInfoSaysItRecovered: after a kill -9, `serve --log-info`
// (which logs "connections and lifecycle events") restarted and said
// only "server: serving": the engine's "engine: recovered" line (how
// many log records it replayed past the checkpoint) went to the
// process's default logger, left at warnings, and showed only under -v.
func TestServeLogInfoSaysItRecovered(t *testing.T) {
	dir := t.TempDir()
	dev := "emu:" + filepath.Join(dir, "dev") + "?zone_size=4M&zones=16"
	d := startDaemon(t, dev)
	local := filepath.Join(dir, "local")
	if err := os.WriteFile(local, bytes.Repeat([]byte("z"), 64<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := runBinary(t, "put", local, "f", "--socket", d.socket); r.status != 0 {
		t.Fatalf("put: %+v", r)
	}
	d.cmd.Process.Kill()
	<-d.done

	again := &daemonProc{socket: d.socket}
	again.cmd = exec.Command(zonefoldBinary(t), "serve", dev, "--socket", again.socket, "--cache", "16M", "--log-info")
	again.cmd.Stderr = &again.stderr
	again.done = runServe(t, again.cmd, &again.stderr)
	t.Cleanup(func() {
		again.cmd.Process.Kill()
		<-again.done
	})
	if st := again.stop(t, syscall.SIGTERM); st != 0 {
		t.Fatalf("serve exited %d after SIGTERM\n%s", st, again.stderr.String())
	}
	log := again.stderr.String()
	if !strings.Contains(log, `msg="engine: recovered"`) || !strings.Contains(log, "replayed=") {
		t.Fatalf("serve --log-info after a kill -9 does not say it recovered:\n%s", log)
	}
	if r := runBinary(t, "fsck", dev); r.status != 0 {
		t.Fatalf("fsck after the restart: %+v", r)
	}
}
