package cli

import (
	"github.com/spf13/cobra"

	"github.com/zonefold/zonefold/bench"
)

func newBenchLSMCmd() *cobra.Command {
	o := bench.DefaultLSM
	cmd := &cobra.Command{
		Use:   "lsm [DEVICE]",
		Short: "A real LSM store on zonefold: Pebble's fill and random overwrites per placement, and against the kernel",
		Long: `Runs Pebble (github.com/cockroachdb/pebble/v2, the LSM store under
CockroachDB) on zonefold through pebblefs, db_bench-style: every key written
once in random order (fill), then keys overwritten at random until --passes
device capacities of keys and values were written (overwrite). Keys are 16
bytes, values --value-size (1 KiB), incompressible; --scale 1 is 100M keys.

Each placement in --placements runs on a freshly formatted DEVICE (erased),
and with --against DIR the same workload runs on Pebble's default file
system in DIR: the kernel baseline. The configurations alternate, --rounds
times; the table gives medians and the spread of overwrite ops/s. Pebble's
options are the same on both sides but for the file system; writes are not
synced (as db_bench's), unless --sync, and neither side syncs a table while
it is written (BytesPerSync "never": pebblefs has no file descriptor for
Pebble's sync_file_range hints, which would become full syncs), only when it
is finished.

Per configuration, for the overwrite phase:
  fill, overwrite ops/s   Pebble writes per second (the fill's and the
                          overwrite's)
  Pebble WA               Pebble's own write amplification, from its metrics:
                          (WAL + flush + compaction bytes) / WAL bytes
  device WAF              bytes zonefold wrote to the device (data, record
                          headers, padding, metadata, GC copies) / bytes
                          Pebble wrote to its files
  total amp               the product: device bytes per byte Pebble took in
  GC MB, resets           what zonefold's GC relocated and reset
  jobs                    Pebble's flushes and compactions writing tables at
                          once (the mean over the samples)
  live                    bytes zonefold's zones hold for files, as a share
                          of its capacity (the mean over the samples)
and the ratios: overwrite ops/s against the kernel's, device WAF against
none's. The targets (device WAF with mru <= 1.15 and <= 0.7x none's; ops/s
>= 0.9x the kernel's) are printed as met or MISSED.

Into --out it writes summary.json, series.csv and waf and ops charts (PNG and
SVG) of the overwrite phase.

With no DEVICE it runs on an emulated zoned device sized so that the keys and
values fill --util of it, with zones of four of Pebble's tables (--zone-size
sets it) and 16 open at most (--open-zones), on a new file per run in DIR
(with --against, so that both sides share a file system) or a temporary
folder; the file is unlinked as soon as the engine holds it open, so none is
left behind however the run ends. DEVICE must keep data: emu: or a real
zoned device, not null:. An interrupt (ctrl-C, SIGTERM) stops the run even
while Pebble is stalled in a write (it is then left running for the process
to end). A panic in the goroutine calling Pebble (in Set, say) is the
command's error; one in Pebble's flush or compaction goroutines still ends
the process. A write of Pebble's that meets ENOSPC on zonefold ends the run
with an error saying the device is full (Pebble would retry its compactions
without end, or panic on a WAL write).

The default shape is that of an LSM store on a ZNS drive at steady state,
where GC must run under every placement: the keys and values fill 31% of the
device, and Pebble's files, about twice that, peak at about 70% of it
(--util goes up to 0.32, where Pebble's files at their largest, 2.8x the
keys and values, still leave GC its reserve, the WAL its reserve and slack: a device any fuller
ran out of space now and then, and Pebble panics on a WAL write's ENOSPC);
writes stop at 8 L0 sublevels, not Pebble's 12, on both sides, which keeps
L0's compactions and so Pebble's peaks smaller (--l0-stop); tables of 1 MiB at every level (ZenFS's advice for RocksDB:
the same target file size at every level) in zones of 4 MiB, as a ZNS drive's
zones hold many tables;
three compactions at once, so that several jobs' tables, the WAL and GC share
the 16 open zones; one device capacity of overwrites. With Pebble's defaults
(tables doubling per level, one compaction) and a third of the device, deep
tables span several zones and free whole ones under any placement, and GC
barely runs: with --table-size 0 --compactions 0 --util 0.33, none's GC copied
8 MB in a run and its device WAF was 1.021, mru's 1.029. With zones of one
table (--zone-size 1M) none's shared stream is mostly whole tables and its
GC stays cheap (device WAF 1.16-1.22); zones larger than tables are where
none pays for mixing lifetimes. Under mru a file that needs a zone and has
a write-life hint (pebblefs gives one by file kind and level) starts in a
finished file's tail of its class, else a fresh zone; hinted sends each
class to one shared stream (see the README for what each measured).

Ops/s against the kernel: the kernel run sits next to the first placement's
in every round, and even rounds run in reverse order; the last target line
gives each round's ratio. Pebble's own write amplification, which decides
most of its ops/s, varies from run to run with its compaction scheduling:
compare ratios over several --rounds.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			device := ""
			if len(args) == 1 {
				device = args[0]
			}
			if !o.JSON && isTerminal(cmd.ErrOrStderr()) {
				o.Progress = cmd.ErrOrStderr()
			}
			return bench.LSM(cmd.Context(), cmd.OutOrStdout(), device, o)
		},
	}
	f := cmd.Flags()
	benchForceVar(f, &o.Force)
	numberVar(f, &o.Scale, "scale", o.Scale, "keys as a fraction of 100M")
	intSizeVar(f, &o.ValueSize, "value-size", o.ValueSize, "bytes per value (e.g. 1K)")
	numberVar(f, &o.Util, "util", o.Util, "keys and values as a fraction of the default device's capacity (at most 0.32: Pebble's files take up to 2.8 times that at their peak, beside GC's and the WAL's reserves)")
	numberVar(f, &o.Passes, "passes", o.Passes, "device capacities of keys and values the overwrite phase writes")
	f.StringSliceVar(&o.Placements, "placements", o.Placements, "zonefold placements to compare: mru, none, hinted, round-robin")
	countVar(f, &o.Rounds, "rounds", o.Rounds, "times each configuration runs, alternating")
	f.StringVar(&o.Against, "against", "", "folder on a kernel file system: run the same on Pebble's default file system there (the baseline)")
	f.BoolVar(&o.Sync, "sync", false, "sync every write (pebble.Sync), on both sides")
	sizeVar(f, &o.CacheBytes, "cache", 256<<20, "zonefold's folio cache (dirty data is held to an eighth of the device)")
	sizeVar(f, &o.BlockCache, "block-cache", o.BlockCache, "Pebble's block cache, on both sides")
	sizeVar(f, &o.ZoneSize, "zone-size", o.ZoneSize, "zone size of the default device (0: four of Pebble's L0 tables, in whole MiB)")
	countVar(f, &o.OpenZones, "open-zones", o.OpenZones, "open and active zone limit of the default device")
	sizeVar(f, &o.TableSize, "table-size", o.TableSize, "Pebble's target table size at every level (0: L0's from the DB's size, doubling per level, Pebble's way)")
	countVar(f, &o.Compactions, "compactions", o.Compactions, "compactions Pebble runs at once (0: Pebble's one, two when behind)")
	countVar(f, &o.L0Stop, "l0-stop", o.L0Stop, "L0 sublevels at which Pebble stops writes, on both sides (0: Pebble's 12)")
	pathVar(f, &o.Out, "out", o.Out, "folder", "folder for the charts, CSV and JSON")
	f.Uint64Var(&o.Seed, "seed", o.Seed, "random seed, the same for every configuration")
	f.DurationVar(&o.Sample, "sample", o.Sample, "interval between samples of the series")
	f.BoolVar(&o.JSON, "json", false, "print the summary as JSON instead of a table")
	f.BoolVar(&o.Check, "check", false, "exit 1 if a target is missed")
	return cmd
}
