package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/zonefold/zonefold/bench"
	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/internal/report"
)

// TestReadVerifyCost measures what checking data checksums costs the read
// workloads of bench run (sequential 128 KiB reads, random 4 KiB reads at
// depth 4), with a folio cache much smaller than the data so that reads
// fill it: rounds alternate checking on and off, each on a freshly opened
// engine (cold caches), and the ratio of the medians is printed with the
// spread. A measurement, not a check: ZONEFOLD_VERIFY_COST=1 runs it.
//
//	ZONEFOLD_VERIFY_COST=1 go test -ldflags=-checklinkname=0 -run TestReadVerifyCost -v -count=1 ./engine/
func TestReadVerifyCost(t *testing.T) {
	if os.Getenv("ZONEFOLD_VERIFY_COST") == "" {
		t.Skip("ZONEFOLD_VERIFY_COST=1 runs it")
	}
	rounds := 9
	dev := fmt.Sprintf("emu:%s?zone_size=4M&zones=96", filepath.Join(t.TempDir(), "dev"))
	base := engine.Config{CacheBytes: 32 << 20}
	e, release, err := bench.OpenFormatted(dev, base)
	if err != nil {
		t.Fatal(err)
	}
	layout := []bench.Workload{
		{Files: 1, BS: 128 << 10, IODepth: 1, Size: 128 << 20, RW: "read", Prefix: "seq"},
		{Files: 4, BS: 4 << 10, IODepth: 4, Size: 32 << 20, RW: "read", Prefix: "rand", Ops: 1},
	}
	for _, w := range layout { // lays the files out
		if _, err := bench.RunWorkload(context.Background(), e, w); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	release()
	cases := []struct {
		name     string
		w        bench.Workload
		sumCache int64 // sum cache bytes; 0: the default
	}{
		{"read bs=128k", bench.Workload{Files: 1, BS: 128 << 10, IODepth: 1, Size: 128 << 20, RW: "read", Prefix: "seq"}, 0},
		{"randread bs=4k qd4x4", bench.Workload{Files: 4, BS: 4 << 10, IODepth: 4, Size: 32 << 20, RW: "randread", Prefix: "rand", Ops: 8192, Seed: 7}, 0},
		// The worst case: a sum cache of one set, so that nearly every
		// fill also reads its record's header.
		{"randread bs=4k qd4x4, no sum cache", bench.Workload{Files: 4, BS: 4 << 10, IODepth: 4, Size: 32 << 20, RW: "randread", Prefix: "rand", Ops: 8192, Seed: 7}, 1},
	}
	for _, c := range cases {
		// Throughput, and CPU time (user and system, the whole process)
		// per MiB read: on a shared machine the second is the steadier.
		var rate, cpu [2][]float64 // [checked, unchecked]
		var sumReads int64
		for r := range 2 * rounds {
			k := r % 2
			cfg := base
			cfg.NoReadVerify = k == 1
			cfg.SumCacheBytes = c.sumCache
			e, err := engine.Open(dev, cfg)
			if err != nil {
				t.Fatal(err)
			}
			cpu0 := report.ProcessCPU()
			res, err := bench.RunWorkload(context.Background(), e, c.w)
			used := report.ProcessCPU() - cpu0
			if cerr := e.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Stats.Cache.Misses == 0 {
				t.Fatalf("%s: no cache fills", c.name)
			}
			rate[k] = append(rate[k], res.MiBps())
			cpu[k] = append(cpu[k], used.Seconds()*1e6/(float64(res.Bytes)/(1<<20)))
			if k == 0 {
				sumReads += res.Stats.SumReads
			}
		}
		t.Logf("%s: %d header reads per checked round", c.name, sumReads/int64(rounds))
		t.Logf("  MiB/s        checked %7.1f (%.1f..%.1f), unchecked %7.1f (%.1f..%.1f): ratio of medians %.3f",
			report.Median(rate[0]), slices.Min(rate[0]), slices.Max(rate[0]), report.Median(rate[1]), slices.Min(rate[1]), slices.Max(rate[1]), report.Median(rate[0])/report.Median(rate[1]))
		t.Logf("  CPU us/MiB   checked %7.1f (%.1f..%.1f), unchecked %7.1f (%.1f..%.1f): ratio of medians %.3f",
			report.Median(cpu[0]), slices.Min(cpu[0]), slices.Max(cpu[0]), report.Median(cpu[1]), slices.Min(cpu[1]), slices.Max(cpu[1]), report.Median(cpu[0])/report.Median(cpu[1]))
	}
}
