package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestH31dMaxSharedMemoryBelowOneRegionIsRefused: serve
// --max-shared-memory 1 (or anything below one page, the smallest region
// a client can be given) started and served, and every client that
// connected was refused with ENOMEM: a daemon no client could ever use.
// It is a usage error at start now, naming the minimum, before the device
// is touched.
func TestH31dMaxSharedMemoryBelowOneRegionIsRefused(t *testing.T) {
	page := os.Getpagesize()
	for _, n := range []string{"1", "100", "4095"} {
		if page != 4096 {
			t.Skipf("page size %d", page)
		}
		dir := t.TempDir()
		args := []string{"serve", "emu:" + filepath.Join(dir, "dev") + "?zone_size=1M&zones=8", "--format",
			"--socket", filepath.Join(dir, "zf.sock"), "--max-shared-memory", n}
		r := runBinary(t, args...)
		if r.status != 2 || !strings.Contains(r.stderr, "--max-shared-memory") || !strings.Contains(r.stderr, "4 KiB") {
			t.Errorf("%v: status %d, stderr %q; want 2, naming the minimum 4 KiB", args, r.status, r.stderr)
			continue
		}
		checkErrorLine(t, args, r.stderr)
		if exists(filepath.Join(dir, "dev")) {
			t.Errorf("%v: refused but made the emu file", args)
		}
	}
}
