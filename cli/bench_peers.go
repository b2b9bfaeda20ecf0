package cli

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/zonefold/zonefold/bench"
)

func newBenchPeersCmd() *cobra.Command {
	o := bench.DefaultPeers
	var skew string
	cmd := &cobra.Command{
		Use:   "peers DEVICE",
		Short: "zonefold next to the kernel's zoned file systems (f2fs, btrfs, XFS) on one zoned device",
		Long: `Runs the bench gc workloads on one zoned block device through zonefold and
through each of the kernel's zoned file systems this machine can run, and
compares them: "is this better than what my kernel already does?"

DEVICE is erased. It must be a zoned block device (e.g. /dev/nullb0,
/dev/nvme0n1), not mounted; one that holds zonefold, another file system or
any written zone is refused unless --force. Run as root: the file systems
are made and mounted in temporary folders.

For each workload (--workload) and target (--targets: zonefold, f2fs, btrfs,
xfs) it resets every zone, makes the target (zonefold's format;
mkfs.f2fs -m; mkfs.btrfs -O zoned; mkfs.xfs, which makes a zoned XFS on a
zoned device), mounts it, runs the workload, and unmounts it. A target this
kernel or its tools cannot run is skipped with the reason (zoned XFS needs
Linux >= 6.15 and xfsprogs >= 6.15); one that fails (mkfs refuses the
device, ENOSPC) gets its row with the error.

Each target is sized by its own usable capacity, as df shows it: --util of
it is live data (f2fs, for one, keeps a quarter of a small device to
itself, so the same --util is fewer bytes there). The kernel file systems
write ordinary files (buffered writes, fsync where the workload syncs); the
kernel's dirty page limit is set to what zonefold lets be dirty (half of
--cache, 4 MiB by default as in bench gc) for the run and restored after:
small, so that neither cache absorbs many overwrites and the device sees
the workload.

Per target it reports:
  capacity    the target's usable bytes
  host MiB/s  bytes the workload wrote per second of its writers' time
  WAF         the block device's written bytes (/sys/block/X/stat) / bytes
              the workload wrote, over the measured part: the same counter
              for every row, zonefold's included
  GC MiB      bytes the target's GC rewrote, and GC zones the zones it
              freed, where it says (zonefold; f2fs moved_blocks_* and
              gc_reclaimed_segments; btrfs reclaim_* on Linux >= 6.10 or
              so; XFS 'gc xpc' and 'zoned' stats); - where it does not
  p99 us      write latency seen by the workload
and the ratios against zonefold (MiB/s: higher is better; WAF: lower is
better). The last lines check zonefold's targets against the best kernel
file system: WAF <= 0.8x on hotcold and lifetimes, throughput >= 1x on seed.

Into --out it writes summary.json and, per workload, a series CSV and WAF
and throughput charts as PNG and SVG.

Without a zoned device: make bench-peers runs this in a QEMU VM on
null_blk (testdata/vm/peers.sh), with Debian's kernel and with a kernel new
enough for zoned XFS.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if o.HotShare, o.HotFiles, err = bench.ParseSkew(skew); err != nil {
				return asUsage(cmd, err)
			}
			// A run takes minutes per target: a line per run on stderr,
			// terminal or log.
			o.Progress = cmd.ErrOrStderr()
			return bench.Peers(cmd.Context(), cmd.OutOrStdout(), args[0], o)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.Targets, "targets", bench.PeerTargets, "what to compare: "+strings.Join(bench.PeerTargets, ", "))
	f.BoolVar(&o.Force, "force", false, "erase a device that holds a file system or data")
	f.StringSliceVar(&o.Workloads, "workload", bench.Workloads, "workloads to run: "+strings.Join(bench.Workloads, ", "))
	countVar(f, &o.Files, "files", o.Files, "files written in parallel")
	countVar(f, &o.Writers, "writers", 0, "lifetimes: writers, each with a file of up to 4 zones in flight (0: --files)")
	sizeVar(f, &o.BS, "bs", o.BS, "bytes per write (uniform, hotcold, seed; e.g. 8K)")
	countVar(f, &o.IODepth, "iodepth", o.IODepth, "writes in flight per file (uniform, hotcold, seed)")
	numberVar(f, &o.Util, "util", o.Util, "live data as a fraction of each target's usable capacity (not seed)")
	f.StringVar(&skew, "skew", "80/20", "hotcold: OPS/FILES, the percent of overwrites that go to a percent of the files")
	countVar(f, &o.Repeat, "repeat", o.Repeat, "rounds: each runs every workload and target once, targets alternating")
	f.DurationVar(&o.RunLimit, "run-limit", 0, "stop a run whose workload takes longer than this, its row saying so (0: no limit)")
	numberVar(f, &o.Steady.Window, "window", o.Steady.Window, "capacities of host writes per steady-state window")
	numberVar(f, &o.Steady.Tol, "steady-tol", o.Steady.Tol, "steady once successive windows' WAF differ by less than this fraction")
	numberVar(f, &o.Steady.Cap, "warmup-cap", o.Steady.Cap, "capacities the warm-up writes at most")
	numberVar(f, &o.Steady.Span, "measure", o.Steady.Span, "capacities measured once steady")
	sizeVar(f, &o.CacheBytes, "cache", o.CacheBytes, "zonefold's folio cache; the kernel's dirty page limit is half of it")
	countVar(f, &o.OpenZones, "open-zones", 0, "zonefold's data zones open at once (0: from the device's limits, at most 16)")
	pathVar(f, &o.Out, "out", o.Out, "folder", "folder for the charts, CSV and JSON")
	f.Uint64Var(&o.Seed, "seed", o.Seed, "random seed, the same for every target")
	f.DurationVar(&o.Sample, "sample", o.Sample, "interval between samples of the series (and steady-state checks)")
	f.BoolVar(&o.JSON, "json", false, "print the summary as JSON instead of tables")
	return cmd
}
