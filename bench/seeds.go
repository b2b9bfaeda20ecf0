package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/zns"
)

// SeedsOptions configure bench seeds.
type SeedsOptions struct {
	Quick bool // each comparison for a moment: a smoke test, not a measurement
	JSON  bool
	// Check makes Seeds return an error, after printing, if a comparison
	// misses its bar.
	Check bool
	// Progress, if set, gets a line as each comparison starts.
	Progress io.Writer
	// AffinityDevice, if set, is the device the zone-affinity row runs
	// on (a zoned block device such as /dev/nullb0, formatted for each
	// run) instead of an emulated one in memory.
	AffinityDevice string
	// Force erases an AffinityDevice that holds data (see CheckErasable).
	Force bool
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

// Seeds reproduces the comparison behind each of the five kernel ideas
// zonefold is built on, once each, and prints one table: the idea, the
// ratio the kernel series reported, the ratio measured here, and whether
// it meets it.
func Seeds(ctx context.Context, stdout io.Writer, o SeedsOptions) error {
	// Before a minute of other comparisons, not at the affinity row.
	if err := CheckErasable(o.AffinityDevice, o.Force); err != nil {
		return err
	}
	step := func(name string) {
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "seeds: %s...\n", name)
		}
	}
	var rows []seedRow

	step("folios")
	fo := DefaultFolios
	if o.Quick {
		fo.Duration, fo.Rounds, fo.CacheSize, fo.SmallFile = 60*time.Millisecond, 2, 8<<20, 256<<10
	}
	large, small, err := benchLargeFolios(ctx, fo)
	if err != nil {
		return fmt.Errorf("folio order hint: %w", err)
	}
	rows = append(rows, newSeedRow("bcachefs folio order hint", "seq 128k buffered through the engine on null:, order 9 vs 0",
		"1.25x (1.5x without data io)", 1.5, ratio(large, small),
		fmt.Sprintf("%.0f vs %.0f MiB/s", large.mibps(), small.mibps())))
	one, split, err := benchStateLock(ctx, fo)
	if err != nil {
		return fmt.Errorf("state lock: %w", err)
	}
	rows = append(rows, newSeedRow("iomap one-lock state update", "1k overwrites, one lock vs two",
		"+8% (1.08x)", 1.08, ratio(one, split),
		fmt.Sprintf("%.0f vs %.0f MiB/s", one.mibps(), split.mibps())))

	step("large folios in writeback")
	row, err := seedWriteback(ctx, o.Quick)
	if err != nil {
		return fmt.Errorf("large folios in writeback: %w", err)
	}
	rows = append(rows, row)

	step("zone affinity")
	affinity, err := seedAffinity(ctx, o.Quick, o.AffinityDevice, o.Force)
	if err != nil {
		return fmt.Errorf("zone affinity: %w", err)
	}
	rows = append(rows, affinity)

	step("batching")
	dir, err := os.MkdirTemp("", "zonefold-seeds-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bo := BatchingOptions{QD: 128, BS: 4096, Duration: 2 * time.Second, Rounds: 8, Dir: dir, FileSize: 64 << 20}
	if o.Quick {
		bo.Duration, bo.Rounds, bo.QD, bo.FileSize = 40*time.Millisecond, 2, 16, 1<<20
	}
	_, file, direct, err := measureBatching(bo)
	if err != nil {
		return fmt.Errorf("batching: %w", err)
	}
	mode := "O_DIRECT"
	if !direct {
		mode = "buffered: no O_DIRECT here"
	}
	rows = append(rows, newSeedRow("aio batching", fmt.Sprintf("4k writes QD%d (%s), plugged vs not", bo.QD, mode),
		"2x", 2, file.ratio(),
		fmt.Sprintf("%.0f vs %.0f IOPS", file.Plugged.IOPS(), file.Unplugged.IOPS())))

	if o.JSON {
		err = WriteJSON(stdout, struct {
			Quick bool      `json:"quick"`
			Seeds []seedRow `json:"seeds"`
		}{o.Quick, rows})
	} else {
		err = printSeeds(stdout, o, rows)
	}
	if err != nil || !o.Check {
		return err
	}
	return checkSeeds(rows)
}

