package bench

// bench peers: the bench gc workloads on one zoned block device, through
// zonefold and through the kernel's zoned file systems, one table per
// workload. Every row's WAF is the block device's own written-bytes
// counter over the bytes the workload wrote, zonefold's included, so the
// rows compare alike.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/internal/report"
	"github.com/zonefold/zonefold/server"
	"github.com/zonefold/zonefold/zns"
)

// TargetZonefold is zonefold's row in bench peers; the others are the
// kernel file systems' names.
const TargetZonefold = "zonefold"

// PeerTargets are bench peers' targets, in table order.
var PeerTargets = []string{TargetZonefold, "f2fs", "btrfs", "xfs"}

// PeersOptions configure bench peers.
type PeersOptions struct {
	Targets   []string // of PeerTargets
	Workloads []string // of Workloads
	Files     int
	// Writers is the lifetimes workload's writers (0: Files). Each has a
	// file of up to 4 zones in flight, so a small device may need fewer
	// writers than files.
	Writers int
	BS      int64 // bytes per write (uniform, hotcold, seed)
	IODepth int
	// Util is the live data as a fraction of each target's own usable
	// capacity (zonefold's data zones; a kernel file system's free space
	// when empty, as df shows it).
	Util               float64
	HotShare, HotFiles float64
	// CacheBytes is zonefold's cache; the kernel's dirty page limit is
	// set to what zonefold lets be dirty (half of it), so that neither
	// side's cache absorbs more overwrites than the other's.
	CacheBytes int64
	OpenZones  int // zonefold's data zones open at once (0: from the device)
	Steady     Steady
	Repeat     int // rounds, the targets alternating within each
	// RunLimit, if set, bounds each run's workload (fill, warm-up and
	// measured part): a target still writing then gets its row with that
	// reason, so that one slow target (btrfs on its way to ENOSPC, under
	// QEMU's TCG) cannot hold up the others.
	RunLimit time.Duration
	Force    bool
	Seed     uint64
	Sample   time.Duration
	Out      string // folder for charts, CSV and JSON ("": none)
	JSON     bool
	// Progress, if set, gets a line per run (a terminal's stderr).
	Progress io.Writer
}

// DefaultPeers is bench peers without flags.
var DefaultPeers = PeersOptions{Targets: PeerTargets, Workloads: Workloads, Files: 16, BS: 8 << 10, IODepth: 4,
	Util: 0.8, HotShare: 0.8, HotFiles: 0.2, CacheBytes: 4 << 20, Steady: DefaultSteady, Repeat: 1,
	Seed: 1, Sample: 250 * time.Millisecond, Out: "zonefold-bench-peers"}

func (o PeersOptions) validate() error {
	switch {
	case len(o.Targets) == 0:
		return errors.New("--targets: want at least one of " + strings.Join(PeerTargets, ", "))
	case o.Files < 1 || o.Files > 4096:
		return fmt.Errorf("--files %d: want 1..4096", o.Files)
	case o.Writers < 0 || o.Writers > 4096:
		return fmt.Errorf("--writers %d: want 1..4096, or 0 for --files", o.Writers)
	case o.IODepth < 1 || o.IODepth > 1024:
		return fmt.Errorf("--iodepth %d: want 1..1024", o.IODepth)
	case o.BS < engine.BlockSize || o.BS%engine.BlockSize != 0 || o.BS > 16<<20:
		return fmt.Errorf("--bs %s: want a multiple of %s up to 16 MiB", given(int64(o.BS)), human(engine.BlockSize))
	case !(o.Util > 0 && o.Util <= 0.95):
		return fmt.Errorf("--util %v: want more than 0 and at most 0.95 (GC needs free zones)", o.Util)
	case o.CacheBytes < 1<<20:
		return fmt.Errorf("--cache %s: want at least 1 MiB", human(o.CacheBytes))
	case o.Repeat < 1 || o.Repeat > 100:
		return fmt.Errorf("--repeat %d: want 1..100", o.Repeat)
	case o.Sample < time.Millisecond:
		return fmt.Errorf("--sample %v: want at least 1ms", o.Sample)
	case o.RunLimit < 0:
		return fmt.Errorf("--run-limit %v: want 0 (none) or more", o.RunLimit)
	}
	for _, t := range o.Targets {
		if !slices.Contains(PeerTargets, t) {
			return fmt.Errorf("--targets: %q: want %s", t, strings.Join(PeerTargets, ", "))
		}
	}
	if _, err := ParseWorkloads(o.Workloads); err != nil {
		return err
	}
	return o.Steady.validate()
}

