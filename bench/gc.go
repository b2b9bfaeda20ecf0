package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/zonefold/zonefold/engine"
)

// DefaultGCGeometry is the embedded default device of bench gc: an
// emulated zoned device in a temporary folder.
//
// 192 zones of 4 MiB: 760 MiB of data zones, so that at 80% utilisation the
// 16 files hold 38 MiB each and GC has 150 MiB of slack to work with; small
// zones give GC many victims to choose from, and keep 16 open zones (64 MiB)
// a small part of the device.
//
// max_open = max_active = 18: the engine keeps one zone for metadata and one
// for GC, which leaves exactly 16 for data — one per file. The device limits
// are tight (every open zone is in use) but never below the file count: per
// file placement is only meaningful while each file can have its own zone,
// and with more files than open zones mru degenerates into sharing the least
// recently used zone (the xfs series measured 16 writers on a device that
// can hold 16 open zones).
const DefaultGCGeometry = "zone_size=4M&zones=192&max_open=18&max_active=18"

// DefaultGCConfigs is the set run when no flag chooses one: every placement
// under greedy GC, and cost-benefit GC under mru placement.
var DefaultGCConfigs = []string{"mru/greedy", "none/greedy", "round-robin/greedy", "mru/cost-benefit"}

// GCOptions configure bench gc.
type GCOptions struct {
	Files      int
	BS         int64 // bytes per overwrite
	IODepth    int
	Util       float64  // live data as a fraction of the engine's capacity
	Passes     float64  // device capacities the overwrite phase writes
	Configs    []string // placement/gc-policy pairs
	CacheBytes int64
	OpenZones  int    // data zones open at once (0: from the device's limits)
	Out        string // folder for charts, CSV and JSON ("" in seeds: none)
	Seed       uint64
	Sample     time.Duration // interval between samples of the series
	JSON       bool
	// Progress, if set, gets a progress bar (a terminal's stderr).
	Progress io.Writer
}

// DefaultGC is bench gc without flags.
var DefaultGC = GCOptions{Files: 16, BS: 8 << 10, IODepth: 4, Util: 0.8, Passes: 3, Configs: DefaultGCConfigs,
	CacheBytes: 16 << 20, Out: "zonefold-bench-gc", Seed: 1, Sample: 250 * time.Millisecond}

// gcSetup is one configuration bench gc compares.
type gcSetup struct {
	placement engine.Policy
	gc        engine.GCPolicy
}

func (s gcSetup) String() string { return s.placement.String() + "/" + s.gc.String() }

