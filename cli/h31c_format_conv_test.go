package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestFormatOnTooFewSequentialZonesCountsTheConventionalOnes: on an emu
// device of 10 zones, 5 of them conventional, format said "the device
// has 10 zones; zonefold needs at least 11", which reads as nonsense
// until one knows that zonefold skips conventional zones. It says so
// now.
func TestFormatOnTooFewSequentialZonesCountsTheConventionalOnes(t *testing.T) {
	args := []string{"format", "emu:" + filepath.Join(t.TempDir(), "dev") + "?zone_size=1M&zones=10&conv=5"}
	r := runBinary(t, args...)
	if r.status != 1 || !strings.Contains(r.stderr, "5 of them conventional") {
		t.Fatalf("%v: %+v; want status 1 and the conventional zones counted", args, r)
	}
	checkErrorLine(t, args, r.stderr)
}
