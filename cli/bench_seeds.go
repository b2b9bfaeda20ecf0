package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/uring"
	"github.com/zonefold/zonefold/zns"
)

type seedsOpts struct {
	quick bool
	json  bool
}

func newBenchSeedsCmd() *cobra.Command {
	var o seedsOpts
	cmd := &cobra.Command{
		Use:   "seeds",
		Short: "Each kernel series' comparison, one run each, against the ratio the series reported",
		Long: `Reproduces the comparison behind each of the five kernel ideas zonefold is
built on, once each, and prints one table: the idea, the ratio the kernel
series reported, the ratio zonefold measured here, and whether it meets it.

  bcachefs folio order hint   bench folios' large-folio comparison: seq 128 KiB
                              buffered writes through the cache, max order 9 vs
                              0, writeback as NOPs (no data I/O, so the
                              series' "without data io" figure, 1.5x, is the bar)
  iomap one-lock state update bench folios' state-lock comparison: 1 KiB writes,
                              uptodate+dirty in one critical section vs two
  iomap large folios in       4 files x 1 MiB writes, end fsync, through the
  writeback                   engine on a null: device, max order 9 vs 0. The
                              series reported ~8000 MiB/s, not a ratio: the bar
                              is "large folios are not slower" (1x)
  xfs per-file zone affinity  bench gc with mru/greedy and none/greedy, 16 files,
                              8 KiB random overwrites, one device capacity:
                              throughput ratio (bar 1.11x) and WAF ratio
                              (none / mru; the series reported less write
                              amplification without a figure: bar 1x)
  aio batching                bench batching's file target: 4 KiB O_DIRECT
                              writes at QD128, plugged vs unplugged (bar 2x)

The default run takes about a minute; --quick runs each comparison for a
moment (for tests: its ratios are noise).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBenchSeeds(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.quick, "quick", false, "run each comparison for a moment (a smoke test, not a measurement)")
	f.BoolVar(&o.json, "json", false, "print the table as JSON")
	return cmd
}

// seedRow is one comparison against its kernel series.
type seedRow struct {
	Idea     string  `json:"idea"`
	Workload string  `json:"workload"`
	Kernel   string  `json:"kernel"`       // what the series reported
	Bar      float64 `json:"kernel_ratio"` // the ratio zonefold must reach
	Measured float64 `json:"measured_ratio"`
	Meets    bool    `json:"meets"`
	Detail   string  `json:"detail"` // the two sides measured
}

func newSeedRow(idea, workload, kernel string, bar, measured float64, detail string) seedRow {
	return seedRow{Idea: idea, Workload: workload, Kernel: kernel, Bar: bar, Measured: measured,
		Meets: measured >= bar, Detail: detail}
}

func runBenchSeeds(ctx context.Context, stdout, stderr io.Writer, o seedsOpts) error {
	step := func(name string) {
		if !o.json && isTerminal(stderr) {
			fmt.Fprintf(stderr, "seeds: %s...\n", name)
		}
	}
	var rows []seedRow

	step("folios")
	fo := foliosOpts{duration: 2 * time.Second, rounds: 8, cacheSize: 256 << 20, writeSize: 128 << 10,
		smallSize: 1024, smallFile: 4 << 20, blockSize: 1024, maxIO: 1 << 20}
	if o.quick {
		fo.duration, fo.rounds, fo.cacheSize, fo.smallFile = 60*time.Millisecond, 2, 8<<20, 256<<10
	}
	ring, err := uring.New(uring.Options{Entries: 256})
	if err != nil {
		return err
	}
	large, small, err := benchLargeFolios(ctx, ring, fo)
	ring.Close()
	if err != nil {
		return fmt.Errorf("folio order hint: %w", err)
	}
	rows = append(rows, newSeedRow("bcachefs folio order hint", "seq 128k buffered, no data io, order 9 vs 0",
		"1.25x (1.5x without data io)", 1.5, ratio(large, small),
		fmt.Sprintf("%.0f vs %.0f MB/s", large.mbps(), small.mbps())))
	one, split, err := benchStateLock(ctx, fo)
	if err != nil {
		return fmt.Errorf("state lock: %w", err)
	}
	rows = append(rows, newSeedRow("iomap one-lock state update", "1k overwrites, one lock vs two",
		"+8% (1.08x)", 1.08, ratio(one, split),
		fmt.Sprintf("%.0f vs %.0f MB/s", one.mbps(), split.mbps())))

	step("large folios in writeback")
	row, err := seedWriteback(ctx, o.quick)
	if err != nil {
		return fmt.Errorf("large folios in writeback: %w", err)
	}
	rows = append(rows, row)

	step("zone affinity")
	affinity, err := seedAffinity(ctx, stderr, o.quick)
	if err != nil {
		return fmt.Errorf("zone affinity: %w", err)
	}
	rows = append(rows, affinity...)

	step("batching")
	dir, err := os.MkdirTemp("", "zonefold-seeds-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bo := batchingOpts{qd: 128, bs: 4096, duration: 2 * time.Second, rounds: 8, dir: dir, fileSize: 64 << 20}
	if o.quick {
		bo.duration, bo.rounds, bo.qd, bo.fileSize = 40*time.Millisecond, 2, 16, 1<<20
	}
	_, file, direct, err := measureBatching(bo)
	if err != nil {
		return fmt.Errorf("batching: %w", err)
	}
	mode := "O_DIRECT"
	if !direct {
		mode = "buffered: no O_DIRECT here"
	}
	rows = append(rows, newSeedRow("aio batching", fmt.Sprintf("4k writes QD%d (%s), plugged vs not", bo.qd, mode),
		"2x", 2, file.ratio(),
		fmt.Sprintf("%.0f vs %.0f IOPS", file.Plugged.IOPS(), file.Unplugged.IOPS())))

	if o.json {
		return writeJSON(stdout, struct {
			Quick bool      `json:"quick"`
			Seeds []seedRow `json:"seeds"`
		}{o.quick, rows})
	}
	return printSeeds(stdout, o, rows)
}

// seedWriteback writes 4 files of 1 MiB writes with an fsync at the end
// through the engine on a null: device, with large folios and with 4 KiB
// ones, alternating fresh engines round by round.
func seedWriteback(ctx context.Context, quick bool) (seedRow, error) {
	rounds, size := 4, int64(64<<20)
	if quick {
		rounds, size = 1, 8<<20
	}
	w := engine.Workload{Files: 4, BS: 1 << 20, IODepth: 1, Size: size, RW: "write", EndFsync: true, Seed: 1}
	var sides [2]struct{ bytes, nanos int64 }
	for r := range rounds {
		for j := range 2 {
			side := (r + j) % 2 // alternate which goes first
			cfg := engine.Config{MaxOrder: 9}
			if side == 1 {
				cfg.MaxOrder = -1 // order 0: 4 KiB folios
			}
			dev, err := zns.Open("null:?size=4G&zone_size=256M", zns.Options{})
			if err != nil {
				return seedRow{}, err
			}
			e, err := engine.FormatAndOpen(dev, cfg)
			if err != nil {
				dev.Close()
				return seedRow{}, err
			}
			res, err := engine.RunWorkload(ctx, e, w)
			if cerr := e.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return seedRow{}, err
			}
			sides[side].bytes += res.Bytes
			sides[side].nanos += int64(res.Elapsed)
		}
	}
	mibps := func(i int) float64 {
		if sides[i].nanos == 0 {
			return 0
		}
		return float64(sides[i].bytes) / (1 << 20) / time.Duration(sides[i].nanos).Seconds()
	}
	r := 0.0
	if mibps(1) > 0 {
		r = mibps(0) / mibps(1)
	}
	return newSeedRow("iomap large folios in writeback", "4 files x 1M, end fsync, null:, order 9 vs 0",
		"~8000 MiB/s (no ratio; bar: not slower, 1x)", 1, r,
		fmt.Sprintf("%.0f vs %.0f MiB/s", mibps(0), mibps(1))), nil
}

// seedAffinity runs bench gc's mru and none under greedy GC for one
// device capacity of overwrites.
func seedAffinity(ctx context.Context, stderr io.Writer, quick bool) ([]seedRow, error) {
	o := gcBenchOpts{files: 16, bs: "8K", iodepth: 4, util: 0.8, passes: 1, cache: "16M", seed: 1,
		sample: 250 * time.Millisecond, configs: []string{"mru/greedy", "none/greedy"}, json: true}
	device := ""
	if quick {
		dir, err := os.MkdirTemp("", "zonefold-seeds-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		device = "emu:" + filepath.Join(dir, "dev") + "?zone_size=256K&zones=48&max_open=6&max_active=6"
		o.files, o.util, o.passes, o.cache, o.sample = 4, 0.7, 0.5, "2M", 20*time.Millisecond
	}
	sum, _, err := measureGC(ctx, stderr, device, o)
	if err != nil {
		return nil, err
	}
	mru, none := sum.Configs[0], sum.Configs[1]
	var tput, waf float64
	if mru.MBpsRatio != nil {
		tput = *mru.MBpsRatio
	}
	if mru.WAF > 0 {
		waf = none.WAF / mru.WAF
	}
	return []seedRow{
		newSeedRow("xfs per-file zone affinity", fmt.Sprintf("%d files 8k random, mru vs none: throughput", sum.Files),
			"+11% (1.11x)", 1.11, tput, fmt.Sprintf("%.0f vs %.0f MB/s", mru.HostMBps, none.HostMBps)),
		newSeedRow("xfs per-file zone affinity", fmt.Sprintf("%d files 8k random, mru vs none: WAF none/mru", sum.Files),
			"lower WAF (no figure; bar 1x)", 1, waf, fmt.Sprintf("WAF %.3f vs %.3f", mru.WAF, none.WAF)),
	}, nil
}

func printSeeds(out io.Writer, o seedsOpts, rows []seedRow) error {
	if o.quick {
		fmt.Fprintln(out, "seeds (--quick: a smoke test; the ratios are noise)")
	} else {
		fmt.Fprintln(out, "seeds: each kernel series' comparison, one run each")
	}
	fmt.Fprintln(out)
	tw := newTable(out)
	fmt.Fprintln(tw, "idea\tworkload\tkernel\tzonefold\tmeets\tmeasured\t")
	for _, r := range rows {
		meets := "yes"
		if !r.Meets {
			meets = "NO"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2fx\t%s\t%s\t\n", r.Idea, r.Workload, r.Kernel, r.Measured, meets, r.Detail)
	}
	return tw.Flush()
}