func parseGCSetups(names []string) ([]gcSetup, error) {
	if len(names) == 0 {
		return nil, errors.New("no configuration to run")
	}
	var out []gcSetup
	seen := map[gcSetup]bool{}
	for _, n := range names {
		p, g, ok := strings.Cut(strings.TrimSpace(n), "/")
		if !ok {
			return nil, fmt.Errorf("configuration %q: want placement/gc-policy, e.g. mru/greedy", n)
		}
		var s gcSetup
		var err error
		if s.placement, err = engine.ParsePolicy(p); err != nil {
			return nil, err
		}
		if s.gc, err = engine.ParseGCPolicy(g); err != nil {
			return nil, err
		}
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out, nil
}

// gcWorkload is the workload every configuration runs.
type gcWorkload struct {
	files, iodepth int
	bs             int64
	size           int64 // bytes per file
	ops            int64 // overwrites per file
	capacity       int64 // the engine's data zones' bytes
	seed           uint64
	sample         time.Duration
}

func (w gcWorkload) fillBytes() int64      { return int64(w.files) * w.size }
func (w gcWorkload) overwriteBytes() int64 { return int64(w.files) * w.ops * w.bs }

// gcSample is one point of a configuration's series, counted from the
// start of the overwrite phase.
type gcSample struct {
	Seconds float64
	Host    int64 // bytes the workload wrote
	Dev     int64 // bytes written to the device
	GC      int64 // bytes GC relocated
	Resets  int64
}

// gcRun is what one configuration did in the overwrite phase.
type gcRun struct {
	Placement   string   `json:"placement"`
	GCPolicy    string   `json:"gc_policy"`
	HostMiBps   float64  `json:"host_mib_per_s"`
	WAF         float64  `json:"waf"`
	SteadyWAF   float64  `json:"steady_waf"`
	HostBytes   int64    `json:"host_bytes"`
	DevBytes    int64    `json:"dev_bytes"`
	GCBytes     int64    `json:"gc_bytes"`
	GCReadBytes int64    `json:"gc_read_bytes"`
	GCSeconds   float64  `json:"gc_seconds"`
	Seconds     float64  `json:"seconds"`
	GCShare     float64  `json:"gc_share"`
	ZonesReset  int64    `json:"zones_reset"`
	P50us       float64  `json:"p50_us"`
	P99us       float64  `json:"p99_us"`
	LiveBytes   int64    `json:"live_bytes"`
	ValidBytes  int64    `json:"valid_bytes"`        // the zone histogram's sum
	Baseline    string   `json:"baseline,omitempty"` // the none run the ratios compare with
	MiBpsRatio  *float64 `json:"throughput_vs_none,omitempty"`
	WAFRatio    *float64 `json:"waf_vs_none,omitempty"`

	samples []gcSample
	zones   []engine.ZoneValid
}

func (r *gcRun) name() string { return r.Placement + "/" + r.GCPolicy }

// gcSummary is summary.json and the --json output.
type gcSummary struct {
	Device      string  `json:"device"`
	Files       int     `json:"files"`
	BS          int64   `json:"bs"`
	IODepth     int     `json:"iodepth"`
	Utilisation float64 `json:"utilisation"`
	Passes      float64 `json:"passes"`
	Capacity    int64   `json:"capacity"`
	FileSize    int64   `json:"file_size"`
	Seed        uint64  `json:"seed"`
	Configs     []gcRun `json:"configs"`
	// Verdict says, per GC policy, whether mru beats none.
	Verdict []string `json:"verdict"`
}

func (o GCOptions) validate() error {
	switch {
	case o.Files < 1 || o.Files > 4096:
		return fmt.Errorf("--files %d: want 1..4096", o.Files)
	case o.IODepth < 1 || o.IODepth > 1024:
		return fmt.Errorf("--iodepth %d: want 1..1024", o.IODepth)
	case !(o.Util > 0 && o.Util <= 0.95):
		return fmt.Errorf("--util %v: want more than 0 and at most 0.95 (GC needs free zones)", o.Util)
	case !(o.Passes > 0 && o.Passes <= 1000):
		return fmt.Errorf("--passes %v: want more than 0 and at most 1000", o.Passes)
	case o.Sample < time.Millisecond:
		return fmt.Errorf("--sample %v: want at least 1ms", o.Sample)
	}
	return nil
}

// GC runs one workload under several engine configurations, each on a
// freshly formatted device (erased; same geometry, same seed), and prints
// the comparison; with no device it makes a temporary emulated one of
// DefaultGCGeometry.
func GC(ctx context.Context, stdout io.Writer, device string, o GCOptions) error {
	if o.Out == "" {
		return errors.New("--out: want a folder")
	}
	_, statErr := os.Stat(o.Out)
	sum, runs, err := measureGC(ctx, device, o)
	if err != nil {
		if errors.Is(statErr, os.ErrNotExist) {
			os.Remove(o.Out) // made for this run: gone again if still empty
		}
		return err
	}
	if o.JSON {
		return WriteJSON(stdout, sum)
	}
	return printGC(stdout, o.Out, sum, runs)
}

// measureGC runs every configuration and, if o.Out is set, writes the
// charts, series and summary there.
func measureGC(ctx context.Context, device string, o GCOptions) (gcSummary, []*gcRun, error) {
	var sum gcSummary
	if err := o.validate(); err != nil {
		return sum, nil, err
	}
	setups, err := parseGCSetups(o.Configs)
	if err != nil {
		return sum, nil, err
	}
	bs := o.BS
	if bs < engine.BlockSize || bs%engine.BlockSize != 0 || bs > 16<<20 {
		return sum, nil, fmt.Errorf("--bs %d: want a multiple of %d up to 16M", bs, engine.BlockSize)
	}
	if o.CacheBytes < 1<<20 {
		return sum, nil, fmt.Errorf("--cache %d: want at least 1M", o.CacheBytes)
	}
	base := engine.Config{CacheBytes: o.CacheBytes, MaxOrder: 9, OpenZones: o.OpenZones}
	if strings.HasPrefix(device, "null:") {
		return sum, nil, errors.New("bench gc needs a device that keeps data (GC reads record headers back); null: does not: use emu: or a zoned device")
	}
	deviceFor := func() (string, error) { return device, nil }
	shown := device
	if device == "" {
		dir, err := os.MkdirTemp("", "zonefold-bench-gc-")
		if err != nil {
			return sum, nil, fmt.Errorf("default device: %w", err)
		}
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, "dev")
		shown = "emu:(temporary)?" + DefaultGCGeometry
		// A new file for every configuration: the same geometry, and no
		// blocks (or page cache) left over from the previous one.
		deviceFor = func() (string, error) {
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return "", fmt.Errorf("default device: %w", err)
			}
			return "emu:" + path + "?" + DefaultGCGeometry, nil
		}
	}
	if o.Out != "" {
		if err := os.MkdirAll(o.Out, 0o755); err != nil {
			return sum, nil, fmt.Errorf("--out: %w", err)
		}
	}

	var w gcWorkload
	var bar *progressbar.ProgressBar
	var doneBefore int64 // progress of the configurations already run
	runs := make([]*gcRun, 0, len(setups))
	for i, s := range setups {
		cfg := base
		cfg.Policy, cfg.GC.Policy = s.placement, s.gc
		dev, err := deviceFor()
		if err != nil {
			return sum, nil, err
		}
		e, release, err := OpenFormatted(dev, cfg)
		if err != nil {
			return sum, nil, fmt.Errorf("%s: %w", s, err)
		}
		if i == 0 {
			if w, err = sizeGCWorkload(o, bs, e.Capacity()); err != nil {
				e.Close()
				release()
				return sum, nil, err
			}
			if o.Progress != nil {
				bar = newProgress(o.Progress, int64(len(setups))*(w.fillBytes()+w.overwriteBytes()), "bench gc")
			}
		} else if c := e.Capacity(); c != w.capacity {
			e.Close()
			release()
			return sum, nil, fmt.Errorf("%s: capacity %d differs from the first configuration's %d: the device changed", s, c, w.capacity)
		}
		progress := func(done int64) {}
		if bar != nil {
			bar.Describe("bench gc " + s.String())
			progress = func(done int64) { _ = bar.Set64(doneBefore + done) }
		}
		slog.Debug("bench gc: configuration", "config", s, "device", dev)
		r, runErr := runGCSetup(ctx, e, s, w, progress)
		closeErr := e.Close()
		release()
		if ctx.Err() != nil {
			// Every worker saw the cancellation: one line says it.
			return sum, nil, fmt.Errorf("%s: interrupted: %w", s, ctx.Err())
		}
		if runErr != nil {
			return sum, nil, fmt.Errorf("%s: %w", s, runErr)
		}
		if closeErr != nil {
			return sum, nil, fmt.Errorf("%s: %w", s, closeErr)
		}
		r.takeZones(e)
		runs = append(runs, r)
		doneBefore += w.fillBytes() + w.overwriteBytes()
	}
	if bar != nil {
		_ = bar.Finish()
		fmt.Fprintln(o.Progress)
	}
	sum = summarizeGC(shown, o, w, runs)
	if o.Out != "" {
		if err := writeGCOutputs(o.Out, sum, runs, w); err != nil {
			return sum, nil, err
		}
	}
	return sum, runs, nil
}

