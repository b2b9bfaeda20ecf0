package cli

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestARefusedClientIsToldWhichCapRefusedIt: a daemon whose
// --max-shared-memory has no room for a client refuses it with ENOMEM
// (as --max-clients does with EUSERS), and the client said only
// "daemon refused the connection: cannot allocate memory", which reads
// as the machine being out of memory. It now names the daemon's cap and
// what to do.
func TestARefusedClientIsToldWhichCapRefusedIt(t *testing.T) {
	dir := t.TempDir()
	d := &daemonProc{socket: filepath.Join(dir, "zf.sock")}
	d.cmd = exec.Command(zonefoldBinary(t), "serve", "emu:"+filepath.Join(dir, "dev")+"?zone_size=4M&zones=16",
		"--format", "--socket", d.socket, "--cache", "16M", "--max-shared-memory", "64K")
	d.cmd.Stderr = &bytes.Buffer{}
	d.done = runServe(t, d.cmd, d.cmd.Stderr.(*bytes.Buffer))
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		<-d.done
	})
	args := []string{"ls", "--socket", d.socket}
	r := runBinary(t, args...)
	if r.status != 1 || !strings.Contains(r.stderr, "cannot allocate memory") || !strings.Contains(r.stderr, "--max-shared-memory") {
		t.Fatalf("ls refused for shared memory: %+v; want status 1 and the cap named", r)
	}
	checkErrorLine(t, args, r.stderr)
	if st := d.stop(t, syscall.SIGTERM); st != 0 {
		t.Fatalf("serve exited %d", st)
	}
}
