package bench

import (
	"runtime"
	"strings"
	"testing"

	"github.com/zonefold/zonefold/engine"
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
	if got := after.TotalAlloc - before.TotalAlloc; got > maxReplayBytesForTest {
		t.Errorf("counting the draws of 64 TiB against a 12 MiB room allocated %d MiB", got>>20)
	}
}

// maxReplayBytesForTest is what the test lets the replay allocate.
const maxReplayBytesForTest = 64 << 20

// TestH45gFioNullDeviceTakesLoopsThatRewriteWholeZones: bench fio's
// in-process round refused a workload whose writes over all --loops
// passed a null: device's capacity, though overwrites that rewrite whole
// zones leave GC nothing to read back: 8 loops of a 16 MiB file on a
// 64 MiB null device run in bench run, and (since --loops reaches fio's
// jobs) bench fio refused them. One pass over more than the device
// holds is still refused.
func TestH45gFioNullDeviceTakesLoopsThatRewriteWholeZones(t *testing.T) {
	cfg := engine.Config{CacheBytes: 8 << 20}
	w := Workload{Files: 1, BS: 64 << 10, IODepth: 1, Size: 16 << 20, RW: "write", Loops: 8}
	if r, err := inProcessRound(t.Context(), "null:?size=64M&zone_size=4M", cfg, w); err != nil || r.Bytes != 128<<20 {
		t.Errorf("8 loops of 16 MiB on a 64 MiB null device: %d bytes, %v; want it to run", r.Bytes, err)
	}
	w.Files, w.RW, w.Loops = 4, "randwrite", 1
	if _, err := inProcessRound(t.Context(), "null:?size=64M&zone_size=4M", cfg, w); err == nil || !strings.Contains(err.Error(), "null:") {
		t.Errorf("64 MiB of random writes on a 64 MiB null device: %v; want a refusal", err)
	}
}

// TestH45gReplayMatchesTheRunWithEveryKnob: randwrite's replay counts
// the blocks the run leaves live with several files, several workers
// per file, two loops and a --bs that is not a whole number of blocks
// (so one write may touch three blocks): a replay that diverged from
// RunWorkload's draws would refuse workloads that run.
func TestH45gReplayMatchesTheRunWithEveryKnob(t *testing.T) {
	e, room := h45dDevice(t)
	w := Workload{Files: 3, BS: 6000, IODepth: 5, Size: 4<<20 + 1000, RW: "randwrite", Loops: 2, Seed: 3}
	held, _ := w.blocksHeld(room / engine.BlockSize)
	if fileBlocks := (w.Size + engine.BlockSize - 1) / engine.BlockSize; held >= int64(w.Files)*fileBlocks || held*engine.BlockSize > room {
		t.Fatalf("%d blocks held of %d: the test wants draws that miss some blocks and fit the room", held, int64(w.Files)*fileBlocks)
	}
	if _, err := RunWorkload(t.Context(), e, w); err != nil {
		t.Fatal(err)
	}
	if live := room - e.Available(); live != held*engine.BlockSize {
		t.Errorf("the run left %d bytes live; the replay counted %d", live, held*engine.BlockSize)
	}
}