// sizeGCWorkload turns the flags into per-file sizes for a capacity.
func sizeGCWorkload(o GCOptions, bs, capacity int64) (gcWorkload, error) {
	w := gcWorkload{files: o.Files, iodepth: o.IODepth, bs: bs, capacity: capacity, seed: o.Seed, sample: o.Sample}
	w.size = int64(o.Util*float64(capacity)) / int64(o.Files) / bs * bs
	if w.size < bs*int64(o.IODepth) {
		return w, fmt.Errorf("a capacity of %d bytes at --util %v gives each of %d files %d bytes: less than --iodepth writes of --bs", capacity, o.Util, o.Files, w.size)
	}
	w.ops = max(1, int64(o.Passes*float64(capacity))/int64(o.Files)/bs)
	return w, nil
}

// runGCSetup fills the files, then overwrites them, sampling the engine's
// counters as it goes.
func runGCSetup(ctx context.Context, e *engine.Engine, s gcSetup, w gcWorkload, progress func(int64)) (*gcRun, error) {
	fill := Workload{Files: w.files, BS: int(w.bs), IODepth: w.iodepth, Size: w.size, RW: "write", Seed: w.seed, Prefix: "gc",
		Progress: func(done, _ int64) { progress(done) }}
	if _, err := RunWorkload(ctx, e, fill); err != nil {
		return nil, fmt.Errorf("fill: %w", err)
	}
	r := &gcRun{Placement: s.placement.String(), GCPolicy: s.gc.String(), LiveBytes: w.fillBytes()}
	before := e.Stats()
	start := time.Now()
	sample := func() {
		d := e.Stats().Sub(before)
		r.samples = append(r.samples, gcSample{Seconds: time.Since(start).Seconds(),
			Host: d.HostWritten, Dev: d.DevWritten(), GC: d.GCWritten, Resets: d.GCResets})
	}
	sample()
	over := fill
	over.RW, over.Keep, over.Ops, over.Seed = "randwrite", true, w.ops, w.seed+1
	over.Progress = func(done, _ int64) { progress(w.fillBytes() + done) }
	// Sample runs on RunWorkload's one ticker goroutine, which has ended
	// when RunWorkload returns.
	over.Sample, over.SampleEvery = func(int64) { sample() }, w.sample
	res, err := RunWorkload(ctx, e, over)
	if err != nil {
		return nil, fmt.Errorf("overwrite: %w", err)
	}
	sample() // after the final writeback: the series ends at the totals
	r.Seconds = time.Since(start).Seconds()
	st := res.Stats
	r.HostMiBps = res.MiBps()
	r.WAF = st.WAF()
	r.SteadyWAF = steadyWAF(r.samples)
	r.HostBytes, r.DevBytes = st.HostWritten, st.DevWritten()
	r.GCBytes, r.GCReadBytes, r.ZonesReset = st.GCWritten, st.GCRead, st.GCResets
	r.GCSeconds = time.Duration(st.GCNanos).Seconds()
	if r.Seconds > 0 {
		r.GCShare = r.GCSeconds / r.Seconds
	}
	r.P50us, r.P99us = micros(res.P50), micros(res.P99)
	return r, nil
}