// PeerRun is one run of one target on one workload.
type PeerRun struct {
	Round     int     `json:"round"`
	Capacity  int64   `json:"capacity"` // the target's usable bytes
	HostMiBps float64 `json:"host_mib_per_s"`
	WAF       float64 `json:"waf"` // device counter / host bytes, measured part
	HostBytes int64   `json:"host_bytes"`
	DevBytes  int64   `json:"dev_bytes"`
	GCBytes   int64   `json:"gc_bytes"` // -1: the target does not say
	GCZones   int64   `json:"gc_zones"` // -1: the target does not say
	Seconds   float64 `json:"seconds"`
	Steady    bool    `json:"steady"`
	Warmup    float64 `json:"warmup_capacities"`
	Why       string  `json:"why"`
	P50us     float64 `json:"p50_us"`
	P99us     float64 `json:"p99_us"`
	Error     string  `json:"error,omitempty"` // why the run did not finish
	// Breakdown is zonefold's own account of what it wrote, whole run
	// (the device counter's WAF does not say what the bytes were).
	Breakdown  string `json:"zonefold_breakdown,omitempty"`
	FailedHost int64  `json:"failed_after_host_bytes,omitempty"`
	// Wall is the whole run's wall time: reset, mkfs, fill, writers,
	// final writeback, unmount.
	Wall float64 `json:"wall_seconds"`

	samples []sample
}

// PeerRow is one target's runs of one workload and their medians.
type PeerRow struct {
	Target string `json:"target"`
	// Skipped says why the target did not run at all (this kernel or its
	// tools cannot).
	Skipped string     `json:"skipped,omitempty"`
	Runs    []*PeerRun `json:"runs,omitempty"`
	// Error is the first failed run's error; the medians are over the
	// runs that finished.
	Error     string   `json:"error,omitempty"`
	Capacity  int64    `json:"capacity,omitempty"`
	HostMiBps float64  `json:"host_mib_per_s"`
	MiBpsMin  float64  `json:"mib_per_s_min"`
	MiBpsMax  float64  `json:"mib_per_s_max"`
	WAF       float64  `json:"waf"`
	WAFMin    float64  `json:"waf_min"`
	WAFMax    float64  `json:"waf_max"`
	GCBytes   int64    `json:"gc_bytes"`
	GCZones   int64    `json:"gc_zones"`
	P99us     float64  `json:"p99_us"`
	MiBpsVsZF *float64 `json:"throughput_vs_zonefold,omitempty"` // higher is better
	WAFVsZF   *float64 `json:"waf_vs_zonefold,omitempty"`        // lower is better
}

func (r *PeerRow) done() []*PeerRun {
	var out []*PeerRun
	for _, run := range r.Runs {
		if run.Error == "" {
			out = append(out, run)
		}
	}
	return out
}

// PeerWorkload is one workload's table.
type PeerWorkload struct {
	Workload string     `json:"workload"`
	Shape    string     `json:"shape"`
	Rows     []*PeerRow `json:"rows"`
}

// PeersSummary is summary.json and the --json output.
type PeersSummary struct {
	Date      string          `json:"date"`
	Device    string          `json:"device"`
	Kernel    string          `json:"kernel"`
	Geometry  string          `json:"geometry"`
	Util      float64         `json:"utilisation"`
	Cache     int64           `json:"cache"`
	DirtyMax  int64           `json:"kernel_dirty_bytes"`
	Seed      uint64          `json:"seed"`
	Repeat    int             `json:"repeat"`
	Steady    Steady          `json:"steady"`
	RunLimit  float64         `json:"run_limit_seconds,omitempty"`
	Workloads []*PeerWorkload `json:"workloads"`
	// Targets say whether zonefold met its targets against the best
	// kernel file system of each workload that has one.
	Targets []string `json:"targets"`
}

