package cli

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/zonefold/zonefold/bench"
	"github.com/zonefold/zonefold/cache"
	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/server"
	"github.com/zonefold/zonefold/zns"
)

// engineFlags are the engine settings every command that opens a device
// shares.
type engineFlags struct {
	cache     string
	maxOrder  int
	placement string
	gcPolicy  string
	openZones int
	gcLow     int
	gcHigh    int
	readahead int64
	// flags is where they were registered: what the user gave.
	flags *pflag.FlagSet
}

func (f *engineFlags) register(fs *pflag.FlagSet) {
	f.flags = fs
	fs.StringVar(&f.cache, "cache", "256M", "folio cache size (e.g. 64M, 1G)")
	countVar(fs, &f.maxOrder, "max-order", 9, "largest folio order (4 KiB << order)")
	fs.StringVar(&f.placement, "placement", "mru", "zone placement: mru, none, round-robin or hinted (mru, but the files given one write-life hint share a zone)")
	fs.StringVar(&f.gcPolicy, "gc-policy", "greedy", "GC victim policy: greedy or cost-benefit")
	countVar(fs, &f.openZones, "open-zones", 0, "data zones open at once (0: from the device's limits; at most its open limit less the zones GC and metadata keep)")
	countVar(fs, &f.gcLow, "gc-low", 0, "start GC below this many free zones (0: default; at most the device's data zones)")
	countVar(fs, &f.gcHigh, "gc-high", 0, "stop GC at this many free zones, above --gc-low (0: default, two above it; at most the device's data zones)")
	sizeVar(fs, &f.readahead, "readahead", 8<<20, "largest window a sequential reader's handle reads ahead (0: none; at most a thirty-second of --cache, never below 128 KiB; the default is lowered to fit a small --cache)")
}

func (f *engineFlags) config() (engine.Config, error) {
	var cfg engine.Config
	n, err := parseSize(f.cache)
	if err != nil {
		return cfg, usagef("--cache: %w", err)
	}
	if n == 0 {
		// The engine reads 0 as "the default": 256 MiB held for a
		// user who asked for none.
		return cfg, usagef("--cache 0: every read and write goes through the cache; want at least 4 KiB and less than 8 TiB")
	}
	// A size the cache cannot be (8T is a page too many) is the flag's
	// value wrong, as --open-zones above the device is: a usage error,
	// the flag named, before the device is touched. It exited 1 with
	// the engine's "cache: size 9 TiB: ...". One above the memory
	// available now stays a failure (the machine's state; h42d), said
	// as the flag's all the same.
	var se *cache.SizeError
	if err := cache.CheckSize(n); errors.As(err, &se) && !se.AboveMemory {
		return cfg, usagef("--cache %s: %s", f.cache, se.Why)
	} else if se != nil {
		return cfg, fmt.Errorf("--cache %s: %s", f.cache, se.Why)
	} else if err != nil {
		return cfg, err
	}
	cfg.CacheBytes = n
	// The engine lowers a window above what the cache takes to that:
	// the default follows a small --cache, as its help says, but a
	// --readahead the user gave ran as another, unsaid.
	if most := engine.ReadaheadCap(n); f.readahead > most && f.flags != nil && f.flags.Changed("readahead") {
		return cfg, usagef("--readahead %s: want at most %s with --cache %s (a thirty-second of the cache, at least %s; 0: none), or a larger --cache",
			human(f.readahead), human(most), human(n), human(engine.ReadaheadCap(0)))
	}
	cfg.ReadaheadMax = f.readahead
	if f.readahead == 0 {
		cfg.ReadaheadMax = -1 // none
	}
	if f.maxOrder < 0 || f.maxOrder > 9 {
		return cfg, usagef("--max-order %d: want 0..9", f.maxOrder)
	}
	cfg.MaxOrder = f.maxOrder
	if f.maxOrder == 0 {
		cfg.MaxOrder = -1 // explicit order 0
	}
	if cfg.Policy, err = engine.ParsePolicy(f.placement); err != nil {
		return cfg, usagef("--placement: %w", err)
	}
	if cfg.GC.Policy, err = engine.ParseGCPolicy(f.gcPolicy); err != nil {
		return cfg, usagef("--gc-policy: %w", err)
	}
	cfg.OpenZones = f.openZones
	// The engine moves a high watermark that is not above the low one
	// to two above it: given both, crossed ones are the user's mistake,
	// not a setting to change behind their back.
	if f.gcLow > 0 && f.gcHigh > 0 && f.gcHigh <= f.gcLow {
		return cfg, usagef("--gc-high %d must be above --gc-low %d (GC starts below --gc-low free zones and stops at --gc-high)", f.gcHigh, f.gcLow)
	}
	// So is --gc-high alone at or below --gc-low's default: the engine
	// moved it to two above that, unsaid.
	if low := engine.DefaultGCLow(); f.gcLow == 0 && f.gcHigh > 0 && f.gcHigh <= low {
		return cfg, usagef("--gc-high %d must be above --gc-low, %d unless given (GC starts below --gc-low free zones and stops at --gc-high): give a higher --gc-high, or a lower --gc-low too", f.gcHigh, low)
	}
	cfg.GC.Low, cfg.GC.High = f.gcLow, f.gcHigh
	return cfg, nil
}

