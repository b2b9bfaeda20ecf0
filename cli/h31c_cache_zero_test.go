package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestCacheZeroIsRefused: --cache 1 was refused ("size 1 B: want 4 KiB
// to 8 TiB") but --cache 0 served with the default 256 MiB cache, saying
// nothing: a user who asked for no cache got 256 MiB of memory held.
// It is a usage error now, before the device is opened (the device here
// does not exist).
func TestCacheZeroIsRefused(t *testing.T) {
	dev := "emu:" + filepath.Join(t.TempDir(), "missing")
	for _, args := range [][]string{
		{"serve", dev, "--cache", "0"},
		{"bench", "run", dev, "--cache", "0"},
	} {
		r := runBinary(t, args...)
		if r.status != 2 || !strings.Contains(r.stderr, "--cache 0") {
			t.Errorf("%v: status %d, stderr %q; want 2 and --cache 0 refused", args, r.status, r.stderr)
			continue
		}
		checkErrorLine(t, args, r.stderr)
	}
}
