package cli

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchSizeRefusalsSayBinaryUnits: the benches refused a size flag
// in raw bytes against a bound in another unit: bench gc --cache 512K
// said "--cache 524288: want at least 1M", bench lsm --block-cache 512K
// "--block-cache 524288", bench folios --cache-size 1K "--cache-size
// 1024". Sizes are printed in KiB/MiB/GiB (the command line's
// conventions), the value and the bound alike.
func TestBenchSizeRefusalsSayBinaryUnits(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "gc", "--cache", "512K", "--out", out}, "--cache 512 KiB: want at least 1 MiB"},
		{[]string{"bench", "gc", "--bs", "6K", "--out", out}, "--bs 6 KiB: want a multiple of 4 KiB up to 16 MiB"},
		{[]string{"bench", "lsm", "--block-cache", "512K", "--out", out}, "--block-cache 512 KiB: want at least 1 MiB"},
		{[]string{"bench", "lsm", "--table-size", "1K", "--out", out}, "--table-size 1 KiB: want 0 (auto) or 64 KiB up to 1 GiB"},
		{[]string{"bench", "lsm", "--zone-size", "1000K", "--out", out}, "--zone-size 1000 KiB: want 0 (auto) or at least 1 MiB, a multiple of 4 KiB"},
		{[]string{"bench", "folios", "--cache-size", "1K"}, "--cache-size 1 KiB: want at least 4 MiB"},
		{[]string{"bench", "folios", "--bs", "1000"}, "--bs 1000 B: want a multiple of 4 KiB"},
		{[]string{"bench", "batching", "--bs", "1000"}, "--bs 1000 B: want a multiple of 512 B"},
		{[]string{"bench", "peers", "emu:" + filepath.Join(t.TempDir(), "dev"), "--cache", "512K"}, "--cache 512 KiB: want at least 1 MiB"},
	} {
		var stdout, stderr bytes.Buffer
		if code := Main(c.args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%s: exit %d, stderr %q; want 2 and %q", strings.Join(c.args, " "), code, stderr.String(), c.want)
		}
	}
}