// takeZones records the zones' valid bytes once e is closed: background
// GC moves valid bytes from a victim to the GC zone one extent at a time,
// so a snapshot taken while it runs can be off by the extents in flight.
func (r *gcRun) takeZones(e *engine.Engine) {
	r.zones = e.ZoneValidity()
	r.ValidBytes = 0
	for _, z := range r.zones {
		r.ValidBytes += z.Valid
	}
}

// steadyWAF is the WAF over the second half of the phase's host bytes:
// the first half includes the time before the free space ran out and GC
// started.
func steadyWAF(ss []gcSample) float64 {
	if len(ss) < 2 {
		return 0
	}
	last := ss[len(ss)-1]
	mid := ss[0]
	for _, s := range ss {
		if s.Host > last.Host/2 {
			break
		}
		mid = s
	}
	if last.Host == mid.Host {
		return 0
	}
	return float64(last.Dev-mid.Dev) / float64(last.Host-mid.Host)
}

// summarizeGC computes the ratios against none and the verdict.
func summarizeGC(device string, o GCOptions, w gcWorkload, runs []*gcRun) gcSummary {
	sum := gcSummary{Device: device, Files: w.files, BS: w.bs, IODepth: w.iodepth, Utilisation: o.Util,
		Passes: o.Passes, Capacity: w.capacity, FileSize: w.size, Seed: w.seed}
	for _, r := range runs {
		if base := gcBaseline(runs, r.GCPolicy); base != nil && base.HostMiBps > 0 && base.WAF > 0 {
			mbps, waf := r.HostMiBps/base.HostMiBps, r.WAF/base.WAF
			r.Baseline, r.MiBpsRatio, r.WAFRatio = base.name(), &mbps, &waf
		}
		sum.Configs = append(sum.Configs, *r)
	}
	for _, r := range runs {
		if r.Placement != engine.PolicyMRU.String() || r.WAFRatio == nil {
			continue
		}
		sum.Verdict = append(sum.Verdict, verdictLine(r, gcBaseline(runs, r.GCPolicy)))
	}
	if len(sum.Verdict) == 0 {
		sum.Verdict = append(sum.Verdict, "no mru and none pair with the same GC policy ran: no verdict")
	}
	return sum
}

