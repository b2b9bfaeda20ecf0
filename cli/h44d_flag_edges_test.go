package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestH44dWrongValuesAreUsageErrorsThatSayWhatIsTaken: a value the user
// typed wrong is a usage error (exit 2) whose one line names the flag or
// the device string and what would be taken, before anything is touched;
// nothing it asked for is changed behind its back. Each of these exited
// 1 (format --zones 3: the engine's "format: 3 zones asked for"; a
// malformed emu: or null: device string: zns's parse error, or, for an
// unknown backend, "lock device ...: no such file or directory"; bench
// fio --rounds 0; serve --metrics without a port), ran something else
// than asked (--readahead above a thirty-second of --cache was lowered to
// it; bench run --bs 3000 trimmed each file's 64 MiB to 67107000 bytes;
// --gc-high 3 alone ran with 6, two above --gc-low's default),
// or panicked (debug crash-writer --files -1: makeslice) or ran for ever
// (--ops -5). None of them creates the emu file it names.
func TestH44dWrongValuesAreUsageErrorsThatSayWhatIsTaken(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "dev")
	dev := "emu:" + path + "?zone_size=1M&zones=16"
	const emuForm = "emu:PATH?zone_size=SIZE&zones=N"
	for _, c := range []struct {
		args []string
		want []string
	}{
		// 1. --zones below what zonefold needs.
		{[]string{"format", dev, "--zones", "3"}, []string{"--zones 3: zonefold needs at least 6 zones on this device"}},
		{[]string{"format", dev, "--zones", "1", "--force"}, []string{"--zones 1: zonefold needs at least 6 zones"}},
		// Small zones take larger metadata groups on more zones: 3 is
		// refused, and the least said is what then formats (below).
		{[]string{"format", "emu:" + path + "?zone_size=64K&zones=64", "--zones", "3"}, []string{"--zones 3: zonefold needs at least 10 zones on this device (it has 64)"}},
		// 2. Malformed device strings, every command that takes one.
		{[]string{"format", "emu:" + path + "?zone_size=1M&zones=x"}, []string{`zones: bad count "x"`, emuForm}},
		{[]string{"format", "emu:?zone_size=1M&zones=16"}, []string{"emu needs a file or device path", emuForm}},
		{[]string{"serve", "emux:" + path, "--socket", filepath.Join(dir, "s")}, []string{`unknown backend "emux"`, emuForm, "null:?size="}},
		{[]string{"fsck", path + "?zone_size=1M&zones=16"}, []string{"parameters are only for emu: and null: devices", emuForm}},
		{[]string{"zones", "report", "emu:" + path + "?zone_sz=1M&zones=16"}, []string{`unknown parameter "zone_sz"`, emuForm}},
		{[]string{"zones", "reset", "emu:" + path + "?zone_size", "--all"}, []string{`parameter "zone_size" is not key=value`, emuForm}},
		{[]string{"bench", "run", "emu:" + path + "?zone_size=1000&zones=16"}, []string{"zone_size 1000 is not a multiple of the block size 4096", emuForm}},
		{[]string{"bench", "fio", "emu:" + path + "?zone_size=1M&zones=16&zones=3"}, []string{`parameter "zones" given twice`, emuForm}},
		{[]string{"debug", "crash-writer", "emu:" + path + "?zone_size=1M&zones=16&format=yes"}, []string{`format: want 0 or 1, got "yes"`, emuForm}},
		{[]string{"format", "emu:" + path + "?zone_size=1M&zones=16&conv=16"}, []string{"conv 16 leaves no sequential zone of 16", emuForm}},
		{[]string{"format", "null:?size=16M"}, []string{"zone_size is required", "null:?size=SIZE&zone_size=SIZE"}},
		{[]string{"format", ""}, []string{"empty device string", emuForm}},
		{[]string{"bench", "gc", "emu:" + path + "?zone_size=1Q&zones=16", "--out", filepath.Join(dir, "gc")}, []string{`bad size "1Q"`, emuForm}},
		{[]string{"bench", "lsm", "emu:" + path + "?max_open=z", "--out", filepath.Join(dir, "lsm")}, []string{`max_open: bad count "z"`, emuForm}},
		{[]string{"bench", "seeds", "--affinity-device", "emu:" + path + "?zones=-1"}, []string{"--affinity-device", `zones: bad count "-1"`, emuForm}},
		// 3. --readahead above what the cache takes.
		{[]string{"serve", dev, "--socket", filepath.Join(dir, "s"), "--readahead", "16M"}, []string{"--readahead 16 MiB: want at most 8 MiB", "--cache 256 MiB"}},
		{[]string{"bench", "run", dev, "--cache", "64M", "--readahead", "4M"}, []string{"--readahead 4 MiB: want at most 2 MiB", "--cache 64 MiB"}},
		{[]string{"bench", "fio", dev, "--cache", "1M", "--readahead", "256K"}, []string{"--readahead 256 KiB: want at most 128 KiB"}},
		// 4. A file size that is no whole number of blocks.
		{[]string{"bench", "run", dev, "--bs", "3000"}, []string{"--size 64 MiB is not a whole number of --bs 3000 blocks", "67107000", "67110000"}},
		{[]string{"bench", "run", dev, "--bs", "3000", "--size", "1M"}, []string{"--size 1 MiB is not a whole number of --bs 3000 blocks"}},
		{[]string{"bench", "fio", dev, "--preset", "seq128k", "--bs", "3000"}, []string{"--size 256 MiB is not a whole number of --bs 3000 blocks"}},
		// 5. The rest of the same.
		{[]string{"debug", "crash-writer", dev, "--files", "-1"}, []string{"--files", "-1"}},
		{[]string{"debug", "crash-writer", dev, "--files", "0"}, []string{"--files 0: want at least 1"}},
		{[]string{"debug", "crash-writer", dev, "--blocks", "0"}, []string{"--blocks 0: want at least 1"}},
		{[]string{"debug", "crash-writer", dev, "--sync-every", "0"}, []string{"--sync-every 0: want at least 1"}},
		{[]string{"debug", "crash-writer", dev, "--ops", "-5"}, []string{"--ops", "-5"}},
		{[]string{"bench", "fio", dev, "--rounds", "0"}, []string{"--rounds 0: want at least 1"}},
		// fio's side syncs after every loop, the in-process side once
		// (h45d: --loops goes to fio's job too).
		{[]string{"bench", "fio", dev, "--loops", "2", "--preset", "4x1m"}, []string{"--loops 2 with --end-fsync", "--end-fsync=false"}},
		// An empty argument or --socket: get wrote its temporary and
		// failed to rename it to "", put opened "", and an empty
		// --socket was refused only as "connect to daemon: empty socket
		// path", exit 1.
		{[]string{"get", "a", "", "--socket", filepath.Join(dir, "none.sock")}, []string{"get: LOCAL is empty"}},
		{[]string{"put", "", "a", "--socket", filepath.Join(dir, "none.sock")}, []string{"put: LOCAL is empty"}},
		{[]string{"rm", "a", "", "--socket", filepath.Join(dir, "none.sock")}, []string{"rm: NAME is empty"}},
		{[]string{"ls", "--socket", ""}, []string{`invalid argument "" for "--socket"`, "no socket"}},
		{[]string{"serve", dev, "--socket", ""}, []string{`invalid argument "" for "--socket"`}},
		{[]string{"bench", "kernel", ""}, []string{"bench kernel: DIR is empty"}},
		{[]string{"bench", "kernel", dir, "--jobs", ""}, []string{`invalid argument "" for "--jobs"`, "names no directory"}},
		{[]string{"bench", "gc", "--out", ""}, []string{`invalid argument "" for "--out"`, "names no folder"}},
		{[]string{"bench", "lsm", "--out", ""}, []string{`invalid argument "" for "--out"`}},
		{[]string{"bench", "peers", "/dev/nullb9", "--out", ""}, []string{`invalid argument "" for "--out"`}},
		{[]string{"bench", "batching", "--dir", ""}, []string{`invalid argument "" for "--dir"`}},
		// --gc-high alone at or below --gc-low's default was moved to
		// two above it.
		{[]string{"bench", "run", dev, "--gc-high", "3"}, []string{"--gc-high 3 must be above --gc-low", "4 unless given"}},
		{[]string{"serve", dev, "--socket", filepath.Join(dir, "s"), "--gc-high", "4"}, []string{"--gc-high 4 must be above --gc-low"}},
		{[]string{"serve", dev, "--socket", filepath.Join(dir, "s"), "--metrics", "nonsense"}, []string{`"nonsense" for "--metrics"`, "want HOST:PORT or :PORT"}},
		{[]string{"serve", dev, "--socket", filepath.Join(dir, "s"), "--metrics", "127.0.0.1:99999"}, []string{`"127.0.0.1:99999" for "--metrics"`, "invalid port"}},
	} {
		r := runBinary(t, c.args...)
		ok := r.status == 2
		for _, w := range c.want {
			ok = ok && strings.Contains(r.stderr, w)
		}
		if !ok {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", c.args, r.status, r.stderr, c.want)
			continue
		}
		checkErrorLine(t, c.args, r.stderr)
		if _, err := os.Lstat(path); !os.IsNotExist(err) {
			t.Fatalf("%q was refused, yet left the emu file (%v)", c.args, err)
		}
	}
}

