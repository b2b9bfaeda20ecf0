package cli

import (
	"regexp"
	"testing"
)

// TestFsckCountsItsFindingsInEnglish: fsck of a device with one damaged
// block ended "file system is damaged (1 problems)" and its summary read
// "1 files"; counts of one are singular now.
func TestFsckCountsItsFindingsInEnglish(t *testing.T) {
	dev := damagedDevice(t, t.TempDir())
	r := runBinary(t, "fsck", dev)
	if want := "zonefold: " + dev + ": file system is damaged (1 problem)\n"; r.status != 1 || r.stderr != want {
		t.Errorf("fsck of one damaged block: status %d, stderr %q; want 1 and %q", r.status, r.stderr, want)
	}
	if !regexpMatch(`(?m)^1 file, [0-9]+ extents, [0-9.]+ [KM]iB live; [0-9]+ records; 0 replayed past the checkpoint$`, r.stdout) {
		t.Errorf("fsck's summary of one file:\n%s", r.stdout)
	}
}

func regexpMatch(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }
