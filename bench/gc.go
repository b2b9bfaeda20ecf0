package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/internal/report"
)

// DefaultGCGeometry is the embedded default device of bench gc: an
// emulated zoned device in a temporary folder (in memory, /dev/shm, where
// there is one: on a disk, every GC pass's device flush is a disk sync,
// and the benchmark measures the disk).
//
// 256 zones of 1 MiB: 256 MiB, so that a run of a workload takes seconds
// and make run's 30 runs (3 rounds of 4 workloads under 2 or 3
// configurations) fit in 3 minutes on a shared 2-core machine; many small
// zones give GC many victims to choose from and keep the 16 open zones a
// small part of the device, and a 1 MiB zone holds 128 writes of 8 KiB,
// past the 64 from which greedy GC follows the analytic model (see
// greedyWAF).
//
// max_open = max_active = 19: the engine keeps one zone for each of GC's
// two streams (hot and cold copies) and one for metadata (a checkpoint
// finishes the old metadata zone before it writes the next), which leaves
// exactly 16 for data — one per file. The device
// limits are tight (every open zone is in use) but never below the file
// count: per-file placement is only meaningful while each file can have its
// own zone, and with more files than open zones mru degenerates into
// sharing the least recently used zone (the xfs series measured 16 writers
// on a device that can hold 16 open zones).
const DefaultGCGeometry = "zone_size=1M&zones=256&max_open=19&max_active=19"

// DefaultLifetimesGeometry is the lifetimes workload's default device:
// DefaultGCGeometry's 256 zones and limits, the zones 4 MiB, 1 GiB in
// all. The workload syncs every eighth of a zone (its writers' appends
// interleave at that grain in a shared zone stream, as none's do), and
// every sync is a record with a 4 KiB header (engine/record.go): on
// 1 MiB zones a sync every 128 KiB paid 3.1% of the bytes in headers,
// and the log's 4 KiB records of creates, removes and zone resets 1%
// more, a floor mru pays whatever it places (1.045 against none's
// 1.720: 0.61x, the target 0.6x; bench gc --workload lifetimes
// --repeat 3 --measure 2). Real zoned devices have zones of 96 MiB to 2 GiB, and
// a store syncs every MiB or so (Pebble's bytes_per_sync is 512 KiB,
// the sync grain here) inside them; 4 MiB zones bring the floor to
// 1.013. The zone count stays 256, as many GC victims as the other
// workloads' device has: on few zones none pays less (none/greedy WAF
// 1.45-1.54 on 96 or 128 zones of 1 to 4 MiB, 1.69-1.91 on 192 to 512
// zones of 1 to 4 MiB), since the files' sizes are counted in zones and
// their lifetimes in capacities; 64 zones of 4 MiB, the others' 256 MiB,
// cannot hold 16 writers' files of up to 4 zones in the live data at
// all. On this device mru/greedy's WAF was 1.027 against none/greedy's
// 1.909, 0.54x (make run's --measure 0.3), and 1.044 against 1.858,
// 0.56x, with --measure 2. The other workloads keep 1 MiB zones: their
// records follow their random 8 KiB writes, not the zone size,
// and their runs are the longer part of make run.
const DefaultLifetimesGeometry = "zone_size=4M&zones=256&max_open=19&max_active=19"

// DefaultSeedGeometry is the seed workload's default device: a null:
// device (no storage: every write completes as an io_uring NOP, as on
// null_blk without memory_backed) of 512 zones of 4 MiB, of which the
// workload writes a share so small (20%: 16 files of 25 MiB) that GC
// never runs. The xfs series measured the allocation path on a device
// fast enough not to hide it; on an emulated device every write is a
// copy into a file and every flush a sync of it, and the run measures
// those instead. 4 MiB zones: the files' extent maps (a random 8 KiB
// write each) must fit a metadata zone's checkpoint, and a run writes
// 400 MiB, long enough (a second or so) to time. zone_serial=1: each
// zone takes one write at a time, as a zoned block device does (see
// zns.Null). What the series gains is writers not queueing for one
// zone's write pointer; without it a null: device completes any number
// of writes per zone at once, nothing stands for the write pointer, and
// the verdict read the machine's noise (0.96x-1.23x between make runs).
// completion_nsec=20000: each write takes 20 us of device time, a kernel
// timer, as the VM's null_blk (completion_nsec=20000, irqmode=2) that
// separated mru from none (1.22x-1.52x). With zone_serial alone a write
// cost only the ring's round trip, and writers sharing a zone queued for
// CPU time, not device time: the ratio was each run's CPU share
// (0.55x-1.16x per round). One value for both configurations.
const DefaultSeedGeometry = "zone_size=4M&zones=512&max_open=19&max_active=19&zone_serial=1&completion_nsec=20000"

// DefaultGCConfigs is the set run when no flag chooses one: both
// placements that matter under greedy GC, and mru under cost-benefit GC
// for hotcold, whose verdicts read it (cost-benefit against none/greedy
// and mru/greedy). uniform, lifetimes and seed run the two greedy
// configurations: uniform's verdict reads mru/greedy against the model,
// and its cost-benefit run (which only said "no better than greedy")
// paid for its longer measured span (Steady.UniformSpan) in make run's
// 3 minutes; --configs adds it back.
var DefaultGCConfigs = map[string][]string{
	WorkUniform:   {"mru/greedy", "none/greedy"},
	WorkHotCold:   {"mru/greedy", "none/greedy", "mru/cost-benefit"},
	WorkLifetimes: {"mru/greedy", "none/greedy"},
	WorkSeed:      {"mru/greedy", "none/greedy"},
}