// checkSeeds is an error naming the comparisons that miss their bar.
func checkSeeds(rows []seedRow) error {
	var missed []string
	for _, r := range rows {
		if !r.Meets {
			missed = append(missed, fmt.Sprintf("%s (%.2fx, bar %.2fx)", r.Idea, r.Measured, r.Bar))
		}
	}
	if len(missed) == 0 {
		return nil
	}
	return fmt.Errorf("%d of %d comparisons miss their kernel series' bar: %s", len(missed), len(rows), strings.Join(missed, ", "))
}

// seedWriteback writes 4 files of 1 MiB writes with an fsync at the end
// through the engine on a null: device, with large folios and with 4 KiB
// ones, alternating fresh engines round by round.
func seedWriteback(ctx context.Context, quick bool) (seedRow, error) {
	rounds, size := 4, int64(64<<20)
	if quick {
		rounds, size = 1, 8<<20
	}
	w := Workload{Files: 4, BS: 1 << 20, IODepth: 1, Size: size, RW: "write", EndFsync: true, Seed: 1}
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
			res, err := RunWorkload(ctx, e, w)
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
	mibps := func(i int) float64 { return mibPerS(sides[i].bytes, time.Duration(sides[i].nanos)) }
	r := 0.0
	if mibps(1) > 0 {
		r = mibps(0) / mibps(1)
	}
	return newSeedRow("iomap large folios in writeback", "4 files x 1M, end fsync, null:, order 9 vs 0",
		"~8000 MiB/s (no ratio; bar: not slower, 1x)", 1, r,
		fmt.Sprintf("%.0f vs %.0f MiB/s", mibps(0), mibps(1))), nil
}

// seedAffinity runs bench gc's seed workload (the xfs series' shape) under
// mru/greedy and none/greedy on device ("": an emulated one): three
// alternating rounds, medians.
func seedAffinity(ctx context.Context, quick bool, device string, force bool) (seedRow, error) {
	o := DefaultGC
	o.Force = force
	o.Workloads, o.Configs, o.Out, o.Repeat = []string{WorkSeed}, []string{"mru/greedy", "none/greedy"}, "", 3
	on := "null:"
	if device != "" {
		on = device
	}
	if quick && device == "" {
		dir, err := os.MkdirTemp("", "zonefold-seeds-")
		if err != nil {
			return seedRow{}, err
		}
		defer os.RemoveAll(dir)
		device = "emu:" + filepath.Join(dir, "dev") + "?zone_size=256K&zones=48&max_open=7&max_active=7"
		o.Files, o.CacheBytes, o.Repeat = 4, 2<<20, 1
		on = "small emu device (--quick)"
	}
	sum, err := measureGC(ctx, device, o)
	if err != nil {
		return seedRow{}, err
	}
	ws := sum.workloads[0]
	return seedAffinityRow(o.Files, on, o.Repeat, ws.Rows[0], ws.Rows[1]), nil
}

// seedAffinityRow is the zone-affinity row of mru's and none's results.
func seedAffinityRow(files int, on string, repeat int, mru, none *gcRow) seedRow {
	var tput float64
	if mru.MiBpsRatio != nil {
		tput = *mru.MiBpsRatio
	}
	row := newSeedRow("xfs per-file zone affinity", fmt.Sprintf("bench gc seed: %d files 8k random, iodepth 4, mru vs none, %s", files, on),
		"+11% (1.11x)", seedThroughputTarget, tput, fmt.Sprintf("%.0f vs %.0f MiB/s, medians of %d", mru.HostMiBps, none.HostMiBps, repeat))
	if mru.MiBpsMin <= none.MiBpsMax {
		// As bench gc's verdict: it meets only where every mru round
		// beat every none round, and rounds that overlap show no
		// difference.
		row.Meets = false
		if roundsOverlap(mru, none) {
			row.Detail += fmt.Sprintf(", rounds overlap (%.0f-%.0f vs %.0f-%.0f)", mru.MiBpsMin, mru.MiBpsMax, none.MiBpsMin, none.MiBpsMax)
		}
	}
	return row
}

func printSeeds(out io.Writer, o SeedsOptions, rows []seedRow) error {
	if o.Quick {
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