// configFlags are the flags that set the engine settings an
// engine.ConfigError names, and what their 0 means.
var configFlags = map[string]struct{ name, zero string }{
	"OpenZones": {"--open-zones", "from the device's limits"},
	"GC.Low":    {"--gc-low", "default"},
	"GC.High":   {"--gc-high", "default"},
}

// configFlagError is err, which holds ce, with ce said as the flag that
// set it: "--open-zones 99: the device allows 8 open zones, ...; want at
// most 6 (0: from the device's limits)". What err adds around ce (bench
// gc's configuration) stays.
func configFlagError(err error, ce *engine.ConfigError) error {
	f := configFlags[ce.Setting]
	said := fmt.Sprintf("%s %d: %s; want at most %d (0: %s)", f.name, ce.Value, ce.Why, ce.Max, f.zero)
	return errors.New(strings.Replace(err.Error(), ce.Error(), said, 1))
}

func newFormatCmd() *cobra.Command {
	var force, asJSON bool
	var zones int
	cmd := &cobra.Command{
		Use:   "format DEVICE",
		Short: "Write an empty zonefold file system to a zoned device",
		Long: `Resets every zone and writes a superblock and an empty checkpoint to the
first two sequential zones. A device that holds data is refused unless
--force is given.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			if err := refuseStartOver(args[0], force, "give --force too, or drop format=1"); err != nil {
				return err
			}
			// --force also starts over an emu device whose zone
			// table is lost (zns.ErrLostZoneTable), which every
			// other open refuses.
			dev, release, err := openClaimedWith(args[0], zns.Options{ReplaceLostTable: force})
			if err != nil {
				return err
			}
			defer func() { release(err == nil) }()
			// More zones than the device has is the flag's value
			// wrong, as --open-zones above the device is: it exited
			// 1 with the engine's "format: 100 zones asked for".
			if g := dev.Geometry(); zones > g.Zones {
				return usagef("--zones %d: the device has %d zones", zones, g.Zones)
			}
			sb, err := engine.Format(dev, engine.FormatOptions{Force: force, Zones: zones})
			var ne *engine.NotEmptyError
			if errors.As(err, &ne) {
				return refuseFormat(args[0], ne)
			}
			if err != nil {
				return err
			}
			g := dev.Geometry()
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), formatJSON{Device: args[0], UUID: sb.ID(), Zones: g.Zones, UsedZones: sb.UsedZones,
					ZoneSize: g.ZoneSize, ZoneCap: g.ZoneCap, MetaZones: sb.MetaZones, MetaGroup: sb.MetaGroup})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "formatted %s: uuid %s, %d of %d zones of %s (capacity %s), metadata zones %s and %s\n",
				args[0], sb.ID(), sb.UsedZones, g.Zones, human(g.ZoneSize), human(g.ZoneCap),
				zoneRange(sb.MetaZones[0], sb.MetaGroup), zoneRange(sb.MetaZones[1], sb.MetaGroup))
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "erase a device that holds data (an emu file whose zone table is lost too)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	countVar(cmd.Flags(), &zones, "zones", 0, "use only the first N zones (0: all)")
	return cmd
}

// refuseFormat is format's refusal of a device that holds data, with
// the ways on: it said "engine: zone 0 is not empty: the device holds
// data (--force erases it)" of a device formatted already, leaving the
// user to guess what was there and whether serve would take it.
func refuseFormat(device string, ne *engine.NotEmptyError) error {
	if ne.FileSystem {
		return fmt.Errorf("%s holds %s, formatted already: `zonefold serve DEVICE` serves it as it is, "+
			"`zonefold format --force DEVICE` erases it and its files", device, ne.Holds)
	}
	return fmt.Errorf("%s holds %s: `zonefold format --force DEVICE` erases it", device, ne.Holds)
}

// refuseStartOver refuses an emu device string with format=1, which
// erases the device as it opens, unless the command was told to erase
// (erase); how says what would tell it. fsck took such a string and
// erased the device it was to check without changing; format, serve
// and the benches erased a device holding data without --force.
func refuseStartOver(device string, erase bool, how string) error {
	if erase || !zns.StartsOver(device) {
		return nil
	}
	return usagef("%s: format=1 in the device string erases the device; %s", device, how)
}

// openClaimed claims device as the daemon does (so that nothing here
// erases or reads a device a daemon serves) and opens it. release closes
// the device and drops the claim; keep says whether an emu file the claim
// created stays (the command made a device of it) or goes (it failed).
func openClaimed(device string) (dev zns.Device, release func(keep bool), err error) {
	return openClaimedWith(device, zns.Options{})
}

// openClaimedWith is openClaimed, opening device with opts.
func openClaimedWith(device string, opts zns.Options) (dev zns.Device, release func(keep bool), err error) {
	lock, err := server.LockDevice(device)
	if err != nil {
		return nil, nil, err
	}
	dev, err = zns.Open(device, opts)
	if err != nil {
		lock.Abandon()
		return nil, nil, err
	}
	return dev, func(keep bool) {
		dev.Close()
		if keep {
			lock.Release()
		} else {
			lock.Abandon()
		}
	}, nil
}

type runOpts struct {
	engineFlags
	files    int
	bs       string
	iodepth  int
	size     string
	rw       string
	endFsync bool
	preset   string
	scale    float64
	loops    int
	json     bool
	force    bool
	// warmCache keeps what a read run's layout left in the cache (bench
	// run's --warm-cache).
	warmCache bool
	// rws are the --rw values the command takes (register).
	rws []string
}

var presets = map[string]func(o *runOpts){
	"seq128k": func(o *runOpts) { o.files, o.bs, o.iodepth, o.rw, o.size = 1, "128K", 16, "write", "256M" },
	"4x1m": func(o *runOpts) {
		o.files, o.bs, o.iodepth, o.rw, o.size, o.endFsync = 4, "1M", 1, "write", "256M", true
	},
	"16x8k":    func(o *runOpts) { o.files, o.bs, o.iodepth, o.rw, o.size = 16, "8K", 4, "randwrite", "1G" },
	"4k-qd128": func(o *runOpts) { o.files, o.bs, o.iodepth, o.rw, o.size = 1, "4K", 128, "randwrite", "256M" },
}

func newBenchRunCmd() *cobra.Command {
	var o runOpts
	cmd := &cobra.Command{
		Use:   "run DEVICE",
		Short: "Run an fio-like workload in process against a freshly formatted DEVICE (erases it)",
		Long: `Formats DEVICE (erasing it), then runs N files of writes or reads through
the engine's File API with a progress bar, and prints MiB/s, IOPS, latency
percentiles and write amplification. Presets reproduce the kernel series'
workloads: seq128k (bs=128k, iodepth 16), 4x1m (4 files, bs=1M, end_fsync),
16x8k (16 files, 8k random writes, iodepth 4, 1G each), 4k-qd128 (4k random
writes, iodepth 128); --scale shrinks them.

Read runs (--rw read, randread) first lay the files out, untimed, through
the cache; then the cache is written back and emptied, as drop_caches
does for a kernel file system, so that the timed reads come from the
device (--warm-cache keeps it, and the reads time the cache instead). The
output says how much of what was read came from the device.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBenchRun(cmd, args[0], o)
		},
	}
	o.register(cmd.Flags(), "write", "randwrite", "read", "randread")
	cmd.Flags().BoolVar(&o.warmCache, "warm-cache", false, "read runs: keep what the untimed layout left in the cache, so that the reads time the cache (by default it is emptied first, and they time the device)")
	return cmd
}

