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
// fsynced file gone. A report that would rewrite the device needs
// --force, as every command does for format=1 on a device holding data,
// and claims it as format does, so it is refused while the daemon holds
// it.
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
	args := []string{"zones", "report", dev + "&format=1", "--force"}
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
	// Unclaimed, format=1 on a device holding data needs --force, as
	// for every other command, and then starts the device over.
	if r := runBinary(t, args[:3]...); r.status != 2 || !strings.Contains(r.stderr, "format=1") {
		t.Fatalf("%v without --force: %+v; want status 2, format=1 named", args[:3], r)
	}
	if r := runBinary(t, "fsck", "emu:"+path); r.status != 0 {
		t.Fatalf("fsck after a refused report: %+v", r)
	}
	if r := runBinary(t, args...); r.status != 0 {
		t.Fatalf("%v with no daemon: %+v", args, r)
	}
	if r := runBinary(t, "fsck", "emu:"+path); r.status != exitNotChecked || !strings.Contains(r.stderr, "not formatted") {
		t.Fatalf("fsck after format=1: %+v", r)
	}
}
