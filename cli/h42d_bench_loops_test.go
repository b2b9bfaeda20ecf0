package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// bench run --loops 0 ran the workload once, as --loops 1 does, and said
// nothing: a value the flag refuses in meaning ("write each file's size
// this many times") taken as another. It is a usage error, as --files 0
// is, before the device is touched (DEVICE here does not exist).
func TestBenchRunLoopsZeroIsAUsageError(t *testing.T) {
	dev := "emu:" + filepath.Join(t.TempDir(), "missing")
	for _, args := range [][]string{
		{"bench", "run", dev, "--loops", "0"},
		{"bench", "fio", dev, "--loops", "0"},
	} {
		r := runBinary(t, args...)
		if r.status != 2 || !strings.Contains(r.stderr, "--loops 0") {
			t.Errorf("%v: status %d, stderr %q; want 2 and --loops named", args, r.status, r.stderr)
			continue
		}
		checkErrorLine(t, args, r.stderr)
	}
}
