package cli

import (
	"os"
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

// TestFormat1OnANewFileNeedsNoForce: format=1 on a file that holds
// nothing (absent, or empty) erases nothing, so a command that creates
// a device with it is not asked for --force: `format 'emu:NEW?..&format=1'`
// and `serve 'emu:NEW?..&format=1' --format` start a device as they did
// before format=1 needed --force on a device holding data.
func TestFormat1OnANewFileNeedsNoForce(t *testing.T) {
	dir := t.TempDir()
	geo := "?zone_size=1M&zones=16&format=1"
	absent := filepath.Join(dir, "absent")
	if r := runBinary(t, "format", "emu:"+absent+geo); r.status != 0 {
		t.Fatalf("format of an absent file with format=1: %+v", r)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := runBinary(t, "format", "emu:"+empty+geo); r.status != 0 {
		t.Fatalf("format of an empty file with format=1: %+v", r)
	}
	for _, p := range []string{absent, empty} {
		if r := runBinary(t, "fsck", "emu:"+p); r.status != 0 {
			t.Fatalf("fsck of %s after format: %+v", p, r)
		}
	}
	// Now they hold a file system: format=1 needs --force again.
	if r := runBinary(t, "format", "emu:"+absent+geo); r.status != 2 {
		t.Fatalf("format=1 on a formatted device without --force: %+v", r)
	}
}
