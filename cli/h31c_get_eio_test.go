package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// TestGetOfADamagedBlockSaysWhatAndWhere: a get whose read met a block
// that fails its checksum printed "zonefold: read: input/output error",
// naming neither the file nor where in it, nor where to look next. It
// now names the file and the byte range it was reading, and points at
// the daemon's log and fsck.
func TestGetOfADamagedBlockSaysWhatAndWhere(t *testing.T) {
	dir := t.TempDir()
	dev := damagedDevice(t, dir)
	d := startDaemon(t, dev)
	args := []string{"get", "victim", filepath.Join(dir, "copy"), "--socket", d.socket}
	r := runBinary(t, args...)
	if r.status != 1 {
		t.Fatalf("get of a damaged file: %+v", r)
	}
	checkErrorLine(t, args, r.stderr)
	for _, want := range []string{`"victim"`, "bytes 0-", "input/output error", "fsck"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("get's error %q does not say %q", r.stderr, want)
		}
	}
	if exists(filepath.Join(dir, "copy")) {
		t.Error("a failed get left its copy")
	}
}

// damagedDevice is an emu device in dir holding one file, "victim",
// with one data block that fails its checksum.
func damagedDevice(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "dev")
	dev := "emu:" + path + "?zone_size=4M&zones=16"
	d := startDaemon(t, dev)
	local := filepath.Join(dir, "local")
	if err := os.WriteFile(local, bytes.Repeat([]byte("ok"), 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := runBinary(t, "put", local, "victim", "--socket", d.socket); r.status != 0 {
		t.Fatalf("put: %+v", r)
	}
	if st := d.stop(t, syscall.SIGTERM); st != 0 {
		t.Fatalf("serve exited %d\n%s", st, d.stderr.String())
	}
	// The file's one record starts zone 2, the first data zone: its
	// header, then its data. Damage a block of the data.
	e, err := zns.Open("emu:"+path, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	at := e.(*zns.Emu).FileOffset(2*e.Geometry().ZoneSize + 64<<10)
	e.Close()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte("rot!"), 1024), at); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if r := runBinary(t, "fsck", dev); r.status != 1 || !strings.Contains(r.stdout, `DAMAGE: file "victim"`) {
		t.Fatalf("fsck does not see the damage: %+v", r)
	}
	return dev
}
