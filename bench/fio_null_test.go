package bench

import (
	"strings"
	"testing"

	"github.com/zonefold/zonefold/engine"
)

// TestFioRoundRefusesMoreThanANullDeviceHolds: a workload that writes
// more than a null: device holds (it keeps no data, so GC cannot reclaim
// overwritten zones) is refused before it runs, saying so, instead of
// ending in the engine's ENOSPC after filling the device (bench fio
// --preset 16x8k on a 16G null device did, in round 1). One that fits
// runs.
func TestFioRoundRefusesMoreThanANullDeviceHolds(t *testing.T) {
	cfg := engine.Config{CacheBytes: 8 << 20}
	over := Workload{Files: 4, BS: 64 << 10, IODepth: 1, Size: 32 << 20, RW: "randwrite"}
	_, err := inProcessRound(t.Context(), "null:?size=64M&zone_size=4M", cfg, over)
	if err == nil || !strings.Contains(err.Error(), "null:") || !strings.Contains(err.Error(), "128 MiB") {
		t.Fatalf("128 MiB of writes on a 64 MiB null device: %v, want a refusal naming the null device and the bytes", err)
	}
	fits := over
	fits.Size = 4 << 20
	if r, err := inProcessRound(t.Context(), "null:?size=64M&zone_size=4M", cfg, fits); err != nil || r.Bytes != 16<<20 {
		t.Fatalf("16 MiB of writes on a 64 MiB null device: %d bytes, %v", r.Bytes, err)
	}
}