// register adds the engine and workload flags; rws are the --rw values
// the command takes.
func (o *runOpts) register(f *pflag.FlagSet, rws ...string) {
	o.rws = rws
	o.engineFlags.register(f)
	countVar(f, &o.files, "files", 1, "files written in parallel")
	f.StringVar(&o.bs, "bs", "128K", "bytes per operation (e.g. 4K, 1M)")
	countVar(f, &o.iodepth, "iodepth", 1, "operations in flight per file")
	f.StringVar(&o.size, "size", "64M", "bytes per file (e.g. 64M, 1G)")
	f.StringVar(&o.rw, "rw", "write", orList(rws))
	f.BoolVar(&o.endFsync, "end-fsync", false, "fsync every file at the end (timed)")
	f.StringVar(&o.preset, "preset", "", "seq128k, 4x1m, 16x8k or 4k-qd128 (flags given explicitly still win)")
	numberVar(f, &o.scale, "scale", 1, "multiply the per-file size by this (rounded down to whole --bs blocks)")
	countVar(f, &o.loops, "loops", 1, "go over each file's size this many times (--rw write and read: the same blocks again, in order; randwrite and randread: as many blocks more, at random)")
	f.BoolVar(&o.json, "json", false, "print one JSON object instead of a table")
	benchForceVar(f, &o.force)
}

