package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchRunRefusesAWorkloadLargerThanTheDevice: bench run --size 1T on
// a device of a few MiB formatted it, wrote until it was full and then
// failed with the engine's admission internals ("write needing 135168
// bytes of the device: no zone's reclaim frees 32768 bytes or more
// (capacity ...): no space left on device"). A workload whose files
// cannot fit the device's data zones is refused at once, in the
// workload's terms.
func TestBenchRunRefusesAWorkloadLargerThanTheDevice(t *testing.T) {
	dev := "emu:" + filepath.Join(t.TempDir(), "dev") + "?zone_size=1M&zones=16"
	args := []string{"bench", "run", dev, "--files", "2", "--size", "1T"}
	r := runBinary(t, args...)
	if r.status != 2 || !strings.Contains(r.stderr, "2 files x 1 TiB") || !strings.Contains(r.stderr, "--size") {
		t.Fatalf("%v: %+v; want status 2 (a usage error) and the workload's size against the device's", args, r)
	}
	checkErrorLine(t, args, r.stderr)
}
