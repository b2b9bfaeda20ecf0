package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestZonesResetOfAFileSystemNeedsForce: `zones reset DEV --all` (or of
// a zone the file system uses) on a device that holds a zonefold file
// system erased it without a word, where format refuses a device that
// holds data unless told --force. It is refused now (one error line,
// exit 1, the file system left whole) unless --force is given; zones the
// file system does not use (format --zones N), and the other actions,
// need none.
func TestZonesResetOfAFileSystemNeedsForce(t *testing.T) {
	dir := t.TempDir()
	dev := "emu:" + filepath.Join(dir, "dev") + "?zone_size=1M&zones=16"
	if r := runBinary(t, "format", dev, "--zones", "12"); r.status != 0 {
		t.Fatalf("format: %+v", r)
	}
	for _, args := range [][]string{
		{"zones", "reset", dev, "--all"},
		{"zones", "reset", dev, "--zone", "0"},
		{"zones", "reset", dev, "--zone", "11"},
	} {
		r := runBinary(t, args...)
		if r.status != 1 || !strings.Contains(r.stderr, "zonefold file system") || !strings.Contains(r.stderr, "--force") {
			t.Errorf("%v: status %d, stderr %q; want 1, the file system named and --force offered", args, r.status, r.stderr)
		} else {
			checkErrorLine(t, args, r.stderr)
		}
		if r := runBinary(t, "fsck", dev); r.status != 0 {
			t.Fatalf("after %v the device no longer checks clean: %+v", args, r)
		}
	}
	// A zone past the file system's, and actions that erase nothing.
	for _, args := range [][]string{
		{"zones", "reset", dev, "--zone", "12"},
		{"zones", "finish", dev, "--zone", "13"},
	} {
		if r := runBinary(t, args...); r.status != 0 {
			t.Errorf("%v: %+v; want it done", args, r)
		}
	}
	if r := runBinary(t, "fsck", dev); r.status != 0 {
		t.Fatalf("after resetting a zone the file system does not use, fsck: %+v", r)
	}
	// Told to, reset erases it.
	if r := runBinary(t, "zones", "reset", dev, "--all", "--force"); r.status != 0 {
		t.Fatalf("zones reset --all --force: %+v", r)
	}
	if r := runBinary(t, "fsck", dev); r.status == 0 {
		t.Fatalf("zones reset --all --force left the file system: %+v", r)
	}
}
