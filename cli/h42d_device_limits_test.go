package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFlagsAboveTheDeviceAreUsageErrors: --gc-low and --gc-high above
// the device's data zones were taken silently (free zones never exceed
// the data zones, so GC never stopped, or ran from the first write), and
// --open-zones above what the device allows beside GC's and metadata's
// zones exited 1 with "engine: 99 open zones asked for ...", a failure,
// where a bad flag value is a usage error: exit 2, the flag named, and
// the most the device takes. Refused before the device is touched: the
// device keeps its file, and an emu file the command would have created
// is not left behind.
func TestFlagsAboveTheDeviceAreUsageErrors(t *testing.T) {
	dir := t.TempDir()
	// 32 zones of 4 MiB, 2 of them metadata: 30 data zones; 8 open, of
	// which zonefold keeps 2 (one GC stream, metadata): 6 for data.
	device := fmt.Sprintf("emu:%s?zone_size=4M&zones=32&max_open=8", filepath.Join(dir, "dev"))
	sock := filepath.Join(dir, "zf.sock")
	kept := deviceWithAFile(t, device, sock)
	for i, c := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--gc-low", "31"}, "--gc-low 31: the device has 30 data zones"},
		{[]string{"--gc-high", "1000"}, "--gc-high 1000: the device has 30 data zones"},
		{[]string{"--gc-low", "10", "--gc-high", "31"}, "--gc-high 31: the device has 30 data zones"},
		{[]string{"--open-zones", "7"}, "--open-zones 7: the device allows 8 open zones"},
		{[]string{"--open-zones", "99"}, "want at most 6"},
	} {
		for _, cmd := range [][]string{
			{"serve", device, "--socket", sock},
			{"serve", device, "--socket", sock, "--format", "--force"},
			{"bench", "run", device, "--force", "--size", "1M"},
		} {
			args := append(append([]string(nil), cmd...), c.flags...)
			r := runBinary(t, args...)
			if r.status != 2 || !strings.Contains(r.stderr, c.want) {
				t.Errorf("%s: exit %d, stderr %q; want 2 and %q", strings.Join(args, " "), r.status, r.stderr, c.want)
				continue
			}
			checkErrorLine(t, args, r.stderr)
		}
		// An emu file that was not there stays not there.
		fresh := filepath.Join(dir, fmt.Sprintf("fresh%d", i))
		args := append([]string{"bench", "run", "emu:" + fresh + "?zone_size=4M&zones=32&max_open=8", "--size", "1M"}, c.flags...)
		if r := runBinary(t, args...); r.status != 2 {
			t.Errorf("%s: exit %d, stderr %q; want 2", strings.Join(args, " "), r.status, r.stderr)
		}
		if _, err := os.Lstat(fresh); !os.IsNotExist(err) {
			t.Errorf("%s failed, yet left the emu file it created (%v)", strings.Join(args, " "), err)
		}
	}
	checkDeviceKeptFile(t, device, sock, kept, "serve and bench run with settings above the device")
	// At the limits they are taken.
	limits := fmt.Sprintf("emu:%s?zone_size=4M&zones=32&max_open=8", filepath.Join(dir, "limits"))
	zonefold(t, "bench", "run", limits, "--size", "1M", "--gc-low", "29", "--gc-high", "30", "--open-zones", "6")
}

// The flags' help says the bound the device puts on them, which a value
// past it is now refused for.
func TestDeviceBoundFlagsHelpSaysTheBound(t *testing.T) {
	for _, cmd := range [][]string{{"serve"}, {"bench", "run"}, {"bench", "fio"}} {
		help := strings.Join(strings.Fields(runBinary(t, append(cmd, "--help")...).stdout), " ")
		for _, want := range []string{
			"--gc-low count start GC below this many free zones (0: default; at most the device's data zones)",
			"--gc-high count stop GC at this many free zones, above --gc-low (0: default, two above it; at most the device's data zones)",
			"--open-zones count data zones open at once (0: from the device's limits; at most its open limit less the zones GC and metadata keep)",
		} {
			if !strings.Contains(help, want) {
				t.Errorf("%s --help lacks %q", strings.Join(cmd, " "), want)
			}
		}
	}
}