// GCOptions configure bench gc.
type GCOptions struct {
	Workloads []string // of Workloads
	Files     int
	BS        int64 // bytes per write (uniform, hotcold, seed)
	IODepth   int
	Util      float64 // live data as a fraction of the engine's capacity
	// HotShare of the overwrites go to HotFiles of the files (hotcold).
	HotShare, HotFiles float64
	Configs            []string // placement/gc-policy pairs (nil: DefaultGCConfigs)
	CacheBytes         int64
	OpenZones          int // data zones open at once (0: from the device's limits)
	Repeat             int // rounds; each runs every workload and configuration once
	Steady             Steady
	Out                string // folder for charts, CSV and JSON ("": none)
	Seed               uint64
	Sample             time.Duration // interval between samples of the series
	JSON               bool
	// Force erases a device given that holds data (see CheckErasable).
	Force bool
	// Progress, if set, gets a progress bar (a terminal's stderr).
	Progress io.Writer
}

// DefaultGC is bench gc without flags.
var DefaultGC = GCOptions{Workloads: Workloads, Files: 16, BS: 8 << 10, IODepth: 4, Util: 0.8,
	HotShare: 0.8, HotFiles: 0.2, CacheBytes: 4 << 20, Repeat: 1,
	Steady: DefaultSteady, Out: "zonefold-bench-gc", Seed: 1, Sample: 20 * time.Millisecond}

// gcSetup is one configuration bench gc compares.
type gcSetup struct {
	placement engine.Policy
	gc        engine.GCPolicy
	// streams is GC's streams (engine.GCConfig.Streams), 0 for the
	// engine's choice: the configuration names it only when set.
	streams int
	// noBackground turns background GC off (engine.GCConfig.Disabled):
	// writers still collect when space runs out. Named /no-bg, to A/B
	// what background passes do to a workload's WAF.
	noBackground bool
}

func (s gcSetup) String() string {
	name := s.placement.String() + "/" + s.gc.String()
	switch s.streams {
	case 0:
	case 1:
		name += "/1-stream"
	default:
		name += fmt.Sprintf("/%d-streams", s.streams)
	}
	if s.noBackground {
		name += "/no-bg"
	}
	return name
}

// parseGCSetups reads configurations: placement/gc-policy, and optionally
// /1-stream or /2-streams for GC's streams (default: the engine's
// choice) and /no-bg for no background GC.
func parseGCSetups(names []string) ([]gcSetup, error) {
	if len(names) == 0 {
		return nil, errors.New("no configuration to run")
	}
	var out []gcSetup
	for _, n := range names {
		parts := strings.Split(strings.TrimSpace(n), "/")
		if len(parts) < 2 || len(parts) > 4 {
			return nil, fmt.Errorf("configuration %q: want placement/gc-policy[/N-streams][/no-bg], e.g. mru/greedy or mru/cost-benefit/1-stream", n)
		}
		var s gcSetup
		var err error
		if s.placement, err = engine.ParsePolicy(parts[0]); err != nil {
			return nil, err
		}
		if s.gc, err = engine.ParseGCPolicy(parts[1]); err != nil {
			return nil, err
		}
		for _, part := range parts[2:] {
			switch {
			case part == "1-stream" && s.streams == 0:
				s.streams = 1
			case part == "2-streams" && s.streams == 0:
				s.streams = 2
			case part == "no-bg" && !s.noBackground:
				s.noBackground = true
			default:
				return nil, fmt.Errorf("configuration %q: %q: want 1-stream, 2-streams or no-bg, each once", n, part)
			}
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out, nil
}

// gcRun is one run: one workload under one configuration in one round.
type gcRun struct {
	Round     int     `json:"round"`
	HostMiBps float64 `json:"host_mib_per_s"`
	WAF       float64 `json:"waf"`
	Steady    bool    `json:"steady"`
	Warmup    float64 `json:"warmup_capacities"` // host writes before measuring
	Why       string  `json:"steady_note"`
	HostBytes int64   `json:"host_bytes"` // measured part
	DevBytes  int64   `json:"dev_bytes"`
	GCBytes   int64   `json:"gc_bytes"`
	// Of DevBytes: record headers, zone-tail padding, metadata; the rest
	// is client data and GCBytes.
	HeaderBytes int64   `json:"header_bytes"`
	PadBytes    int64   `json:"pad_bytes"`
	MetaBytes   int64   `json:"meta_bytes"`
	GCShare     float64 `json:"gc_share"`
	Resets      int64   `json:"zones_reset"`
	// Shared counts files mru placement sent into another file's zone
	// for want of one of their own (the engine's zones_shared).
	Shared int64 `json:"zones_shared"`
	// Whole: the same run's placement and GC over all of it (warm-up
	// too): where mru's copies come from.
	Whole   gcWhole `json:"whole_run"`
	Seconds float64 `json:"seconds"`
	P50us   float64 `json:"p50_us"`
	P99us   float64 `json:"p99_us"`
	// ValidBytes is the zones' valid bytes at the end; LiveBytes what the
	// workload's files hold then, where it is known (uniform, hotcold:
	// the fill).
	ValidBytes int64 `json:"valid_bytes"`
	LiveBytes  int64 `json:"live_bytes,omitempty"`
	// CircZones is the zones' space written (valid or not) and FreeZones
	// the free zones, each the mean over the measured part: what the
	// uniform model's T stands for (see uniformCirculation).
	CircZones float64 `json:"circulation_zones"`
	FreeZones float64 `json:"free_zones"`
	// FileWritesCV is the coefficient of variation of the files' host
	// writes in the measured part (uniform): about 0.02 when the
	// engine serves the writers in turn. It read 0.5-1.2, one file
	// written 25 to 250 times as often as another, while the cache's
	// throttle let a writer that came back from its last write go
	// ahead of those waiting (see cache.throttle).
	FileWritesCV float64 `json:"file_writes_cv,omitempty"`

	samples []sample
	zones   []engine.ZoneValid
}

// gcRow is one workload under one configuration over all rounds: the
// median and the range of each figure.
type gcRow struct {
	Workload  string `json:"workload"`
	Placement string `json:"placement"`
	GCPolicy  string `json:"gc_policy"`
	// GCStreams is the GC streams the configuration asked for; 0: the
	// engine's choice.
	GCStreams int `json:"gc_streams,omitempty"`
	// NoBackground: background GC was off (the configuration's /no-bg).
	NoBackground bool    `json:"no_background_gc,omitempty"`
	WAF          float64 `json:"waf"` // median over the rounds
	WAFMin       float64 `json:"waf_min"`
	WAFMax       float64 `json:"waf_max"`
	// WAFNoMeta is the WAF without metadata (log records, checkpoints),
	// the median over the rounds: what the uniform model predicts.
	WAFNoMeta float64 `json:"waf_without_meta"`
	HostMiBps float64 `json:"host_mib_per_s"` // median
	MiBpsMin  float64 `json:"mib_per_s_min"`
	MiBpsMax  float64 `json:"mib_per_s_max"`
	GCShare   float64 `json:"gc_share"` // median
	GCBytes   int64   `json:"gc_bytes"` // median
	// Parts is the WAF taken apart, each part a median over the rounds
	// of its bytes per host byte.
	Parts  wafParts `json:"waf_parts"`
	Shared int64    `json:"zones_shared"` // median
	Whole  gcWhole  `json:"whole_run"`    // medians
	P99us  float64  `json:"p99_us"`       // median
	// CircZones and FreeZones are the runs' (gcRun) medians.
	CircZones float64 `json:"circulation_zones"`
	FreeZones float64 `json:"free_zones"`
	Steady    int     `json:"steady_runs"`
	Warmup    float64 `json:"warmup_capacities"` // median
	// Baseline is the none run the ratios compare with: the same GC
	// policy, else the first none configuration.
	Baseline   string   `json:"baseline,omitempty"`
	MiBpsRatio *float64 `json:"throughput_vs_none,omitempty"` // ratio of medians
	WAFRatio   *float64 `json:"waf_vs_none,omitempty"`
	Runs       []*gcRun `json:"runs"`
}

func (r *gcRow) setup() gcSetup {
	p, _ := engine.ParsePolicy(r.Placement)
	g, _ := engine.ParseGCPolicy(r.GCPolicy)
	return gcSetup{placement: p, gc: g, streams: r.GCStreams, noBackground: r.NoBackground}
}

func (r *gcRow) name() string { return r.setup().String() }

// gcWorkloadSummary is one workload's table.
type gcWorkloadSummary struct {
	Workload string  `json:"workload"`
	Device   string  `json:"device"`
	Capacity int64   `json:"capacity"`
	Shape    string  `json:"shape"`
	RefWAF   float64 `json:"reference_waf,omitempty"` // the chart's reference line
	RefNote  string  `json:"reference_note,omitempty"`
	// RefNone is uniform's line under none (uniformLines); 0 elsewhere.
	RefNone  float64 `json:"reference_waf_none,omitempty"`
	Rows     []*gcRow
	geometry engine.GCConfig
	// uniform is what uniform's greedy line is drawn from (nil for
	// the other workloads): summarizeGC draws it again with the data
	// share the runs measured (uniformLine).
	uniform *uniformRef
}

// gcSummary is summary.json and the --json output.
type gcSummary struct {
	Repeat  int      `json:"repeat"`
	Seed    uint64   `json:"seed"`
	Steady  Steady   `json:"steady_rule"`
	Configs []*gcRow `json:"configs"`
	// Verdict compares each workload with its expectation.
	Verdict   []string             `json:"verdict"`
	workloads []*gcWorkloadSummary // the tables, in order
}

func (o GCOptions) validate() error {
	switch {
	case o.Files < 1 || o.Files > 4096:
		return fmt.Errorf("--files %d: want 1..4096", o.Files)
	case o.IODepth < 1 || o.IODepth > 1024:
		return fmt.Errorf("--iodepth %d: want 1..1024", o.IODepth)
	case !(o.Util > 0 && o.Util <= 0.95):
		return fmt.Errorf("--util %v: want more than 0 and at most 0.95 (GC needs free zones)", o.Util)
	case o.BS < engine.BlockSize || o.BS%engine.BlockSize != 0 || o.BS > 16<<20:
		return fmt.Errorf("--bs %s: want a multiple of %s up to 16 MiB", given(int64(o.BS)), human(engine.BlockSize))
	case o.CacheBytes < 1<<20:
		return fmt.Errorf("--cache %s: want at least 1 MiB", human(o.CacheBytes))
	case o.Repeat < 1 || o.Repeat > 100:
		return fmt.Errorf("--repeat %d: want 1..100", o.Repeat)
	case o.Sample < time.Millisecond:
		return fmt.Errorf("--sample %v: want at least 1ms", o.Sample)
	case !(o.HotShare > 0 && o.HotShare < 1 && o.HotFiles > 0 && o.HotFiles < 1):
		return fmt.Errorf("--skew %v/%v: want shares between 0 and 1", o.HotShare, o.HotFiles)
	}
	return o.Steady.validate()
}

// GC runs the workloads under several engine configurations, each run on
// a freshly formatted device (erased; same geometry, same seed), in
// rounds that alternate the configurations, and prints one table per
// workload; with no device it makes temporary emulated ones of
// DefaultGCGeometry (DefaultSeedGeometry for seed, DefaultLifetimesGeometry
// for lifetimes).
func GC(ctx context.Context, stdout io.Writer, device string, o GCOptions) error {
	if o.Out == "" {
		return errors.New("--out: want a folder")
	}
	_, statErr := os.Stat(o.Out)
	sum, err := measureGC(ctx, device, o)
	if err != nil {
		if errors.Is(statErr, os.ErrNotExist) {
			os.Remove(o.Out) // made for this run: gone again if still empty
		}
		return err
	}
	if o.JSON {
		return WriteJSON(stdout, sum)
	}
	return printGC(stdout, o.Out, sum)
}

// gcDevices hands out a fresh device per run.
type gcDevices struct {
	device string // the user's, or "" for temporary ones
	dir    string
}

func newGCDevices(device string, workloads []string) (*gcDevices, func(), error) {
	if strings.HasPrefix(device, "null:") && slices.ContainsFunc(workloads, func(w string) bool { return w != WorkSeed }) {
		return nil, nil, errors.New("bench gc needs a device that keeps data (GC reads record headers back); null: does not (it serves the seed workload alone): use emu: or a zoned device")
	}
	d := &gcDevices{device: device}
	if device != "" {
		return d, func() {}, nil
	}
	parent := ""
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		parent = "/dev/shm"
	}
	dir, err := os.MkdirTemp(parent, "zonefold-bench-gc-")
	if err != nil && parent != "" {
		dir, err = os.MkdirTemp("", "zonefold-bench-gc-")
	}
	if err != nil {
		return nil, nil, fmt.Errorf("default device: %w", err)
	}
	d.dir = dir
	return d, func() { os.RemoveAll(dir) }, nil
}

// defaultGeometry is the geometry of a workload's default device.
func defaultGeometry(workload string) string {
	switch workload {
	case WorkSeed:
		return DefaultSeedGeometry
	case WorkLifetimes:
		return DefaultLifetimesGeometry
	}
	return DefaultGCGeometry
}

// shown is how the output names the device of a workload.
func (d *gcDevices) shown(workload string) string {
	if d.device != "" {
		return d.device
	}
	if workload == WorkSeed {
		return "null:?" + DefaultSeedGeometry
	}
	where := "temporary"
	if strings.HasPrefix(d.dir, "/dev/shm") {
		where = "temporary, in memory"
	}
	return "emu:(" + where + ")?" + defaultGeometry(workload)
}

// fresh is a device string for the next run: the user's device (each run
// formats it), a null: device for seed, or a new emulated device file, so
// that no blocks are left over from the run before.
func (d *gcDevices) fresh(workload string) (string, error) {
	if d.device != "" {
		return d.device, nil
	}
	if workload == WorkSeed {
		return "null:?" + DefaultSeedGeometry, nil
	}
	path := filepath.Join(d.dir, "dev")
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("default device: %w", err)
	}
	return "emu:" + path + "?" + defaultGeometry(workload), nil
}

