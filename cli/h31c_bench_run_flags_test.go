package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchRunBadWorkloadFlagsAreUsageErrors: bench run --iodepth 0 (or
// --files 0, --rw foo, --size below --bs) exited 1 with
// "workload: iodepth 0 out of range", naming no flag, where the
// conventions give a bad flag value exit 2 and its flag (as --preset nope
// did). Checked before the device is touched: DEVICE here does not exist.
func TestBenchRunBadWorkloadFlagsAreUsageErrors(t *testing.T) {
	dev := "emu:" + filepath.Join(t.TempDir(), "missing")
	for _, c := range []struct {
		args []string
		flag string
	}{
		{[]string{"bench", "run", dev, "--iodepth", "0"}, "--iodepth"},
		{[]string{"bench", "run", dev, "--iodepth", "5000"}, "--iodepth"},
		{[]string{"bench", "run", dev, "--files", "0"}, "--files"},
		{[]string{"bench", "run", dev, "--rw", "foo"}, "--rw"},
		{[]string{"bench", "run", dev, "--bs", "128M"}, "--bs"},
		{[]string{"bench", "run", dev, "--bs", "1M", "--size", "64K"}, "--size"},
		{[]string{"bench", "fio", dev, "--rw", "read"}, "--rw"},
	} {
		r := runBinary(t, c.args...)
		if r.status != 2 || !strings.Contains(r.stderr, c.flag) {
			t.Errorf("%v: status %d, stderr %q; want 2 and %s named", c.args, r.status, r.stderr, c.flag)
			continue
		}
		checkErrorLine(t, c.args, r.stderr)
	}
}
