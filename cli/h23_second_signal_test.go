package cli

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zonefold/zonefold/server"
)

// A SIGINT after the first signal (Ctrl-C again) stops serve at once
// (README: "a SIGINT that follows stops them at once"), wherever its
// clean stop is: writing back, flushing, checkpointing. (A SIGTERM that
// follows does not: TestH28aRepeatedSIGTERMStopsServeCleanly.) That is a crash at a point of the daemon's choosing, so
// the promise is a crash's: the next serve opens the device, fsck finds
// no damage, and everything fsynced (here a put, durable when it
// returns) is there. The second signal follows the first after 1 to 40
// ms, while the daemon writes back 12 MiB nobody fsynced, to land in
// different parts of the stop. It could fail if a stop cut short left a
// torn checkpoint or log that recovery refuses or misreads, or lost a
// put; or if serve ignored the second signal (it must exit within
// seconds, 130, or 0 if the clean stop was over first).
func TestCLISecondSignalDuringTheCleanStopLosesNothingFsynced(t *testing.T) {
	dir := t.TempDir()
	dev := "emu:" + filepath.Join(dir, "dev") + "?zone_size=4M&zones=32"
	local := filepath.Join(dir, "local")
	for i, delay := range []time.Duration{time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond} {
		d := &daemonProc{socket: filepath.Join(t.TempDir(), "zf.sock")}
		args := []string{"serve", dev, "--socket", d.socket, "--cache", "64M"}
		if i == 0 {
			args = append(args, "--format")
		}
		d.cmd = exec.Command(zonefoldBinary(t), args...)
		d.cmd.Stderr = &d.stderr
		d.done = runServe(t, d.cmd, &d.stderr)
		t.Cleanup(func() {
			d.cmd.Process.Kill()
			<-d.done
		})
		sock := []string{"--socket", d.socket}
		// Every put of the earlier rounds is there, byte for byte.
		for j := range i {
			name := "put" + string(rune('a'+j))
			got := filepath.Join(dir, "got")
			os.Remove(got)
			r := runBinary(t, append([]string{"get", name, got}, sock...)...)
			b, _ := os.ReadFile(got)
			if r.status != 0 || string(b) != strings.Repeat(name, 4096) {
				t.Fatalf("round %d: get %s (fsynced in round %d): status %d, %d bytes, stderr %q", i, name, j, r.status, len(b), r.stderr)
			}
		}
		name := "put" + string(rune('a'+i))
		if err := os.WriteFile(local, []byte(strings.Repeat(name, 4096)), 0o644); err != nil {
			t.Fatal(err)
		}
		if r := runBinary(t, append([]string{"put", local, name}, sock...)...); r.status != 0 {
			t.Fatalf("round %d: put: %+v", i, r)
		}
		// Dirty, never fsynced: the clean stop writes it back.
		c, err := server.Dial(context.Background(), d.socket, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		h, _, err := c.Open(context.Background(), "dirty", server.OpenCreate)
		if err != nil {
			t.Fatal(err)
		}
		chunk := bytes.Repeat([]byte{byte(i + 1)}, 1<<20)
		for off := int64(0); off < 12<<20; off += 1 << 20 {
			if _, err := c.WriteAt(context.Background(), h, chunk, off); err != nil {
				t.Fatal(err)
			}
		}
		c.Close()
		d.cmd.Process.Signal(syscall.SIGTERM)
		time.Sleep(delay)
		d.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-d.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: serve did not exit within 30 s of a SIGINT after its SIGTERM", i)
		}
		st := d.cmd.ProcessState.ExitCode()
		t.Logf("round %d (second signal after %v): exit %d", i, delay, st)
		if st != 0 && st != exitSignal(syscall.SIGINT) {
			t.Fatalf("round %d: serve exited %d after SIGTERM then SIGINT, want 130 (or 0: stopped before the second)\n%s", i, st, d.stderr.String())
		}
		if r := runBinary(t, "fsck", dev); r.status != 0 {
			t.Fatalf("round %d: fsck after a stop cut short: status %d\n%s%s", i, r.status, r.stdout, r.stderr)
		}
	}
}
