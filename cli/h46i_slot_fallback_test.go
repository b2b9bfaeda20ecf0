package cli

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestH46iLostNewestZoneTableIsNotSilent is the review's reproduction
// with the real binary: serve an emu device, put two files, mv one
// (acknowledged durable), kill -9 the daemon, zero the newest header
// slot. fsck printed clean with exit 0 (the rename lost, the mv'd file
// back under its old name), and a later serve wrote over the data past
// the older slot's write pointers, destroying the newer metadata for
// good. Now fsck reports the damage (exit 1), serve refuses (the file
// unchanged), and serve --accept-damaged-records opens it.
func TestH46iLostNewestZoneTableIsNotSilent(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "dev")
	dev := "emu:" + path + "?zone_size=1M&zones=16"
	d := startDaemon(t, dev)
	local := filepath.Join(dir, "local")
	if err := os.WriteFile(local, bytes.Repeat([]byte("x"), 8192), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := []string{"--socket", d.socket}
	for _, args := range [][]string{{"put", local, "a"}, {"put", local, "b"}, {"mv", "b", "c"}} {
		if r := runBinary(t, append(args, sock...)...); r.status != 0 {
			t.Fatalf("%v: %+v", args, r)
		}
	}
	d.stop(t, syscall.SIGKILL)

	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var seq [2]uint64
	for i := range 2 {
		b := make([]byte, 64)
		if _, err := f.ReadAt(b, int64(i)*4096); err != nil {
			t.Fatal(err)
		}
		seq[i] = binary.LittleEndian.Uint64(b[16:])
	}
	newest := int64(0)
	if seq[1] > seq[0] {
		newest = 4096
	}
	if _, err := f.WriteAt(make([]byte, 4096), newest); err != nil {
		t.Fatal(err)
	}
	f.Close()
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	r := runBinary(t, "fsck", dev)
	if r.status != 1 || !strings.Contains(r.stdout, "DAMAGE:") || !strings.Contains(r.stdout, "the damaged copy may have been the newer") {
		t.Fatalf("fsck of a device whose newest zone table is lost: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	// The salvage copies the files as the older table has them, and
	// says what that may have lost.
	r = runBinary(t, "fsck", dev, "--copy-to", filepath.Join(dir, "copy"))
	if r.status != 1 || !strings.Contains(r.stdout, "the damaged copy may have been the newer") {
		t.Fatalf("fsck --copy-to of a device whose newest zone table is lost: exit %d\n%s%s", r.status, r.stdout, r.stderr)
	}
	r = runBinary(t, "serve", dev, "--socket", filepath.Join(dir, "refused.sock"))
	if r.status == 0 || !strings.Contains(r.stderr, "refusing to open") || !strings.Contains(r.stderr, "--accept-damaged-records") {
		t.Fatalf("serve of a device whose newest zone table is lost: exit %d, stderr %q", r.status, r.stderr)
	}
	if after, err := os.ReadFile(path); err != nil || !bytes.Equal(after, before) {
		t.Fatalf("a refused serve changed the device (%v)", err)
	}

	cmd := exec.Command(zonefoldBinary(t), "serve", dev, "--accept-damaged-records", "--socket", filepath.Join(dir, "ok.sock"), "--cache", "16M")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	done := runServe(t, cmd, &stderr)
	cmd.Process.Signal(syscall.SIGTERM)
	<-done
	if !strings.Contains(stderr.String(), "accepted: device:") {
		t.Errorf("serve --accept-damaged-records does not log what it accepted: %s", stderr.String())
	}
}