// Peers runs bench peers on device and prints the tables (or JSON).
func Peers(ctx context.Context, stdout io.Writer, device string, o PeersOptions) error {
	sum, stopped := measurePeers(ctx, device, o)
	if sum == nil {
		return stopped
	}
	// A run that stopped early (a hung target) still prints what it has;
	// the error says why the rest is missing.
	var err error
	if o.JSON {
		err = WriteJSON(stdout, sum)
	} else {
		err = printPeers(stdout, o.Out, sum)
	}
	return errors.Join(err, stopped)
}

// peerTarget is zonefold or one kernel file system.
type peerTarget struct {
	name string
	kfs  *kernelFS // nil for zonefold
}

// open makes the target on d (reset) and returns it as a backend, and
// the function that unmounts or closes it.
func (t peerTarget) open(ctx context.Context, d *peerDevice, o PeersOptions) (Backend, func() error, error) {
	if t.kfs == nil {
		dev, err := zns.Open(d.path, zns.Options{})
		if err != nil {
			return nil, nil, err
		}
		e, err := engine.FormatAndOpen(dev, engine.Config{CacheBytes: o.CacheBytes, MaxOrder: 9, OpenZones: o.OpenZones})
		if err != nil {
			dev.Close()
			return nil, nil, err
		}
		return deviceCounted{EngineBackend: EngineBackend{E: e}, dev: d}, e.Close, nil
	}
	m, err := makeKernelFS(ctx, *t.kfs, d.path)
	if err != nil {
		return nil, nil, err
	}
	b, err := newKernelFSBackend(m, d)
	if err != nil {
		return nil, nil, errors.Join(err, m.unmount())
	}
	return b, m.unmount, nil
}

// deviceCounted is the engine as a bench peers target: its device bytes
// from the block device's counter, as the kernel file systems' are.
type deviceCounted struct {
	EngineBackend
	dev *peerDevice
}

// Counters implements Backend.
func (b deviceCounted) Counters() Counters {
	k := b.EngineBackend.Counters()
	k.DevWritten = b.dev.counter()
	return k
}

// errPeerUnsafe marks a failure after which the device may still be in
// use (a file system that would not unmount): bench peers stops there
// rather than reset zones under it.
var errPeerUnsafe = errors.New("cannot go on with the device in this state")

// hungGrace is how long a run's writers get to return once its context
// is done (--run-limit, an interrupt) before the target counts as hung:
// a writer blocked in a kernel file system (btrfs on 6.1, in D state)
// never returns, and bench peers then reports what it has.
var hungGrace = time.Minute

// errPeerHung marks a target whose writers did not return: bench peers
// stops there, with the tables of what finished.
var errPeerHung = errors.New("its writers are blocked in the kernel")

