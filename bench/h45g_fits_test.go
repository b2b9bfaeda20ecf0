package bench

import (
	"runtime"
	"testing"
)

// TestH45gRandwriteReplayOfAHugeFileTakesLittleMemory: counting the
// blocks a randwrite's draws hit took a bitmap of the whole file before
// a draw was made: --size 1P on a 14 MiB emu device ended bench run with
// "fatal error: runtime: out of memory" (32 GiB), where the refusal
// needs the first 3073 draws. Here --size 64T (a 2 GiB bitmap): the
// count still finds the files do not fit, within a bounded allocation.
func TestH45gRandwriteReplayOfAHugeFileTakesLittleMemory(t *testing.T) {
	w := Workload{Files: 1, BS: 4096, IODepth: 4, Size: 64 << 40, RW: "randwrite", Seed: 1}
	const limit = 3072 // a 12 MiB room
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	n, _ := w.blocksHeld(limit)
	runtime.ReadMemStats(&after)
	if n <= limit {
		t.Errorf("64 TiB of random writes: %d blocks held, want more than %d", n, limit)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 2*maxReplayBytesForTest {
		t.Errorf("counting the draws of 64 TiB against a 12 MiB room allocated %d MiB", got>>20)
	}
}

// maxReplayBytesForTest is what the test lets the replay allocate.
const maxReplayBytesForTest = 64 << 20