// gcBaseline is the none placement run with the given GC policy, else
// the first none run, else nil.
func gcBaseline(runs []*gcRun, gcPolicy string) *gcRun {
	var first *gcRun
	for _, r := range runs {
		if r.Placement != engine.PolicyNone.String() {
			continue
		}
		if r.GCPolicy == gcPolicy {
			return r
		}
		if first == nil {
			first = r
		}
	}
	return first
}

// verdictLine says whether mru beat none on WAF and throughput, and says
// so plainly when it did not.
func verdictLine(mru, none *gcRun) string {
	wafOK, tputOK := mru.WAF < none.WAF, mru.HostMiBps > none.HostMiBps
	what := fmt.Sprintf("WAF %.3f vs %.3f (%.2fx), throughput %.1f vs %.1f MiB/s (%.2fx)",
		mru.WAF, none.WAF, *mru.WAFRatio, mru.HostMiBps, none.HostMiBps, *mru.MiBpsRatio)
	pair := mru.name() + " vs " + none.name()
	switch {
	case wafOK && tputOK:
		return fmt.Sprintf("%s: mru beats none on WAF and on throughput, as expected: %s", pair, what)
	case wafOK:
		return fmt.Sprintf("%s: SHORT of the expectation: mru beats none on WAF but not on throughput: %s", pair, what)
	case tputOK:
		return fmt.Sprintf("%s: SHORT of the expectation: mru beats none on throughput but not on WAF: %s", pair, what)
	}
	return fmt.Sprintf("%s: SHORT of the expectation: mru beats none on neither WAF nor throughput: %s", pair, what)
}

func printGC(out io.Writer, dir string, sum gcSummary, runs []*gcRun) error {
	fmt.Fprintf(out, "gc: %s, %d files x %s (%.0f%% of %s), random %s overwrites, iodepth %d, %.3g device capacities\n\n",
		sum.Device, sum.Files, human(sum.FileSize), sum.Utilisation*100, human(sum.Capacity), human(sum.BS), sum.IODepth, sum.Passes)
	tw := newTable(out)
	fmt.Fprintln(tw, "placement/gc\thost MiB/s\tWAF\tsteady WAF\tGC MiB\tGC share\tresets\tp50 us\tp99 us\tMiB/s vs none\tWAF vs none\t")
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%.1f\t%.3f\t%.3f\t%.1f\t%.1f%%\t%d\t%.0f\t%.0f\t%s\t%s\t\n", r.name(), r.HostMiBps, r.WAF, r.SteadyWAF,
			float64(r.GCBytes)/(1<<20), 100*r.GCShare, r.ZonesReset, r.P50us, r.P99us, ratioCell(r.MiBpsRatio), ratioCell(r.WAFRatio))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	for _, v := range sum.Verdict {
		fmt.Fprintln(out, v)
	}
	fmt.Fprintf(out, "charts, series and summary in %s\n", dir)
	return nil
}

func ratioCell(r *float64) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%.2fx", *r)
}