func measurePeers(ctx context.Context, device string, o PeersOptions) (*PeersSummary, error) {
	if err := o.validate(); err != nil {
		return nil, badOption(err)
	}
	workloads, _ := ParseWorkloads(o.Workloads)
	d, err := openPeerDevice(device, o.Force)
	if err != nil {
		return nil, err
	}
	// The daemon's claim, for the whole run: no zonefold daemon may serve
	// the device while bench peers erases it.
	lock, err := server.LockDevice(device)
	if err != nil {
		return nil, err
	}
	defer lock.Release()
	dirty := o.CacheBytes / 2
	restore, err := dirtyLimit(dirty)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := restore(); err != nil {
			slog.Warn("bench peers: could not restore the kernel's dirty page limits", "err", err)
		}
	}()
	if o.Out != "" {
		if err := os.MkdirAll(o.Out, 0o755); err != nil {
			return nil, fmt.Errorf("--out: %w", err)
		}
	}
	rel, _ := kernelRelease()
	sum := &PeersSummary{Date: time.Now().UTC().Format("2006-01-02"), Device: device, Kernel: rel, Geometry: d.describe(),
		Util: o.Util, Cache: o.CacheBytes, DirtyMax: dirty, Seed: o.Seed, Repeat: o.Repeat, Steady: o.Steady,
		RunLimit: o.RunLimit.Seconds()}
	var targets []peerTarget
	skipped := map[string]string{}
	for _, name := range PeerTargets {
		if !slices.Contains(o.Targets, name) {
			continue
		}
		t := peerTarget{name: name}
		if k, ok := kernelFSByName(name); ok {
			t.kfs = &k
			if why := k.unsupported(); why != "" {
				skipped[name] = why
			}
		}
		targets = append(targets, t)
	}
	rows := map[string][]*PeerRow{}
	for _, w := range workloads {
		pw := &PeerWorkload{Workload: w, Shape: o.shape(w)}
		for _, t := range targets {
			pw.Rows = append(pw.Rows, &PeerRow{Target: t.name, Skipped: skipped[t.name]})
		}
		rows[w] = pw.Rows
		sum.Workloads = append(sum.Workloads, pw)
	}
	var stopped error
runs:
	for round := range o.Repeat {
		for _, w := range workloads {
			for i, t := range targets {
				row := rows[w][i]
				if row.Skipped != "" {
					continue
				}
				if o.Progress != nil {
					fmt.Fprintf(o.Progress, "bench peers: round %d/%d, %s on %s ...\n", round+1, o.Repeat, w, t.name)
				}
				start := time.Now()
				r, err := runPeerOnce(ctx, d, t, w, o)
				if ctx.Err() != nil {
					return nil, fmt.Errorf("%s on %s: interrupted: %w", w, t.name, ctx.Err())
				}
				if errors.Is(err, errPeerHung) {
					// The device is still in use: nothing more can run,
					// but what finished is reported.
					r.Round, r.Wall = round+1, time.Since(start).Seconds()
					row.Runs = append(row.Runs, r)
					stopped = fmt.Errorf("%s on %s: %w; bench peers stopped there", w, t.name, err)
					if o.Progress != nil {
						fmt.Fprintf(o.Progress, "bench peers: %s on %s: %s\n", w, t.name, r.oneLine())
					}
					notRun(sum, fmt.Sprintf("not run: bench peers stopped when %s hung on %s", t.name, w))
					break runs
				}
				if err != nil {
					return nil, fmt.Errorf("%s on %s: %w", w, t.name, err)
				}
				r.Round, r.Wall = round+1, time.Since(start).Seconds()
				row.Runs = append(row.Runs, r)
				if o.Progress != nil {
					fmt.Fprintf(o.Progress, "bench peers: %s on %s: %s\n", w, t.name, r.oneLine())
				}
			}
		}
	}
	summarizePeers(sum)
	if o.Out != "" {
		if err := writePeersOutputs(o.Out, sum); err != nil {
			return nil, err
		}
	}
	return sum, stopped
}

// notRun marks the rows that have no run yet, when bench peers stops early.
func notRun(sum *PeersSummary, why string) {
	for _, pw := range sum.Workloads {
		for _, r := range pw.Rows {
			if r.Skipped == "" && len(r.Runs) == 0 {
				r.Skipped = why
			}
		}
	}
}

