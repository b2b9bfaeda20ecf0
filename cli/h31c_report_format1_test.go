package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestZonesReportWithFormat1RefusesAServedDevice: `zones report` does
// not claim the device (it only reads, so it may look at a served one),
// but an emu device string with format=1 makes the open start the device
// over: `zones report 'emu:DEV?zone_size=..&zones=..&format=1'` beside a
// daemon serving DEV reset its zone table under it, and after a kill -9
// of the daemon the device was "not formatted by zonefold", every
// fsynced file gone. A report that would rewrite the device claims it
// as format does, and is refused while the daemon holds it.
func TestZonesReportWithFormat1RefusesAServedDevice(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "dev")
	dev := "emu:" + path + "?zone_size=4M&zones=16"
	d := startDaemon(t, dev)
	local := filepath.Join(dir, "local")
	if err := os.WriteFile(local, bytes.Repeat([]byte("k"), 300<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := runBinary(t, "put", local, "kept", "--socket", d.socket); r.status != 0 {
		t.Fatalf("put: %+v", r)
	}
	args := []string{"zones", "report", dev + "&format=1"}
	r := runBinary(t, args...)
	if r.status != 1 || !strings.Contains(r.stderr, "in use") {
		t.Errorf("%v beside the daemon: %+v; want status 1, the device in use", args, r)
	} else {
		checkErrorLine(t, args, r.stderr)
	}
	// Without format=1 a report still reads a served device.
	if r := runBinary(t, "zones", "report", "emu:"+path); r.status != 0 {
		t.Errorf("zones report of a served device: %+v", r)
	}
	d.cmd.Process.Kill()
	<-d.done
	if r := runBinary(t, "fsck", "emu:"+path); r.status != 0 || !strings.Contains(r.stdout, "1 file,") {
		t.Fatalf("fsck after the report and a kill -9: %+v", r)
	}
	// Unclaimed, format=1 still starts a device over, as it says.
	if r := runBinary(t, args...); r.status != 0 {
		t.Fatalf("%v with no daemon: %+v", args, r)
	}
	if r := runBinary(t, "fsck", "emu:"+path); r.status != 1 || !strings.Contains(r.stderr, "not formatted") {
		t.Fatalf("fsck after format=1: %+v", r)
	}
}
