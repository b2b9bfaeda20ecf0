package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestH31dZoneActionsWithFormat1NeedForce: `zones reset|open|close|finish`
// took an emu device string with format=1 as given, so
// `zones close 'emu:DEV?..&format=1' --all` erased DEV and every file on
// it, where fsck, format, serve and the benches refuse format=1 on a
// device that holds data unless told to erase (TestFormat1InTheDevice-
// StringNeedsForce). They refuse it too now (exit 2, the device left as
// it was) unless --force is given; on a file that holds nothing yet
// format=1 erases nothing and needs no --force
// (TestFormat1OnANewFileNeedsNoForce).
func TestH31dZoneActionsWithFormat1NeedForce(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "dev")
	geo := "?zone_size=1M&zones=16"
	if r := runBinary(t, "format", "emu:"+path+geo); r.status != 0 {
		t.Fatalf("format: %+v", r)
	}
	erase := "emu:" + path + geo + "&format=1"
	for _, verb := range []string{"reset", "open", "close", "finish"} {
		args := []string{"zones", verb, erase, "--all"}
		r := runBinary(t, args...)
		if r.status != 2 || !strings.Contains(r.stderr, "format=1") || !strings.Contains(r.stderr, "--force") {
			t.Errorf("%v: status %d, stderr %q; want 2, format=1 named and --force offered", args, r.status, r.stderr)
		} else {
			checkErrorLine(t, args, r.stderr)
		}
		if r := runBinary(t, "fsck", "emu:"+path); r.status != 0 {
			t.Fatalf("after %v the device no longer checks clean: %+v", args, r)
		}
	}
	// Told to erase, format=1 does what it says.
	if r := runBinary(t, "zones", "reset", erase, "--all", "--force"); r.status != 0 {
		t.Fatalf("zones reset --force with format=1: %+v", r)
	}
	if r := runBinary(t, "fsck", "emu:"+path); r.status == 0 {
		t.Fatalf("zones reset --force with format=1 left the file system: %+v", r)
	}
	// A file that holds nothing has nothing to erase.
	fresh := "emu:" + filepath.Join(dir, "fresh") + geo + "&format=1"
	if r := runBinary(t, "zones", "finish", fresh, "--zone", "1"); r.status != 0 {
		t.Fatalf("zones finish on a new file with format=1: %+v", r)
	}
}