// runPeerOnce resets the device, makes target t on it, runs workload w
// and takes it down. A failure of the target itself (mkfs refuses the
// device, the mount fails, the workload hits ENOSPC) is the run's Error,
// not an error: the table shows it. The error return is for what stops
// bench peers: the device failing, a file system that will not unmount.
func runPeerOnce(ctx context.Context, d *peerDevice, t peerTarget, w string, o PeersOptions) (*PeerRun, error) {
	if err := d.resetZones(); err != nil {
		return nil, err
	}
	r := &PeerRun{GCBytes: -1, GCZones: -1}
	b, closeTarget, err := t.open(ctx, d, o)
	if err != nil {
		if errors.Is(err, errPeerUnsafe) {
			return nil, err
		}
		r.Error = err.Error()
		return r, nil
	}
	slog.Debug("bench peers: run", "workload", w, "target", t.name, "device", d.path)
	r.Capacity = b.Capacity()
	spec := Spec{Kind: w, Files: o.Files, BS: o.BS, IODepth: o.IODepth, Util: o.Util,
		HotShare: o.HotShare, HotFiles: o.HotFiles, ZoneSize: d.geo.ZoneCap, Seed: o.Seed}
	if w == WorkLifetimes && o.Writers > 0 {
		spec.Files = o.Writers
	}
	var ph phase
	var res genResult
	runErr := spec.check(r.Capacity)
	if runErr == nil {
		g := newGen(spec, b)
		rctx, cancel := ctx, context.CancelFunc(func() {})
		if o.RunLimit > 0 {
			rctx, cancel = context.WithTimeout(ctx, o.RunLimit)
		}
		var hung bool
		ph, res, hung, runErr = controlledOrHung(rctx, g, o.Steady, o.Sample, hungGrace)
		limited := ctx.Err() == nil && rctx.Err() != nil
		cancel()
		if hung {
			r.FailedHost = g.host.Load()
			r.Error = fmt.Sprintf("hung: %v after its run stopped, its writers were still blocked in the kernel (%s written)",
				hungGrace, human(r.FailedHost))
			return r, fmt.Errorf("%s: %w", t.name, errPeerHung)
		}
		if runErr != nil {
			r.FailedHost = g.host.Load()
			if limited {
				runErr = overLimit(o.RunLimit, r.FailedHost, r.Capacity)
			}
			if zf, ok := b.(deviceCounted); ok {
				// For whoever looks into the failure: where the space was,
				// by zone state and by the placer's lists.
				st := zf.E.Stats()
				runErr = fmt.Errorf("%w (zones then: %s; placement lists %d free, %d open)",
					runErr, zoneCensus(zf.ZoneValidity()), st.FreeZones, st.OpenZones)
			}
		}
	}
	// Which GC counters the target has (-1: none), read while it is
	// still mounted.
	k := b.Counters()
	if zf, ok := b.(deviceCounted); ok {
		r.Breakdown = engineBreakdown(zf.E.Stats())
	}
	if err := closeTarget(); err != nil {
		// The engine failing to close is the run's failure; a kernel
		// file system that stays mounted stops everything.
		if t.kfs != nil {
			return nil, fmt.Errorf("%w: %w", err, errPeerUnsafe)
		}
		runErr = errors.Join(runErr, err)
	}
	if runErr != nil {
		r.Error = runErr.Error()
		return r, nil
	}
	from, end, final := ph.from, ph.end, ph.final
	r.Steady, r.Warmup, r.Why, r.samples = ph.steady, ph.warm, ph.why, ph.samples
	r.P50us, r.P99us = micros(res.P50), micros(res.P99)
	r.HostBytes, r.DevBytes = final.Host-from.Host, final.Dev-from.Dev
	if r.HostBytes > 0 {
		r.WAF = float64(r.DevBytes) / float64(r.HostBytes)
	}
	if secs := end.Seconds - from.Seconds; secs > 0 {
		r.Seconds = secs
		r.HostMiBps = mibPerS(end.Host-from.Host, time.Duration(secs*float64(time.Second)))
	}
	// A target without a counter reports -1 throughout: keep it unknown.
	if k.GCWritten >= 0 {
		r.GCBytes = final.GC - from.GC
	}
	if k.GCResets >= 0 {
		r.GCZones = final.Resets - from.Resets
	}
	return r, nil
}