// measureGC runs every round and, if o.Out is set, writes the charts,
// series and summary there.
func measureGC(ctx context.Context, device string, o GCOptions) (sum gcSummary, err error) {
	sum = gcSummary{Repeat: o.Repeat, Seed: o.Seed, Steady: o.Steady}
	if err := o.validate(); err != nil {
		return sum, badOption(err)
	}
	if err := CheckErasable(device, o.Force); err != nil {
		return sum, err
	}
	// A bench that fails removes an emu file it created, whichever run
	// failed.
	defer func(remove func(error)) { remove(err) }(removeIfCreated(device))
	workloads, err := ParseWorkloads(o.Workloads)
	if err != nil {
		return sum, badOption(err)
	}
	setups := map[string][]gcSetup{}
	runs := 0
	for _, w := range workloads {
		names := o.Configs
		if names == nil {
			names = DefaultGCConfigs[w]
		}
		if setups[w], err = parseGCSetups(names); err != nil {
			return sum, badOption(err)
		}
		runs += o.Repeat * len(setups[w])
	}
	devs, cleanup, err := newGCDevices(device, workloads)
	if err != nil {
		return sum, err
	}
	defer cleanup()
	if o.Out != "" {
		if err := os.MkdirAll(o.Out, 0o755); err != nil {
			return sum, fmt.Errorf("--out: %w", err)
		}
	}
	rows := map[string][]*gcRow{}
	for _, w := range workloads {
		ws := &gcWorkloadSummary{Workload: w, Device: devs.shown(w)}
		for _, s := range setups[w] {
			row := &gcRow{Workload: w, Placement: s.placement.String(), GCPolicy: s.gc.String(), GCStreams: s.streams, NoBackground: s.noBackground}
			ws.Rows = append(ws.Rows, row)
			rows[w] = append(rows[w], row)
		}
		sum.workloads = append(sum.workloads, ws)
	}
	var bar *progressbar.ProgressBar
	if o.Progress != nil {
		bar = progressbar.NewOptions(runs,
			progressbar.OptionSetWriter(o.Progress), progressbar.OptionShowCount(),
			progressbar.OptionSetWidth(20), progressbar.OptionSetDescription("bench gc"),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(o.Progress) }))
	}
	for round := range o.Repeat {
		for wi, w := range workloads {
			ws := sum.workloads[wi]
			// Alternate the order of the configurations round by round,
			// so that none always runs first or last.
			for j := range setups[w] {
				k := (j + round) % len(setups[w])
				s := setups[w][k]
				if bar != nil {
					bar.Describe(fmt.Sprintf("bench gc round %d/%d %s %s", round+1, o.Repeat, w, s))
				}
				dev, err := devs.fresh(w)
				if err != nil {
					return sum, err
				}
				r, err := runGCOnce(ctx, dev, w, s, o, ws)
				if ctx.Err() != nil {
					// Every worker saw the cancellation: one line says it.
					return sum, fmt.Errorf("%s %s: interrupted: %w", w, s, ctx.Err())
				}
				if err != nil {
					return sum, fmt.Errorf("%s %s: %w", w, s, err)
				}
				r.Round = round + 1
				row := rows[w][k]
				row.Runs = append(row.Runs, r)
				if bar != nil {
					_ = bar.Add(1)
				}
			}
		}
	}
	if bar != nil {
		_ = bar.Finish()
	}
	summarizeGC(&sum)
	if o.Out != "" {
		if err := writeGCOutputs(o.Out, sum); err != nil {
			return sum, err
		}
	}
	return sum, nil
}

