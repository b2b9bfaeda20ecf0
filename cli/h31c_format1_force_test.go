package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestFormat1InTheDeviceStringNeedsForce: an emu device string with
// format=1 makes the open erase the device, and every command took it
// as given: `fsck 'emu:DEV?...&format=1'` ("check without changing it")
// erased DEV and then said it was not formatted; format and bench run
// erased a device holding a file system without --force, serve without
// --format --force. format=1 is now refused unless the command was told
// to erase (--force; serve --format --force), and the device is left as
// it was.
func TestFormat1InTheDeviceStringNeedsForce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev")
	geo := "?zone_size=1M&zones=16"
	if r := runBinary(t, "format", "emu:"+path+geo); r.status != 0 {
		t.Fatalf("format: %+v", r)
	}
	erase := "emu:" + path + geo + "&format=1"
	for _, args := range [][]string{
		{"fsck", erase},
		{"fsck", erase, "--json"},
		{"format", erase},
		{"serve", erase, "--socket", filepath.Join(t.TempDir(), "s")},
		{"serve", erase, "--format", "--socket", filepath.Join(t.TempDir(), "s")},
		{"bench", "run", erase, "--size", "256K"},
	} {
		r := runBinary(t, args...)
		if r.status != 2 || !strings.Contains(r.stderr, "format=1") {
			t.Errorf("%v: status %d, stderr %q; want 2 and format=1 named", args, r.status, r.stderr)
		} else {
			checkErrorLine(t, args, r.stderr)
		}
		if r := runBinary(t, "fsck", "emu:"+path); r.status != 0 {
			t.Fatalf("after %v the device no longer checks clean: %+v", args, r)
		}
	}
	// Told to erase, format=1 does what it says.
	if r := runBinary(t, "format", erase, "--force"); r.status != 0 {
		t.Fatalf("format --force with format=1: %+v", r)
	}
}