// controlledOrHung is runControlled, unless its writers have not returned
// grace after ctx is done: then hung, and the run is left behind (its
// goroutines blocked in the kernel).
func controlledOrHung(ctx context.Context, g *gen, rule Steady, every, grace time.Duration) (ph phase, res genResult, hung bool, err error) {
	type result struct {
		ph  phase
		res genResult
		err error
	}
	ch := make(chan result, 1)
	go func() {
		ph, res, err := runControlled(ctx, g, rule, every)
		ch <- result{ph, res, err}
	}()
	select {
	case r := <-ch:
		return r.ph, r.res, false, r.err
	case <-ctx.Done():
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.ph, r.res, false, r.err
	case <-t.C:
		return phase{}, genResult{}, true, ctx.Err()
	}
}

// engineBreakdown is what the engine says it wrote, in MiB: client
// data, record headers, zone-tail padding, metadata and GC copies, and
// the appends that failed (each takes its zone out of placement).
func engineBreakdown(st engine.Stats) string {
	m := func(n int64) float64 { return float64(n) / (1 << 20) }
	return fmt.Sprintf("host %.1f MiB; device: data %.1f, headers %.1f, pad %.1f, meta %.1f, gc %.1f MiB; %d appends, %d failed; %d zones opened, %d filled, %d shared, %d reset by gc",
		m(st.HostWritten), m(st.DevData), m(st.DevHeaders), m(st.DevPad), m(st.DevMeta), m(st.GCWritten),
		st.Appends, st.AppendErrs, st.ZonesOpened, st.ZonesFilled, st.ZonesShared, st.GCResets)
}

// overLimit is the error of a run stopped by --run-limit.
func overLimit(limit time.Duration, host, capacity int64) error {
	return fmt.Errorf("did not finish within --run-limit %v: the workload had written %s (%.2f capacities)",
		limit, human(host), float64(host)/float64(max(capacity, 1)))
}

// zoneCensus counts zones by state, and the valid share of the full ones.
func zoneCensus(zones []engine.ZoneValid) string {
	count := map[string]int{}
	var valid, capacity int64
	for _, z := range zones {
		count[z.State]++
		if z.State == "full" {
			valid += z.Valid
			capacity += z.Cap
		}
	}
	s := fmt.Sprintf("%d free, %d open, %d full", count["free"], count["open"], count["full"])
	if capacity > 0 {
		s += fmt.Sprintf(" holding %.0f%% valid data", 100*float64(valid)/float64(capacity))
	}
	return s + fmt.Sprintf(", %d gc, %d meta", count["gc"], count["meta"])
}

// oneLine is a run's result for the progress output.
func (r *PeerRun) oneLine() string {
	s := fmt.Sprintf("%.1f MiB/s, WAF %.3f (%s); %.0fs in all", r.HostMiBps, r.WAF, r.Why, r.Wall)
	if r.Error != "" {
		s = fmt.Sprintf("FAILED after %.0fs: %s", r.Wall, r.Error)
	}
	if r.Breakdown != "" {
		s += "\n  zonefold's own count: " + r.Breakdown
	}
	return s
}

// shape is a workload's description for its table, sizes as fractions of
// each target's capacity (the targets offer different capacities).
func (o PeersOptions) shape(w string) string {
	switch w {
	case WorkUniform:
		return fmt.Sprintf("%d files filled to %.0f%% of the target's capacity, random %s overwrites, iodepth %d",
			o.Files, o.Util*100, given(o.BS), o.IODepth)
	case WorkHotCold:
		return fmt.Sprintf("%d files filled to %.0f%% of the target's capacity, random %s overwrites, %.0f%% of them to %.0f%% of the files, iodepth %d",
			o.Files, o.Util*100, given(o.BS), o.HotShare*100, o.HotFiles*100, o.IODepth)
	case WorkLifetimes:
		writers := o.Files
		if o.Writers > 0 {
			writers = o.Writers
		}
		return fmt.Sprintf("%d writers of whole files (a quarter zone to 4 zones, %s writes, fsync'd), deleted by lifetime; live data at %.0f%% of the target's capacity",
			writers, human(lifetimeBS), o.Util*100)
	case WorkSeed:
		return fmt.Sprintf("%d files written with random %s writes, iodepth %d, %.0f%% of the target's capacity in all: GC barely runs",
			o.Files, given(o.BS), o.IODepth, seedShare*100)
	}
	return w
}

