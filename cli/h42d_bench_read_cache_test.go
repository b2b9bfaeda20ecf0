package cli

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// bench run --rw read lays its files out (untimed) through the cache and
// then reads them: with files that fit the cache (the default 256 MiB
// against 64 MiB) every read was a cache hit, and the run printed
// 14 GiB/s as if the device had been read. It now says how much came
// from the device (dev_read_bytes in --json).
func TestBenchReadRunSaysWhatCameFromTheDevice(t *testing.T) {
	dev := "emu:" + filepath.Join(t.TempDir(), "dev") + "?zone_size=1M&zones=64"
	// --warm-cache: bench run now empties the cache before the timed
	// reads unless told to keep it (TestBenchReadRunReadsTheDevice).
	out := zonefold(t, "bench", "run", dev, "--rw", "read", "--size", "8M", "--warm-cache")
	if !strings.Contains(out, "read from the device: 0 B of 8 MiB (0%); the rest came from the cache, where the untimed layout left the files (--warm-cache)") {
		t.Errorf("a read run served by the cache does not say so:\n%s", out)
	}
	var js struct {
		DevReadBytes *int64 `json:"dev_read_bytes"`
	}
	got := zonefold(t, "bench", "run", dev, "--force", "--rw", "randread", "--size", "16M", "--cache", "4M", "--json")
	if err := json.Unmarshal([]byte(got), &js); err != nil {
		t.Fatal(err)
	}
	if js.DevReadBytes == nil || *js.DevReadBytes < 8<<20 {
		t.Errorf("a read run of 16 MiB through a 4 MiB cache: dev_read_bytes %v; want most of it", js.DevReadBytes)
	}
}
