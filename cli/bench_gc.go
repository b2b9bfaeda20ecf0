package cli

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/zonefold/zonefold/bench"
)

// What --placements and --gc-policies, given one without the other,
// combine with.
var (
	gcPlacementsAlone = []string{"mru", "none", "round-robin"}
	gcPoliciesAlone   = []string{"greedy"}
)

func newBenchGCCmd() *cobra.Command {
	o := bench.DefaultGC
	var skew string
	var placements, gcPolicies []string
	cmd := &cobra.Command{
		Use:   "gc [DEVICE]",
		Short: "What zone placement and GC policy cost, under the workloads where they decide it",
		Long: `Runs workloads under several engine configurations, each run on a freshly
formatted DEVICE (erased; same geometry, same seed), configurations
alternating in --repeat rounds, and compares them: one table per workload
with the median and the min-max of each figure over the rounds, and the
ratio of medians against none under the same GC policy.

Workloads (--workload, several at once; default all four):
  uniform    --files files filled to --util of the engine's capacity, then
             overwritten at random with --bs writes, --iodepth in flight
             per file: every block equally hot (the xfs benchmark's shape)
  hotcold    the same, but --skew 80/20 sends 80% of the overwrites to 20%
             of the files
  lifetimes  --files writers create files of a quarter of a zone to four
             zones, write them sequentially, fsync, keep them for a
             lifetime from a short/long mix, then delete them whole;
             live data held at --util
  seed       the xfs series' exact shape: --files files of random --bs
             writes, --iodepth per file, on a device so large (20% of it
             written) that GC barely runs: the write path's throughput.
             Its default null: device takes one write per zone at a
             time (zone_serial=1), as a zoned block device such as
             /dev/nullb0 does, each completing 20 us after submission
             (completion_nsec=20000, as null_blk's), for both
             configurations: per-file zones keep --files zones' writes
             in flight against one. Without zone_serial a null: device
             completes any number per zone at once, and placement has
             little of its speed to change

Each run (but seed's) warms up until the WAF of successive --window
windows of host writes changes by less than --steady-tol (or
--warmup-cap capacities were written), then measures --measure device
capacities (uniform: --measure-uniform, long enough that its WAF, read
against the model, does not swing with the zones' ages); the table says
how many runs became steady.

Configurations are placement/gc-policy pairs. Placement: mru (each file
appends to its own zone), none (every file shares one zone stream),
round-robin (appends rotate over the open zones). GC policy: greedy (least
valid data) or cost-benefit ((1-u)·age/(1+u)). A third part, 1-stream or
2-streams, sets how many zones GC sorts its copies into (hot and cold; by
default two where the device's open limit leaves room beside the data
zones, as it does on the default device); /no-bg turns background GC
off (writers still collect when space runs out). Default: mru and none
under greedy, and mru under cost-benefit for hotcold (whose verdicts read
it). --placements and --gc-policies run every combination of the two
lists instead.

Per workload and configuration it reports:
  WAF         bytes written to the device (data, record headers, padding,
              metadata, GC copies) / bytes the workload wrote, measured part
              (the device bytes of the writes made in it: the final
              writeback's, and not those of the writes the cache held
              when it began)
  host MiB/s  bytes the workload wrote per second of its writers' time
  GC share    wall time inside GC passes / wall time of the measured part
  GC MiB      bytes GC relocated in the measured part
  p99 us      write latency
  steady      runs whose warm-up became steady (the rest hit the cap)
  warm-up     device capacities written before measuring
and the ratios of medians against none: MiB/s (higher is better) and WAF
(lower is better), and a line per configuration that takes the WAF apart:
data, record headers, zone-tail pad, metadata and GC copies, each in
device bytes per host byte; under it, over the whole run (warm-up too),
the victims GC copied valid data out of and what each cost, those it
reset empty, and the files placement sent into another file's zone (how
many into a zone still being written, their appends interleaved), and
the headers and metadata by cause (a header per client record, of them
those cut in two at a zone's end, per GC record; the log's records of
creates, removes and GC's zone resets; checkpoints). The uniform WAF chart draws the analytic greedy WAF
(Desnoyers' model) at the workload's utilisation of the zones in
circulation; the lifetimes chart draws 1.0. Verdict lines say per workload
whether it met its expectation, and plainly where mru or cost-benefit fall
short.

Into --out it writes summary.json and, per workload, series-W.csv (the
median run's samples, one column set per configuration), zones-W.csv
(valid bytes per zone at the end) and waf-W, throughput-W and
valid-histogram-W charts as PNG and SVG.

With no DEVICE it runs on emulated zoned devices in a temporary folder (in
memory, /dev/shm, where there is one), removed at the end: ` + strings.ReplaceAll(bench.DefaultGCGeometry, "&", " ") + `
(lifetimes: ` + strings.ReplaceAll(bench.DefaultLifetimesGeometry, "&", " ") + `, as many zones,
each four times larger: it syncs every eighth of a zone, and each sync
is a record with a 4 KiB header, which on 1 MiB zones (a sync every
128 KiB) was 3% of the bytes written, a cost no real zoned device's
zones of 96 MiB to 2 GiB, synced every MiB or so, see; seed: a null:
device, no storage, ` + strings.ReplaceAll(bench.DefaultSeedGeometry, "&", " ") + `, so that
the engine's write path is measured, not an emulated device's copies and
syncs). DEVICE must store data (GC reads record headers back): emu: or a
real zoned device; null: serves the seed workload alone.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			device := ""
			if len(args) == 1 {
				device = args[0]
			}
			if combine := cmd.Flags().Changed("placements") || cmd.Flags().Changed("gc-policies"); combine {
				// Either list given alone combines with the other's
				// own default, which is no default of the run's: the
				// help said "(default [mru,none,round-robin])" of a
				// run that, without either flag, compares --configs'.
				if cmd.Flags().Changed("configs") {
					return usagef("--configs and --placements/--gc-policies both name the configurations: give one or the other")
				}
				if len(placements) == 0 {
					placements = gcPlacementsAlone
				}
				if len(gcPolicies) == 0 {
					gcPolicies = gcPoliciesAlone
				}
				o.Configs = nil
				for _, p := range placements {
					for _, g := range gcPolicies {
						o.Configs = append(o.Configs, p+"/"+g)
					}
				}
			}
			var err error
			if o.HotShare, o.HotFiles, err = bench.ParseSkew(skew); err != nil {
				return asUsage(cmd, err)
			}
			if !o.JSON && isTerminal(cmd.ErrOrStderr()) {
				o.Progress = cmd.ErrOrStderr()
			}
			return bench.GC(cmd.Context(), cmd.OutOrStdout(), device, o)
		},
	}
	f := cmd.Flags()
	benchForceVar(f, &o.Force)
	f.StringSliceVar(&o.Workloads, "workload", bench.Workloads, "workloads to run: "+strings.Join(bench.Workloads, ", "))
	countVar(f, &o.Files, "files", o.Files, "files written in parallel (lifetimes: writers)")
	sizeVar(f, &o.BS, "bs", o.BS, "bytes per write (uniform, hotcold, seed; e.g. 8K)")
	countVar(f, &o.IODepth, "iodepth", o.IODepth, "writes in flight per file (uniform, hotcold, seed)")
	numberVar(f, &o.Util, "util", o.Util, "live data as a fraction of the engine's capacity (not seed)")
	f.StringVar(&skew, "skew", "80/20", "hotcold: OPS/FILES, the percent of overwrites that go to a percent of the files")
	countVar(f, &o.Repeat, "repeat", o.Repeat, "rounds: each runs every workload and configuration once, configurations alternating")
	numberVar(f, &o.Steady.Window, "window", o.Steady.Window, "device capacities of host writes per steady-state window")
	numberVar(f, &o.Steady.Tol, "steady-tol", o.Steady.Tol, "steady once successive windows' WAF differ by less than this fraction")
	numberVar(f, &o.Steady.Cap, "warmup-cap", o.Steady.Cap, "device capacities the warm-up writes at most")
	numberVar(f, &o.Steady.Span, "measure", o.Steady.Span, "device capacities measured once steady")
	numberVar(f, &o.Steady.UniformSpan, "measure-uniform", o.Steady.UniformSpan, "device capacities measured once steady for uniform (0: --measure), whose WAF the verdict reads against the model")
	f.StringSliceVar(&o.Configs, "configs", nil, "placement/gc-policy[/N-streams][/no-bg] configurations to compare (default: mru/greedy, none/greedy, and mru/cost-benefit for hotcold)")
	f.StringSliceVar(&placements, "placements", nil, "placements to combine with --gc-policies, every pair compared instead of --configs' (with --gc-policies alone: "+strings.Join(gcPlacementsAlone, ", ")+")")
	f.StringSliceVar(&gcPolicies, "gc-policies", nil, "GC policies to combine with --placements, every pair compared instead of --configs' (with --placements alone: "+strings.Join(gcPoliciesAlone, ", ")+")")
	sizeVar(f, &o.CacheBytes, "cache", o.CacheBytes, "folio cache size: small, so that the cache absorbs few overwrites and the device sees the workload")
	countVar(f, &o.OpenZones, "open-zones", 0, "data zones open at once (0: from the device's limits, at most 16)")
	pathVar(f, &o.Out, "out", o.Out, "folder", "folder for the charts, CSV and JSON")
	f.Uint64Var(&o.Seed, "seed", o.Seed, "random seed, the same for every configuration")
	f.DurationVar(&o.Sample, "sample", o.Sample, "interval between samples of the series (and steady-state checks)")
	f.BoolVar(&o.JSON, "json", false, "print the summary as JSON instead of tables")
	return cmd
}