// summarizePeers takes each row's medians and ratios against zonefold,
// and checks zonefold's targets.
func summarizePeers(sum *PeersSummary) {
	for _, pw := range sum.Workloads {
		for _, r := range pw.Rows {
			for _, run := range r.Runs {
				if run.Error != "" {
					r.Error = run.Error
					break
				}
			}
			runs := r.done()
			if len(runs) == 0 {
				continue
			}
			mbps, waf := runFigures(runs, func(x *PeerRun) float64 { return x.HostMiBps }), runFigures(runs, func(x *PeerRun) float64 { return x.WAF })
			r.HostMiBps, r.MiBpsMin, r.MiBpsMax = report.Median(mbps), slices.Min(mbps), slices.Max(mbps)
			r.WAF, r.WAFMin, r.WAFMax = report.Median(waf), slices.Min(waf), slices.Max(waf)
			r.P99us = report.Median(runFigures(runs, func(x *PeerRun) float64 { return x.P99us }))
			r.Capacity = runs[0].Capacity
			r.GCBytes, r.GCZones = int64(report.Median(runFigures(runs, func(x *PeerRun) float64 { return float64(x.GCBytes) }))),
				int64(report.Median(runFigures(runs, func(x *PeerRun) float64 { return float64(x.GCZones) })))
		}
		zf := peerRowOf(pw.Rows, TargetZonefold)
		if zf == nil || len(zf.done()) == 0 || zf.HostMiBps <= 0 || zf.WAF <= 0 {
			continue
		}
		for _, r := range pw.Rows {
			if len(r.done()) == 0 {
				continue
			}
			m, w := r.HostMiBps/zf.HostMiBps, r.WAF/zf.WAF
			r.MiBpsVsZF, r.WAFVsZF = &m, &w
		}
	}
	sum.Targets = peerTargetsMet(sum)
}

func runFigures(runs []*PeerRun, f func(*PeerRun) float64) []float64 {
	out := make([]float64, len(runs))
	for i, r := range runs {
		out[i] = f(r)
	}
	return out
}

func peerRowOf(rows []*PeerRow, target string) *PeerRow {
	for _, r := range rows {
		if r.Target == target {
			return r
		}
	}
	return nil
}

// Targets of issue 16: zonefold's WAF at most wafTarget times the best
// kernel file system's on hotcold and lifetimes, and its throughput at
// least the best one's on seed.
const wafTarget = 0.8