// runGCOnce formats dev, runs workload w under configuration s, and
// closes the engine.
func runGCOnce(ctx context.Context, dev, w string, s gcSetup, o GCOptions, ws *gcWorkloadSummary) (*gcRun, error) {
	cfg := engine.Config{CacheBytes: o.CacheBytes, MaxOrder: 9, OpenZones: o.OpenZones, Policy: s.placement}
	cfg.GC.Policy, cfg.GC.Streams, cfg.GC.Disabled = s.gc, s.streams, s.noBackground
	e, release, err := OpenFormatted(dev, cfg)
	if err != nil {
		return nil, err
	}
	defer release()
	slog.Debug("bench gc: run", "workload", w, "config", s, "device", dev)
	b := EngineBackend{E: e}
	spec := Spec{Kind: w, Files: o.Files, BS: o.BS, IODepth: o.IODepth, Util: o.Util,
		HotShare: o.HotShare, HotFiles: o.HotFiles, ZoneSize: e.Geometry().ZoneCap, Seed: o.Seed}
	capacity := b.Capacity()
	if err := spec.check(capacity); err != nil {
		e.Close()
		return nil, err
	}
	if ws.Capacity == 0 {
		ws.Capacity, ws.Shape = capacity, spec.describe(capacity)
		ws.RefWAF, ws.RefNote, ws.uniform = referenceWAF(spec, e)
	} else if ws.Capacity != capacity {
		e.Close()
		return nil, fmt.Errorf("capacity %d differs from the first run's %d: the device changed", capacity, ws.Capacity)
	}
	g := newGen(spec, b)
	before := e.Stats()
	circ := sampleCirculation(e, &g.measuring, o.Sample/4)
	ph, res, runErr := runControlled(ctx, g, o.Steady, o.Sample)
	circZones, freeZones := circ()
	whole := wholeRun(e.Stats().Sub(before))
	closeErr := e.Close()
	if runErr != nil {
		return nil, runErr
	}
	if closeErr != nil {
		return nil, closeErr
	}
	r := &gcRun{Steady: ph.steady, Warmup: ph.warm, Why: ph.why, samples: ph.samples, Shared: whole.Shared, Whole: whole,
		P50us: micros(res.P50), P99us: micros(res.P99), CircZones: circZones, FreeZones: freeZones}
	if w == WorkUniform {
		r.FileWritesCV = g.fileWritesCV()
	}
	from, end, final := ph.from, ph.end, ph.final
	// The device bytes of the measured part are those of the host bytes
	// written in it: the final writeback brings in what it left in the
	// cache, and what the cache held when it began (written before it)
	// is left out. Counting that in made lifetimes' data part 1.002-
	// 1.015 per host byte in the window where the whole run's is 1.000
	// (every byte written once): up to 16 writers' 128 KiB before their
	// next fsync, about 1% of a 0.3-capacity window.
	r.HostBytes, r.DevBytes = final.Host-from.Host, final.Dev-from.Dev-from.Unwritten
	r.GCBytes, r.Resets = final.GC-from.GC, final.Resets-from.Resets
	r.HeaderBytes, r.PadBytes, r.MetaBytes = final.Headers-from.Headers, final.Pad-from.Pad, final.Meta-from.Meta
	if r.HostBytes > 0 {
		r.WAF = float64(r.DevBytes) / float64(r.HostBytes)
	}
	// Throughput and GC share over the writers' time: the final
	// writeback is untimed.
	if secs := end.Seconds - from.Seconds; secs > 0 {
		r.Seconds = secs
		r.HostMiBps = mibPerS(end.Host-from.Host, time.Duration(secs*float64(time.Second)))
		r.GCShare = min(1, float64(end.GCNanos-from.GCNanos)/1e9/secs)
	}
	// The engine is closed: GC has stopped, so the zones' valid bytes
	// are a consistent snapshot.
	r.zones = b.ZoneValidity()
	for _, z := range r.zones {
		r.ValidBytes += z.Valid
	}
	if w == WorkUniform || w == WorkHotCold {
		r.LiveBytes = spec.fileSize(capacity) * int64(spec.Files) // the fill
	}
	return r, nil
}

// sampleCirculation samples e's zones in circulation (capacity less
// the unwritten bytes of free and open zones) and its free zones every
// interval while measuring is set, until the function it returns is
// called, which gives their means in zones (0 without a sample).
func sampleCirculation(e *engine.Engine, measuring *atomic.Bool, every time.Duration) func() (circ, free float64) {
	stop, done := make(chan struct{}), make(chan struct{})
	var circSum, freeSum float64
	n := 0
	go func() {
		defer close(done)
		t := time.NewTicker(max(every, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			if measuring.Load() {
				st := e.Stats()
				circSum += float64(e.Capacity() - st.Unwritten)
				freeSum += float64(st.FreeZones)
				n++
			}
		}
	}()
	return func() (float64, float64) {
		close(stop)
		<-done
		if n == 0 {
			return 0, 0
		}
		zc := float64(e.Geometry().ZoneCap)
		return circSum / float64(n) / zc, freeSum / float64(n)
	}
}

// describe is the workload's shape for the table's heading.
func (s Spec) describe(capacity int64) string {
	switch s.Kind {
	case WorkUniform:
		return fmt.Sprintf("%d files x %s (%.0f%% of %s), random %s overwrites, iodepth %d",
			s.Files, human(s.fileSize(capacity)), s.Util*100, human(capacity), given(s.BS), s.IODepth)
	case WorkHotCold:
		return fmt.Sprintf("%d files x %s (%.0f%% of %s), random %s overwrites, %.0f%% of them to %d hot files, iodepth %d",
			s.Files, human(s.fileSize(capacity)), s.Util*100, human(capacity), given(s.BS), s.HotShare*100, s.hotFiles(), s.IODepth)
	case WorkLifetimes:
		return fmt.Sprintf("%d writers, files of %s to %s written sequentially (%s writes, fsync every %s), %.0f%% short-lived; live data held at %.0f%% of %s",
			s.Files, human(s.ZoneSize/4), human(4*s.ZoneSize), human(lifetimeBS), human(max(lifetimeBS, s.ZoneSize/8)), shortShare*100, s.Util*100, human(capacity))
	case WorkSeed:
		return fmt.Sprintf("%d files x %s written with random %s writes, iodepth %d (%.0f%% of %s: GC barely runs)",
			s.Files, human(s.fileSize(capacity)), given(s.BS), s.IODepth, seedShare*100, human(capacity))
	}
	return s.Kind
}

// figure is one figure of every run of a row.
func (r *gcRow) figure(f func(*gcRun) float64) []float64 {
	out := make([]float64, len(r.Runs))
	for i, run := range r.Runs {
		out[i] = f(run)
	}
	return out
}

// summarizeGC computes the medians, ranges, ratios and verdicts.
func summarizeGC(sum *gcSummary) {
	for _, ws := range sum.workloads {
		for _, r := range ws.Rows {
			waf := r.figure(func(x *gcRun) float64 { return x.WAF })
			mbps := r.figure(func(x *gcRun) float64 { return x.HostMiBps })
			r.WAF, r.WAFMin, r.WAFMax = report.Median(waf), slices.Min(waf), slices.Max(waf)
			r.HostMiBps, r.MiBpsMin, r.MiBpsMax = report.Median(mbps), slices.Min(mbps), slices.Max(mbps)
			r.GCShare = report.Median(r.figure(func(x *gcRun) float64 { return x.GCShare }))
			r.GCBytes = int64(report.Median(r.figure(func(x *gcRun) float64 { return float64(x.GCBytes) })))
			r.WAFNoMeta = report.Median(r.figure(func(x *gcRun) float64 { return x.part(x.DevBytes - x.MetaBytes) }))
			r.Parts = wafParts{
				Data: report.Median(r.figure(func(x *gcRun) float64 {
					return x.part(x.DevBytes - x.HeaderBytes - x.PadBytes - x.MetaBytes - x.GCBytes)
				})),
				Headers: report.Median(r.figure(func(x *gcRun) float64 { return x.part(x.HeaderBytes) })),
				Pad:     report.Median(r.figure(func(x *gcRun) float64 { return x.part(x.PadBytes) })),
				Meta:    report.Median(r.figure(func(x *gcRun) float64 { return x.part(x.MetaBytes) })),
				GC:      report.Median(r.figure(func(x *gcRun) float64 { return x.part(x.GCBytes) })),
			}
			r.Shared = int64(report.Median(r.figure(func(x *gcRun) float64 { return float64(x.Shared) })))
			r.Whole = gcWhole{
				Shared:        int64(report.Median(r.figure(func(x *gcRun) float64 { return float64(x.Whole.Shared) }))),
				SharedBusy:    int64(report.Median(r.figure(func(x *gcRun) float64 { return float64(x.Whole.SharedBusy) }))),
				TailsFinished: int64(report.Median(r.figure(func(x *gcRun) float64 { return float64(x.Whole.TailsFinished) }))),
				Copied:        int64(report.Median(r.figure(func(x *gcRun) float64 { return float64(x.Whole.Copied) }))),
				Empty:         int64(report.Median(r.figure(func(x *gcRun) float64 { return float64(x.Whole.Empty) }))),
				PerCopied:     int64(report.Median(r.figure(func(x *gcRun) float64 { return float64(x.Whole.PerCopied) }))),
				Overhead:      medianOverhead(r),
			}
			r.P99us = report.Median(r.figure(func(x *gcRun) float64 { return x.P99us }))
			r.CircZones = report.Median(r.figure(func(x *gcRun) float64 { return x.CircZones }))
			r.FreeZones = report.Median(r.figure(func(x *gcRun) float64 { return x.FreeZones }))
			r.Warmup = report.Median(r.figure(func(x *gcRun) float64 { return x.Warmup }))
			r.Steady = 0
			for _, x := range r.Runs {
				if x.Steady {
					r.Steady++
				}
			}
		}
		for _, r := range ws.Rows {
			if base := gcBaseline(ws.Rows, r); base != nil && base.HostMiBps > 0 && base.WAF > 0 {
				mbps, waf := r.HostMiBps/base.HostMiBps, r.WAF/base.WAF
				r.Baseline, r.MiBpsRatio, r.WAFRatio = base.name(), &mbps, &waf
			}
			sum.Configs = append(sum.Configs, r)
		}
		if ws.uniform != nil {
			ws.RefWAF, ws.RefNone, ws.RefNote = uniformLines(ws.uniform, findRow(ws.Rows, "mru/greedy").dataShare(), findRow(ws.Rows, "none/greedy").dataShare())
		}
		sum.Verdict = append(sum.Verdict, verdicts(ws)...)
	}
}

// medianOverhead is each overhead part's median over r's runs.
func medianOverhead(r *gcRow) overheadParts {
	m := func(f func(o overheadParts) float64) float64 {
		return report.Median(r.figure(func(x *gcRun) float64 { return f(x.Whole.Overhead) }))
	}
	return overheadParts{
		Records:     m(func(o overheadParts) float64 { return o.Records }),
		Splits:      m(func(o overheadParts) float64 { return o.Splits }),
		GCRecords:   m(func(o overheadParts) float64 { return o.GCRecords }),
		Pad:         m(func(o overheadParts) float64 { return o.Pad }),
		Creates:     m(func(o overheadParts) float64 { return o.Creates }),
		Removes:     m(func(o overheadParts) float64 { return o.Removes }),
		Resets:      m(func(o overheadParts) float64 { return o.Resets }),
		OtherOps:    m(func(o overheadParts) float64 { return o.OtherOps }),
		Checkpoints: m(func(o overheadParts) float64 { return o.Checkpoints }),
	}
}

// gcBaseline is the none placement row r compares with: the one with r's
// GC policy and streams, else with its GC policy, else the first none
// row, else nil.
func gcBaseline(rows []*gcRow, r *gcRow) *gcRow {
	var policy, first *gcRow
	for _, b := range rows {
		if b.Placement != engine.PolicyNone.String() {
			continue
		}
		if b.GCPolicy == r.GCPolicy && b.GCStreams == r.GCStreams && b.NoBackground == r.NoBackground {
			return b
		}
		if b.GCPolicy == r.GCPolicy && policy == nil {
			policy = b
		}
		if first == nil {
			first = b
		}
	}
	if policy != nil {
		return policy
	}
	return first
}

// gcWhole is what placement and GC did over a whole run: files sent
// into another file's zone (those into a zone still being written
// apart: their appends interleave), and GC's victims, those it copied
// valid data out of and what each cost, and those that held only garbage.
type gcWhole struct {
	Shared     int64 `json:"zones_shared"`
	SharedBusy int64 `json:"zones_shared_busy"`
	// TailsFinished counts zones given up at a file's close, their
	// room too short for the next file (engine.Config.FinishTail).
	TailsFinished int64 `json:"zones_tail_finished"`
	Copied        int64 `json:"victims_copied"`
	Empty         int64 `json:"victims_empty"`
	PerCopied     int64 `json:"gc_bytes_per_copied"`
	// Overhead takes the headers and metadata of the whole run apart.
	Overhead overheadParts `json:"overhead"`
}

// overheadParts is what a run wrote beside data and GC's copies, by
// cause, in device bytes per host byte over the whole run (warm-up too:
// the measured part's counters do not tell the causes apart). Headers:
// a block per client record (Records, of them Splits for records cut in
// two at a zone's end) and per GC record (GCRecords); pads; metadata:
// the log's records of creates, removes, GC's zone resets and the rest,
// and checkpoints.
type overheadParts struct {
	Records     float64 `json:"record_headers"`
	Splits      float64 `json:"split_headers"`
	GCRecords   float64 `json:"gc_headers"`
	Pad         float64 `json:"pad"`
	Creates     float64 `json:"meta_creates"`
	Removes     float64 `json:"meta_removes"`
	Resets      float64 `json:"meta_resets"`
	OtherOps    float64 `json:"meta_other"`
	Checkpoints float64 `json:"checkpoints"`
}

// overhead takes d's headers and metadata apart per host byte.
func overhead(d engine.Stats) overheadParts {
	if d.HostWritten <= 0 {
		return overheadParts{}
	}
	per := func(n int64) float64 { return float64(n) / float64(d.HostWritten) }
	return overheadParts{
		Records: per(d.DevHeaders - d.GCHeaders), Splits: per(d.RecordsSplit * engine.BlockSize), GCRecords: per(d.GCHeaders),
		Pad: per(d.DevPad), Creates: per(d.DevMetaCreates), Removes: per(d.DevMetaRemoves), Resets: per(d.DevMetaResets),
		OtherOps: per(d.DevMetaOther), Checkpoints: per(d.DevCheckpoint),
	}
}

func wholeRun(d engine.Stats) gcWhole {
	w := gcWhole{Shared: d.ZonesShared, SharedBusy: d.ZonesSharedBusy, TailsFinished: d.ZonesTailFinished, Copied: d.GCCopied, Empty: max(0, d.GCResets-d.GCCopied),
		Overhead: overhead(d)}
	if d.GCCopied > 0 {
		w.PerCopied = d.GCWritten / d.GCCopied
	}
	return w
}

// wafParts is a WAF taken apart: device bytes of each kind per host
// byte. Data is below 1 where the cache absorbed overwrites before
// writeback.
type wafParts struct {
	Data    float64 `json:"data"`
	Headers float64 `json:"headers"`
	Pad     float64 `json:"pad"`
	Meta    float64 `json:"meta"`
	GC      float64 `json:"gc"`
}

// part is n device bytes per host byte of the run's measured part.
func (x *gcRun) part(n int64) float64 {
	if x.HostBytes <= 0 {
		return 0
	}
	return float64(n) / float64(x.HostBytes)
}

// row finds a configuration's row, or nil.
func findRow(rows []*gcRow, name string) *gcRow {
	for _, r := range rows {
		if r.name() == name {
			return r
		}
	}
	return nil
}

func printGC(out io.Writer, dir string, sum gcSummary) error {
	fmt.Fprintf(out, "gc: %s, configurations alternating; each figure the median over the rounds [min-max];\n", report.Plural(sum.Repeat, "round"))
	fmt.Fprintf(out, "    measured for %.2g device capacities (uniform: %.2g) once the WAF of successive %.2g-capacity windows changes by less than %.0f%% (warm-up cap %.2g)\n",
		sum.Steady.Span, sum.Steady.forWorkload(WorkUniform).Span, sum.Steady.Window, sum.Steady.Tol*100, sum.Steady.Cap)
	for _, ws := range sum.workloads {
		fmt.Fprintf(out, "\n%s: %s, on %s\n", ws.Workload, ws.Shape, ws.Device)
		if ws.RefNote != "" {
			fmt.Fprintf(out, "  reference: %s\n", ws.RefNote)
		}
		tw := newTable(out)
		fmt.Fprintln(tw, "placement/gc\tWAF\t[min-max]\thost MiB/s\t[min-max]\tGC share\tGC MiB\tshared\tp99 us\tsteady\twarm-up\tMiB/s vs none\tWAF vs none\t")
		for _, r := range ws.Rows {
			fmt.Fprintf(tw, "%s\t%.3f\t[%.3f-%.3f]\t%.1f\t[%.1f-%.1f]\t%.0f%%\t%.1f\t%d\t%.0f\t%d/%d\t%.2f\t%s\t%s\t\n",
				r.name(), r.WAF, r.WAFMin, r.WAFMax, r.HostMiBps, r.MiBpsMin, r.MiBpsMax, 100*r.GCShare,
				float64(r.GCBytes)/(1<<20), r.Shared, r.P99us, r.Steady, len(r.Runs), r.Warmup, ratioCell(r.MiBpsRatio), ratioCell(r.WAFRatio))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, r := range ws.Rows {
			p := r.Parts
			fmt.Fprintf(out, "  %s WAF parts (medians): data %.3f + headers %.3f + pad %.3f + meta %.3f + GC %.3f\n",
				r.name(), p.Data, p.Headers, p.Pad, p.Meta, p.GC)
			w := r.Whole
			fmt.Fprintf(out, "    whole run: GC copied %d victims (%.0f KiB each), reset %d empty; %d files shared a zone, %d of them one being written; %d short tails finished\n",
				w.Copied, float64(w.PerCopied)/1024, w.Empty, w.Shared, w.SharedBusy, w.TailsFinished)
			o := w.Overhead
			fmt.Fprintf(out, "    whole run, beside data and copies, per host byte: headers %.4f = client records %.4f (zone-end splits %.4f of it) + GC records %.4f; pad %.4f; meta %.4f = creates %.4f + removes %.4f + zone resets %.4f + other %.4f + checkpoints %.4f\n",
				o.Records+o.GCRecords, o.Records, o.Splits, o.GCRecords, o.Pad,
				o.Creates+o.Removes+o.Resets+o.OtherOps+o.Checkpoints, o.Creates, o.Removes, o.Resets, o.OtherOps, o.Checkpoints)
		}
		for _, r := range ws.Rows {
			for _, x := range r.Runs {
				if !x.Steady {
					fmt.Fprintf(out, "  %s round %d: %s\n", r.name(), x.Round, x.Why)
				}
			}
		}
	}
	printFooter(out, sum.Verdict, dir)
	return nil
}

// printFooter ends a run's table: a blank line, the verdict lines, and
// where the charts went (dir, if set).
func printFooter(out io.Writer, verdicts []string, dir string) {
	fmt.Fprintln(out)
	for _, v := range verdicts {
		fmt.Fprintln(out, v)
	}
	if dir != "" {
		fmt.Fprintf(out, "charts, series and summary in %s\n", dir)
	}
}

func ratioCell(r *float64) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%.2fx", *r)
}
