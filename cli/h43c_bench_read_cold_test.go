package cli

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchReadRunReadsTheDevice: bench run --rw read lays its files out
// (untimed) through the cache and then timed reads of them that the
// cache served whole where the files fit it (the default 256 MiB cache
// against 64 MiB files): 0 B read from the device, the cache's speed
// printed as the run's. A user timing device reads expects what fio's
// direct=1 or drop_caches give, so the cache is now written back and
// emptied before the timed reads, and the output says so; --warm-cache
// keeps the old run, and is refused on a write run, which lays nothing
// out.
func TestBenchReadRunReadsTheDevice(t *testing.T) {
	dev := "emu:" + filepath.Join(t.TempDir(), "dev") + "?zone_size=1M&zones=64"
	out := zonefold(t, "bench", "run", dev, "--rw", "read", "--size", "8M")
	if want := "cache emptied before the timed reads (as drop_caches; --warm-cache keeps it); read from the device: "; !strings.Contains(out, want) {
		t.Errorf("a read run does not say it emptied the cache (%q):\n%s", want, out)
	}
	var js struct {
		DevReadBytes int64 `json:"dev_read_bytes"`
		CacheEmptied bool  `json:"cache_emptied"`
	}
	got := zonefold(t, "bench", "run", dev, "--force", "--rw", "read", "--size", "8M", "--json")
	if err := json.Unmarshal([]byte(got), &js); err != nil {
		t.Fatal(err)
	}
	// A sequential read of the whole file: every byte from the device
	// (readahead may read a little past the end).
	if js.DevReadBytes < 8<<20 || !js.CacheEmptied {
		t.Errorf("a read run of 8 MiB through a 256 MiB cache: dev_read_bytes %d, cache_emptied %v; want all 8 MiB from the device", js.DevReadBytes, js.CacheEmptied)
	}
	got = zonefold(t, "bench", "run", dev, "--force", "--rw", "read", "--size", "8M", "--json", "--warm-cache")
	js.CacheEmptied = false
	if err := json.Unmarshal([]byte(got), &js); err != nil {
		t.Fatal(err)
	}
	if js.DevReadBytes != 0 || js.CacheEmptied {
		t.Errorf("--warm-cache: dev_read_bytes %d, cache_emptied %v; want the cache to serve every read", js.DevReadBytes, js.CacheEmptied)
	}
	args := []string{"bench", "run", dev, "--force", "--size", "1M", "--warm-cache"}
	if r := runBinary(t, args...); r.status != 2 || !strings.Contains(r.stderr, "--warm-cache: only a read run") {
		t.Errorf("%v: exit %d, stderr %q; want 2 and --warm-cache refused", args, r.status, r.stderr)
	}
}
