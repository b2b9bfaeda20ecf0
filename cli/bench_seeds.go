package cli

import (
	"github.com/spf13/cobra"

	"github.com/zonefold/zonefold/bench"
)

func newBenchSeedsCmd() *cobra.Command {
	var o bench.SeedsOptions
	cmd := &cobra.Command{
		Use:   "seeds",
		Short: "Each kernel series' comparison, one run each, against the ratio the series reported",
		Long: `Reproduces the comparison behind each of the five kernel ideas zonefold is
built on, once each, and prints one table: the idea, the ratio the kernel
series reported, the ratio zonefold measured here, and whether it meets it.

  bcachefs folio order hint   bench folios' large-folio comparison: seq 128 KiB
                              buffered writes through the engine on a null:
                              device, max order 9 vs 0 (no data I/O, so the
                              series' "without data io" figure, 1.5x, is the bar)
  iomap one-lock state update bench folios' state-lock comparison: 1 KiB writes,
                              uptodate+dirty in one critical section vs two
  iomap large folios in       4 files x 1 MiB writes, end fsync, through the
  writeback                   engine on a null: device, max order 9 vs 0. The
                              series reported ~8000 MiB/s, not a ratio: the bar
                              is "large folios are not slower" (1x)
  xfs per-file zone affinity  bench gc's seed workload with mru/greedy and
                              none/greedy: 16 files of 8 KiB random writes,
                              iodepth 4, 20% of the device written, three
                              alternating rounds: throughput ratio of medians
                              (bar 1.11x), on a null: device (no storage) or
                              --affinity-device (a zoned block device)
  aio batching                bench batching's file target: 4 KiB O_DIRECT
                              writes at QD128, plugged vs unplugged (bar 2x)

The default run takes about 30 seconds; --quick runs each comparison for a
moment (for tests: its ratios are noise).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.AffinityDevice != "" {
				if err := checkDevice("--affinity-device", o.AffinityDevice); err != nil {
					return err
				}
			}
			if !o.JSON && isTerminal(cmd.ErrOrStderr()) {
				o.Progress = cmd.ErrOrStderr()
			}
			return bench.Seeds(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.Quick, "quick", false, "run each comparison for a moment (a smoke test, not a measurement)")
	f.BoolVar(&o.JSON, "json", false, "print the table as JSON")
	f.BoolVar(&o.Check, "check", false, "exit 1 if a comparison misses its kernel series' bar")
	f.BoolVar(&o.Force, "force", false, "erase an --affinity-device that holds data (a zonefold file system, even an empty one, or anything written)")
	f.StringVar(&o.AffinityDevice, "affinity-device", "", "zoned device for the zone-affinity row, formatted for each run (e.g. /dev/nullb0; default: a null: device)")
	return cmd
}
