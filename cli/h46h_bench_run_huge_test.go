package cli

import (
	"strings"
	"testing"
)

// TestH46hBenchRunHugeSizesAreRefusedSayingWhy: --size times --scale
// went through float64 to int64, which wraps past 8 EiB: --size 4E
// --scale 4 was refused as "less than --bs"; and 16384 files of 1 PiB
// (2^64 bytes, 0 once wrapped) passed the fits check, so bench run
// formatted the device and wrote until ENOSPC. Both are refused (exit
// 2) saying what is too large.
func TestH46hBenchRunHugeSizesAreRefusedSayingWhy(t *testing.T) {
	dev := "null:?size=1G&zone_size=64M"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--size", "4E", "--scale", "4"}, "--size 4E times --scale 4 is more than 8 EiB"},
		{[]string{"--size", "1P", "--files", "16384"}, "16384 files x 1 PiB (more than 8 EiB) need more than"},
	} {
		args := append([]string{"bench", "run", dev}, tc.args...)
		r := runBinary(t, args...)
		if r.status != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: %+v; want status 2 saying %q", args, r, tc.want)
		}
	}
}
