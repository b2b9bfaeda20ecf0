package cli

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// bench peers refuses bad flags and anything but a zoned block device
// with one line, before touching the device.
func TestBenchPeersRejectsBadInput(t *testing.T) {
	emu := "emu:" + filepath.Join(t.TempDir(), "dev") + "?zone_size=1M&zones=16"
	for _, args := range [][]string{
		{"/dev/nullb0", "--util", "0"},
		{"/dev/nullb0", "--targets", "ext4"},
		{"/dev/nullb0", "--targets", ""},
		{"/dev/nullb0", "--workload", "sequential"},
		{"/dev/nullb0", "--bs", "1000"},
		{"/dev/nullb0", "--cache", "lots"},
		{"/dev/nullb0", "--skew", "80"},
		{"/dev/nullb0", "--repeat", "0"},
		{"/dev/nullb0", "--warmup-cap", "-1"},
		{emu},
		{"/dev/null"},
		{t.TempDir()},
		{filepath.Join(t.TempDir(), "missing")},
		{},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(append([]string{"bench", "peers", "--out", t.TempDir()}, args...), &stdout, &stderr)
		if code == 0 || !strings.HasPrefix(stderr.String(), "zonefold: ") || strings.Count(stderr.String(), "\n") > 1 {
			t.Errorf("%v: exit %d, stderr %q; want a one-line error", args, code, stderr.String())
		}
	}
}