// TestH44dWhatTheUserMeantStillRuns: the refusals above are no more
// than they must be. A device string that is well formed but names what
// cannot be opened stays a failure (exit 1; fsck's 8); the default --readahead
// under a small --cache (lowered to a thirty-second of it, as its help
// says) and the largest --readahead it takes run; a --scale that leaves
// no whole number of blocks rounds down, as its help says; --zones at
// zonefold's minimum formats.
func TestH44dWhatTheUserMeantStillRuns(t *testing.T) {
	dir := t.TempDir()
	dev := "emu:" + filepath.Join(dir, "dev") + "?zone_size=1M&zones=16"
	for _, c := range []struct {
		args   []string
		status int
		want   string
	}{
		{[]string{"format", "emu:" + dir + "?zone_size=1M&zones=16"}, 1, "is a directory"},
		{[]string{"format", filepath.Join(dir, "missing")}, 1, "no such file or directory"},
		// A --socket that names something other than a socket said
		// "no zonefold daemon is serving DIR (connection refused);
		// start one with 'zonefold serve DEVICE --socket DIR'", which
		// serve refuses.
		{[]string{"ls", "--socket", dir}, 1, dir + " is a directory, not a socket"},
		{[]string{"fsck", "emu:" + filepath.Join(dir, "missing")}, exitNotChecked, ""}, // fsck's own status: fsckStatus
		{[]string{"format", dev, "--zones", "6"}, 0, "6 of 16 zones"},
		{[]string{"format", "emu:" + filepath.Join(dir, "small") + "?zone_size=64K&zones=64", "--zones", "10"}, 0, "10 of 64 zones"},
		{[]string{"bench", "run", dev, "--force", "--size", "1M", "--cache", "64M"}, 0, "MiB/s"},
		{[]string{"bench", "run", dev, "--force", "--size", "1M", "--cache", "64M", "--readahead", "2M", "--rw", "read"}, 0, "MiB/s"},
		{[]string{"bench", "run", dev, "--force", "--size", "1M", "--bs", "3000", "--scale", "0.5"}, 0, "MiB/s"},
		{[]string{"bench", "run", dev, "--force", "--size", "3000000", "--bs", "3000"}, 0, "MiB/s"},
		{[]string{"bench", "run", dev, "--force", "--size", "1M", "--gc-high", "5"}, 0, "MiB/s"},
		{[]string{"bench", "run", dev, "--force", "--size", "1M", "--gc-high", "3", "--gc-low", "2"}, 0, "MiB/s"},
	} {
		r := runBinary(t, c.args...)
		if r.status != c.status || !strings.Contains(r.stdout+r.stderr, c.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d and %q", c.args, r.status, r.stdout, r.stderr, c.status, c.want)
		}
	}
}
