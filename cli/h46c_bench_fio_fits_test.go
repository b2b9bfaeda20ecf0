package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestH46cBenchFioCountsFiosOwnDraws: bench fio's fits check counted the
// blocks RunWorkload's seeded randwrite draws hit, but its daemon rounds
// run fio, whose draws (norandommap, randrepeat=0) are its own: 1 file
// of 18.5 MiB in 4 KiB random writes, whose replay held 3014 blocks of
// the 3072 the device holds for files, met ENOSPC in 2 of 6 fio rounds
// ("fio: io_u error on file job.0: No space left on device") where every
// in-process round ran; bench fio --size 19000K --rounds 3 exited 1 so
// in round 2, the device formatted. fio may hit any block of the file, so bench fio
// refuses (exit 2, before any format) random writes that could land on
// more than the room, and still runs those whose every block fits.
func TestH46cBenchFioCountsFiosOwnDraws(t *testing.T) {
	_, eng := killFioEnv(t)
	if eng == "" {
		return // logged by killFioEnv; fails under ZONEFOLD_REQUIRE_FIO
	}
	t.Setenv("ZONEFOLD_FIO_ENGINE", eng)
	geometry := "?zone_size=1M&zones=16"
	path := filepath.Join(t.TempDir(), "dev")
	args := []string{"bench", "fio", "emu:" + path + geometry, "--rw", "randwrite", "--size", "18944K", "--bs", "4K", "--rounds", "1"}
	r := runBinary(t, args...)
	want := "1 file of 18944 KiB, whose random writes (fio draws their offsets) may land on more than 12 MiB of it, needs more than the 12 MiB the device holds for files"
	if r.status != 2 || !strings.Contains(r.stderr, want) || r.stdout != "" {
		t.Errorf("%v: %+v; want status 2 saying %q", args, r, want)
	} else {
		checkErrorLine(t, args, r.stderr)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("%v: the emu file it created is there: %v", args, err)
	}
	// A file that fits whole, with its headers, pads and the writes in
	// flight, runs however fio draws.
	args = []string{"bench", "fio", "emu:" + filepath.Join(t.TempDir(), "dev") + geometry, "--rw", "randwrite", "--size", "11M", "--bs", "4K", "--rounds", "2", "--json"}
	if r := runBinary(t, args...); r.status != 0 {
		t.Errorf("%v: %+v; want it to run", args, r)
	}
}
