package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestH46cBenchRunCountsRecordHeadersUpFront: the fits check counted
// the files' data blocks alone, but the engine's admission counts a
// record header (a block) per file, per record's worth of data and per
// zone the data splits across, and keeps a pad block free for each zone
// that may be open. On 16 zones of 1 MiB (12 MiB for files), 1 file of
// 12272 KiB (3068 blocks of data) passed the check, ran until the device
// was full and exited 1 with the engine's ENOSPC, the device formatted.
// So did 4 files x 3028 KiB. Now they are refused before anything is
// written (exit 2), saying what the records take; 12096 KiB (3024
// blocks, the most admission takes with its 48 headers and pads) runs
// to completion and a block more is refused, and 4 files x 3020 KiB
// (the most whole KiB that fit beside 4 files' headers) run.
func TestH46cBenchRunCountsRecordHeadersUpFront(t *testing.T) {
	benchRunRefusesAndRuns(t, []benchRefusal{
		{[]string{"--size", "12272K", "--bs", "4K"}, "1 file of 12272 KiB needs 12464 KiB with the engine's record headers and pads, more than the 12 MiB the device holds for files"},
		{[]string{"--size", "12100K", "--bs", "4K"}, "1 file of 12100 KiB needs 12292 KiB with the engine's record headers and pads"},
		{[]string{"--files", "4", "--size", "3028K", "--bs", "4K", "--iodepth", "4"}, "4 files x 3028 KiB (12112 KiB) need 12316 KiB with the engine's record headers and pads"},
	}, [][]string{
		{"--size", "12096K", "--bs", "4K"},
		{"--files", "4", "--size", "3020K", "--bs", "4K", "--iodepth", "4"},
	})
}

// benchRefusal is a bench run a device of 16 zones of 1 MiB refuses:
// its flags, and what the refusal says.
type benchRefusal struct {
	args []string
	says string
}

// benchRunRefusesAndRuns checks that bench run on a fresh emu device of
// 16 zones of 1 MiB refuses each of refused with status 2, before
// anything is written (the emu file it created is gone), saying what
// the case says and the flags to lower, and runs each of runs.
func benchRunRefusesAndRuns(t *testing.T, refused []benchRefusal, runs [][]string) {
	t.Helper()
	geometry := "?zone_size=1M&zones=16"
	for _, tc := range refused {
		path := filepath.Join(t.TempDir(), "dev")
		args := append([]string{"bench", "run", "emu:" + path + geometry}, tc.args...)
		r := runBinary(t, args...)
		if r.status != 2 || !strings.Contains(r.stderr, tc.says) || !strings.Contains(r.stderr, "lower --size, --files or --scale") || r.stdout != "" {
			t.Errorf("%v: %+v; want status 2 saying %q and the flags to lower", args, r, tc.says)
			continue
		}
		checkErrorLine(t, args, r.stderr)
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("%v: the emu file it created is there: %v", args, err)
		}
	}
	for _, extra := range runs {
		args := append([]string{"bench", "run", "emu:" + filepath.Join(t.TempDir(), "dev") + geometry, "--json"}, extra...)
		if r := runBinary(t, args...); r.status != 0 {
			t.Errorf("%v: %+v; want it to run", args, r)
		}
	}
}
