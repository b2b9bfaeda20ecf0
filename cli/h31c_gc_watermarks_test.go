package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestGCWatermarksThatCrossAreAUsageError: `serve --gc-low 5 --gc-high
// 2` served, with GC's high watermark silently moved to 7 (the engine
// puts it two above the low one when it is not above it), so the user's
// --gc-high did nothing and nothing said so. Crossed watermarks are a
// usage error now, before the device is opened (the device here does not
// exist: the flags are refused first).
func TestGCWatermarksThatCrossAreAUsageError(t *testing.T) {
	dev := "emu:" + filepath.Join(t.TempDir(), "missing")
	for _, args := range [][]string{
		{"serve", dev, "--gc-low", "5", "--gc-high", "2"},
		{"serve", dev, "--gc-low", "4", "--gc-high", "4"},
		{"bench", "run", dev, "--gc-low", "6", "--gc-high", "3"},
	} {
		r := runBinary(t, args...)
		if r.status != 2 || !strings.Contains(r.stderr, "--gc-high") || !strings.Contains(r.stderr, "--gc-low") {
			t.Errorf("%v: status %d, stderr %q; want 2 and an error naming --gc-high and --gc-low", args, r.status, r.stderr)
			continue
		}
		checkErrorLine(t, args, r.stderr)
	}
}