// peerTargetsMet says, per workload that has a target, whether zonefold
// met it against the best kernel file system that finished.
func peerTargetsMet(sum *PeersSummary) []string {
	var out []string
	for _, pw := range sum.Workloads {
		wafGoal := pw.Workload == WorkHotCold || pw.Workload == WorkLifetimes
		if !wafGoal && pw.Workload != WorkSeed {
			continue
		}
		zf := peerRowOf(pw.Rows, TargetZonefold)
		var best *PeerRow
		for _, r := range pw.Rows {
			if r.Target == TargetZonefold || len(r.done()) == 0 {
				continue
			}
			if best == nil || wafGoal && r.WAF < best.WAF || !wafGoal && r.HostMiBps > best.HostMiBps {
				best = r
			}
		}
		switch {
		case zf == nil || len(zf.done()) == 0:
			out = append(out, fmt.Sprintf("%s: no verdict: zonefold did not finish", pw.Workload))
		case best == nil:
			out = append(out, fmt.Sprintf("%s: no verdict: no kernel file system finished", pw.Workload))
		case wafGoal:
			ratio := zf.WAF / best.WAF
			out = append(out, fmt.Sprintf("%s: zonefold WAF %.3f vs %s's %.3f (the best kernel file system's): %.2fx, target <= %.1fx: %s",
				pw.Workload, zf.WAF, best.Target, best.WAF, ratio, wafTarget, met(ratio <= wafTarget)))
		default:
			ratio := zf.HostMiBps / best.HostMiBps
			out = append(out, fmt.Sprintf("%s: zonefold %.1f MiB/s vs %s's %.1f (the best kernel file system's): %.2fx, target >= 1x: %s",
				pw.Workload, zf.HostMiBps, best.Target, best.HostMiBps, ratio, met(ratio >= 1)))
		}
	}
	return out
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

func printPeers(out io.Writer, dir string, sum *PeersSummary) error {
	fmt.Fprintf(out, "peers: %s (Linux %s): %s\n", sum.Device, sum.Kernel, sum.Geometry)
	fmt.Fprintf(out, "zonefold cache %s, kernel dirty page limit %s; %s; WAF = the device's written bytes / the workload's, over the measured part\n",
		human(sum.Cache), human(sum.DirtyMax), report.Plural(sum.Repeat, "round"))
	st := sum.Steady
	fmt.Fprintf(out, "steady state: windows of %.2g capacities within %.0f%%, warm-up at most %.2g capacities, then %.2g measured",
		st.Window, st.Tol*100, st.Cap, st.Span)
	if sum.RunLimit > 0 {
		fmt.Fprintf(out, "; each run stopped after %v", time.Duration(sum.RunLimit*float64(time.Second)))
	}
	fmt.Fprintln(out)
	for _, pw := range sum.Workloads {
		fmt.Fprintf(out, "\n%s: %s\n", pw.Workload, pw.Shape)
		tw := newTable(out)
		fmt.Fprintln(tw, "target\tcapacity\thost MiB/s\tWAF\tGC MiB\tGC zones\tp99 us\tMiB/s vs zonefold\tWAF vs zonefold\tsteady\t")
		for _, r := range pw.Rows {
			switch {
			case r.Skipped != "":
				fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t  skipped: %s\n", r.Target, r.Skipped)
				continue
			case len(r.done()) == 0:
				fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\t-\t-\t  FAILED: %s\n", r.Target, capCell(r.Runs), r.Error)
				continue
			}
			note := ""
			if r.Error != "" {
				note = "  some rounds FAILED: " + r.Error
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%.0f\t%s\t%s\t%s\t%s\n", r.Target, mib(r.Capacity),
				spread(r.HostMiBps, r.MiBpsMin, r.MiBpsMax, "%.1f"), spread(r.WAF, r.WAFMin, r.WAFMax, "%.3f"),
				unknownCell(r.GCBytes, func(n int64) string { return fmt.Sprintf("%.1f", float64(n)/(1<<20)) }),
				unknownCell(r.GCZones, func(n int64) string { return fmt.Sprint(n) }),
				r.P99us, ratioCell(r.MiBpsVsZF), ratioCell(r.WAFVsZF), steadyCell(r.done()), note)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	printFooter(out, sum.Targets, dir)
	return nil
}

// spread is a median with its min-max when the rounds differ.
func spread(med, lo, hi float64, format string) string {
	s := fmt.Sprintf(format, med)
	if lo != hi {
		s += fmt.Sprintf(" ("+format+"-"+format+")", lo, hi)
	}
	return s
}

func unknownCell(n int64, f func(int64) string) string {
	if n < 0 {
		return "-"
	}
	return f(n)
}

func capCell(runs []*PeerRun) string {
	for _, r := range runs {
		if r.Capacity > 0 {
			return mib(r.Capacity)
		}
	}
	return "-"
}

// steadyCell says whether the warm-up reached steady state in every
// round, for the table (the JSON has each round's reason).
func steadyCell(runs []*PeerRun) string {
	n := 0
	for _, r := range runs {
		if r.Steady {
			n++
		}
	}
	switch {
	case n == len(runs):
		return "yes"
	case n == 0:
		return "NO"
	}
	return fmt.Sprintf("%d/%d", n, len(runs))
}

// mib is a byte count in MiB, rounded: capacities are rarely round.
func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }
