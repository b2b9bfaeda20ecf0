package cli

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestCacheOutOfRangeIsAUsageError: --cache 9T (or 8T, a page above the
// cache's largest, or 1K, below a page) exited 1 with the engine's
// "engine: cache: size 9 TiB: want 4 KiB to 8 TiB", a failure, where
// every other flag value out of range is a usage error: exit 2, the flag
// named. 8T was refused with "want 4 KiB to 8 TiB", which reads as if
// 8 TiB were taken. A bench's own --cache (bench gc), which only the
// engine checks, is a usage error too. Refused before the device is
// touched: it keeps its file.
func TestCacheOutOfRangeIsAUsageError(t *testing.T) {
	dir := t.TempDir()
	device := fmt.Sprintf("emu:%s?zone_size=4M&zones=32&max_open=8", filepath.Join(dir, "dev"))
	sock := filepath.Join(dir, "zf.sock")
	kept := deviceWithAFile(t, device, sock)
	for _, size := range []string{"9T", "8T", "1K"} {
		want := "--cache " + size + ": want at least 4 KiB and less than 8 TiB"
		for _, args := range [][]string{
			{"serve", device, "--socket", sock, "--cache", size},
			{"serve", device, "--socket", sock, "--format", "--force", "--cache", size},
			{"bench", "run", device, "--force", "--size", "1M", "--cache", size},
		} {
			r := runBinary(t, args...)
			if r.status != 2 || !strings.Contains(r.stderr, want) {
				t.Errorf("%s: exit %d, stderr %q; want 2 and %q", strings.Join(args, " "), r.status, r.stderr, want)
				continue
			}
			checkErrorLine(t, args, r.stderr)
		}
	}
	args := []string{"bench", "gc", "--workload", "uniform", "--cache", "9T", "--out", filepath.Join(dir, "gc")}
	if r := runBinary(t, args...); r.status != 2 || !strings.Contains(r.stderr, "9 TiB: want at least 4 KiB and less than 8 TiB") {
		t.Errorf("%s: exit %d, stderr %q; want 2 and the size refused", strings.Join(args, " "), r.status, r.stderr)
	}
	checkDeviceKeptFile(t, device, sock, kept, "serve and bench run with --cache out of range")
}
