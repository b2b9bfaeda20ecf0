package cli

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/zonefold/zonefold/bench"
)

func newBenchGCCmd() *cobra.Command {
	o := bench.DefaultGC
	var placements, gcPolicies []string
	cmd := &cobra.Command{
		Use:   "gc [DEVICE]",
		Short: "What zone placement and GC cost: random overwrites at 80% full, per configuration",
		Long: `Runs one workload under several engine configurations, each on a freshly
formatted DEVICE (erased; same geometry, same seed), and compares them.

Workload (the xfs per-file zone affinity benchmark's shape): --files files
are filled sequentially to --util of the engine's capacity together, then
overwritten at random offsets with --bs writes, --iodepth in flight per file,
until --passes device capacities have been written. Only the overwrite phase
is measured.

Configurations are placement/gc-policy pairs. Placement: mru (each file
appends to its own zone), none (every file shares one zone stream),
round-robin (appends rotate over the open zones). GC policy: greedy (least
valid data) or cost-benefit ((1-u)·age/(1+u)). Default: mru, none and
round-robin under greedy, plus mru under cost-benefit. --placements and
--gc-policies run every combination of the two lists instead.

Per configuration it reports:
  host MiB/s  bytes the workload wrote per second of its writers' time
  WAF         bytes written to the device (data, record headers, padding,
              metadata, GC copies) / bytes the workload wrote
  steady WAF  the same over the second half of the phase's host bytes
  GC MiB      bytes GC relocated
  GC share    wall time spent inside GC passes (pick a victim, read its valid
              data, rewrite it, flush, reset; passes run one at a time) /
              wall time of the overwrite phase, its final writeback included
  resets      zones GC reset
  p50, p99    write latency seen by the workload
and the ratios against the none placement with the same GC policy:
throughput ratio (this MiB/s / none MiB/s, higher is better) and WAF ratio
(this WAF / none WAF, lower is better).

Into --out it writes summary.json, series.csv (samples over time, one column
set per configuration), zones.csv (valid bytes per zone at the end), and
waf, throughput and valid-histogram charts as PNG and SVG.

With no DEVICE it runs on an emulated zoned device in a temporary folder,
removed at the end: ` + strings.ReplaceAll(bench.DefaultGCGeometry, "&", " ") + `.
DEVICE must store data (GC reads record headers back): emu: or a real zoned
device, not null:.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			device := ""
			if len(args) == 1 {
				device = args[0]
			}
			if cmd.Flags().Changed("placements") || cmd.Flags().Changed("gc-policies") {
				o.Configs = nil
				for _, p := range placements {
					for _, g := range gcPolicies {
						o.Configs = append(o.Configs, p+"/"+g)
					}
				}
			}
			if !o.JSON && isTerminal(cmd.ErrOrStderr()) {
				o.Progress = cmd.ErrOrStderr()
			}
			return bench.GC(cmd.Context(), cmd.OutOrStdout(), device, o)
		},
	}
	f := cmd.Flags()
	countVar(f, &o.Files, "files", o.Files, "files written in parallel")
	sizeVar(f, &o.BS, "bs", o.BS, "bytes per overwrite (e.g. 8K)")
	countVar(f, &o.IODepth, "iodepth", o.IODepth, "overwrites in flight per file")
	numberVar(f, &o.Util, "util", o.Util, "live data as a fraction of the engine's capacity")
	numberVar(f, &o.Passes, "passes", o.Passes, "device capacities the overwrite phase writes")
	f.StringSliceVar(&o.Configs, "configs", bench.DefaultGCConfigs, "placement/gc-policy pairs to compare")
	f.StringSliceVar(&placements, "placements", []string{"mru", "none", "round-robin"}, "placements to combine with --gc-policies (replaces --configs)")
	f.StringSliceVar(&gcPolicies, "gc-policies", []string{"greedy"}, "GC policies to combine with --placements (replaces --configs)")
	sizeVar(f, &o.CacheBytes, "cache", o.CacheBytes, "folio cache size: small, so that the cache absorbs few overwrites and the device sees the workload")
	countVar(f, &o.OpenZones, "open-zones", 0, "data zones open at once (0: from the device's limits, at most 16)")
	f.StringVar(&o.Out, "out", o.Out, "folder for the charts, CSV and JSON")
	f.Uint64Var(&o.Seed, "seed", o.Seed, "random seed, the same for every configuration")
	f.DurationVar(&o.Sample, "sample", o.Sample, "interval between samples of the series")
	f.BoolVar(&o.JSON, "json", false, "print the summary as JSON instead of a table")
	return cmd
}