// benchForceVar adds a bench's --force: without it, a bench refuses a
// DEVICE that holds data, as format does (bench.CheckErasable).
func benchForceVar(f *pflag.FlagSet, force *bool) {
	f.BoolVar(force, "force", false, "erase DEVICE even if it holds data (a zonefold file system, even an empty one, or anything written)")
}

func runBenchRun(cmd *cobra.Command, device string, o runOpts) error {
	o, w, cfg, err := o.resolve(cmd)
	if err != nil {
		return err
	}
	if err := refuseStartOver(device, o.force, "give --force too, or drop format=1"); err != nil {
		return err
	}
	if o.warmCache && w.RW != "read" && w.RW != "randread" {
		return usagef("--warm-cache: only a read run (--rw read or randread) lays its files out through the cache before it is timed")
	}
	w.WarmCache = o.warmCache
	ro := bench.RunOptions{Workload: w, Config: cfg, JSON: o.json, Force: o.force}
	if !o.json && isTerminal(cmd.ErrOrStderr()) {
		ro.Progress = cmd.ErrOrStderr()
	}
	return bench.Run(cmd.Context(), cmd.OutOrStdout(), device, ro)
}

// resolve applies the preset (flags given explicitly win) and checks the
// options: the workload and engine configuration they describe.
func (o runOpts) resolve(cmd *cobra.Command) (runOpts, bench.Workload, engine.Config, error) {
	var w bench.Workload
	if o.preset != "" {
		set, ok := presets[o.preset]
		if !ok {
			return o, w, engine.Config{}, usagef("--preset %q: want %s", o.preset, presetNames())
		}
		explicit := o
		set(&o)
		// Flags the user gave override the preset.
		cmd.Flags().Visit(func(fl *pflag.Flag) {
			switch fl.Name {
			case "files":
				o.files = explicit.files
			case "bs":
				o.bs = explicit.bs
			case "iodepth":
				o.iodepth = explicit.iodepth
			case "size":
				o.size = explicit.size
			case "rw":
				o.rw = explicit.rw
			case "end-fsync":
				o.endFsync = explicit.endFsync
			}
		})
	}
	cfg, err := o.config()
	if err != nil {
		return o, w, cfg, err
	}
	bs, err := parseSize(o.bs)
	if err != nil || bs == 0 {
		return o, w, cfg, usagef("--bs: %w", nonZero(bs, err))
	}
	size, err := parseSize(o.size)
	if err != nil {
		return o, w, cfg, usagef("--size: %w", err)
	}
	if o.scale <= 0 {
		return o, w, cfg, usagef("--scale %v: want > 0", o.scale)
	}
	asked := size
	if float64(size)*o.scale >= math.MaxInt64 {
		// int64 of it wraps: --size 4E --scale 4 was "less than --bs".
		return o, w, cfg, usagef("--size %s times --scale %v is more than 8 EiB", o.size, o.scale)
	}
	size = int64(float64(size)*o.scale) / bs * bs
	// The workload's own checks (bench.Workload) named no flag, exited
	// 1, and came after the device was opened, and formatted under
	// --force: a typo erased it first.
	switch {
	case o.files < 1:
		return o, w, cfg, usagef("--files %d: want at least 1", o.files)
	case o.loops < 1:
		// The workload took 0 for 1, silently.
		return o, w, cfg, usagef("--loops %d: want at least 1", o.loops)
	case o.iodepth < 1 || o.iodepth > maxBenchIODepth:
		return o, w, cfg, usagef("--iodepth %d: want 1 to %d", o.iodepth, maxBenchIODepth)
	case bs > maxBenchBS:
		return o, w, cfg, usagef("--bs %s: want at most %s", o.bs, human(maxBenchBS))
	case size < bs:
		return o, w, cfg, usagef("--size %s (times --scale %v) is less than --bs %s: want at least one block per file", o.size, o.scale, o.bs)
	case !slices.Contains(o.rws, o.rw):
		return o, w, cfg, usagef("--rw %q: want %s", o.rw, orList(o.rws))
	case o.scale == 1 && asked%bs != 0:
		// Trimmed to whole blocks, each file came out other than
		// --size said, unsaid. A --scale that leaves a part of a
		// block rounds down, as its help says.
		return o, w, cfg, usagef("--size %s is not a whole number of --bs %s blocks: want a multiple of it, e.g. %d or %d bytes",
			human(asked), o.bs, asked/bs*bs, (asked/bs+1)*bs)
	}
	w = bench.Workload{Files: o.files, BS: int(bs), IODepth: o.iodepth, Size: size, RW: o.rw, EndFsync: o.endFsync, Seed: 1, Loops: o.loops}
	return o, w, cfg, nil
}

func presetNames() string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// zoneRange names n zones from first: "4", or "4-7".
func zoneRange(first, n int) string {
	if n <= 1 {
		return strconv.Itoa(first)
	}
	return fmt.Sprintf("%d-%d", first, first+n-1)
}

// The workload's bounds (bench.Workload's check), as flags.
const (
	maxBenchIODepth = 1024
	maxBenchBS      = 64 << 20
)

// orList is "a", "a or b", "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}
