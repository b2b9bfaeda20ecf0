package bench

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/internal/report"
)

// tinyGCDevice is a device bench gc runs on in a moment: 46 data zones of
// 256 KiB, at most 7 open: 5 data zones for 4 files, GC's zone (one
// stream: two do not fit beside 16 asked-for data zones) and metadata.
func tinyGCDevice(t *testing.T) string {
	return "emu:" + filepath.Join(t.TempDir(), "dev") + "?zone_size=256K&zones=48&max_open=7&max_active=7"
}

// tinyGC is bench gc's options for tinyGCDevice: 4 files, a small cache,
// frequent samples, short windows.
func tinyGC() GCOptions {
	o := DefaultGC
	o.Files, o.CacheBytes, o.Sample, o.Util = 4, 1<<20, 5*time.Millisecond, 0.7
	o.Steady = Steady{Window: 0.25, Tol: 0.05, Cap: 1.5, Span: 0.5}
	return o
}

// One measurement of every workload, checked in both outputs: the JSON
// summary, the tables (printGC) and the files in --out.
func TestGCOutputs(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	var stdout bytes.Buffer
	o := tinyGC()
	o.JSON, o.Out, o.Configs = true, out, []string{"mru/greedy", "none/greedy"}
	gcSum, err := measureGC(t.Context(), tinyGCDevice(t), o)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(&stdout, gcSum); err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	if err := printGC(&table, out, gcSum); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"placement/gc", "[min-max]", "uniform:", "hotcold:", "lifetimes:", "seed:",
		"analytic greedy WAF", "mru/greedy", "none/greedy", "MiB/s vs none", "whole run: GC copied", "charts, series and summary in " + out} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	var sum struct {
		Repeat  int      `json:"repeat"`
		Configs []*gcRow `json:"configs"`
		Verdict []string `json:"verdict"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout.String())
	}
	if sum.Repeat != 1 || len(sum.Configs) != len(Workloads)*2 {
		t.Fatalf("repeat %d, %d configurations; want 1 and %d (each workload x mru, none)", sum.Repeat, len(sum.Configs), len(Workloads)*2)
	}
	for i, c := range sum.Configs {
		name := c.Workload + " " + c.name()
		if c.Workload != Workloads[i/2] || c.name() != []string{"mru/greedy", "none/greedy"}[i%2] {
			t.Errorf("configuration %d is %s", i, name)
		}
		if len(c.Runs) != 1 {
			t.Errorf("%s: %d runs; want one", name, len(c.Runs))
			continue
		}
		if !(c.WAFMin <= c.WAF && c.WAF <= c.WAFMax && c.WAFMin > 0) || !(c.MiBpsMin <= c.HostMiBps && c.HostMiBps <= c.MiBpsMax && c.MiBpsMin > 0) {
			t.Errorf("%s: WAF %v [%v-%v], MiB/s %v [%v-%v]: want positive medians within their ranges",
				name, c.WAF, c.WAFMin, c.WAFMax, c.HostMiBps, c.MiBpsMin, c.MiBpsMax)
		}
		if c.WAFRatio == nil || c.MiBpsRatio == nil || c.Baseline != "none/greedy" {
			t.Errorf("%s: no ratios against none/greedy", name)
		} else if c.Placement == "none" && (*c.WAFRatio != 1 || *c.MiBpsRatio != 1) {
			t.Errorf("%s: ratios against itself %v, %v", name, *c.WAFRatio, *c.MiBpsRatio)
		}
		for _, r := range c.Runs {
			if r.HostBytes <= 0 || r.DevBytes <= 0 || r.Why == "" {
				t.Errorf("%s round %d: host %d, device %d bytes, note %q", name, r.Round, r.HostBytes, r.DevBytes, r.Why)
			}
			// The zones account for every live byte, no more (where
			// the workload knows them: the filled files).
			if r.LiveBytes > 0 && r.ValidBytes != r.LiveBytes {
				t.Errorf("%s round %d: zones hold %d valid bytes; the files hold %d", name, r.Round, r.ValidBytes, r.LiveBytes)
			}
			if r.GCShare < 0 || r.GCShare > 1 {
				t.Errorf("%s round %d: GC share %v", name, r.Round, r.GCShare)
			}
			// The space in circulation holds at least the live data
			// and at most the device; the free zones are some of it.
			if c.Workload == WorkUniform && (r.CircZones*float64(256<<10) < float64(r.LiveBytes) ||
				r.CircZones*float64(256<<10) > float64(gcSum.workloads[0].Capacity) || r.FreeZones <= 0) {
				t.Errorf("%s round %d: %.1f zones in circulation, %.1f free, for %d live bytes",
					name, r.Round, r.CircZones, r.FreeZones, r.LiveBytes)
			}
		}
		// Uniform overwrites of a device 70% full: GC must copy, and
		// then every device byte is at least a host byte.
		if c.Workload == WorkUniform && (c.GCBytes <= 0 || c.WAFMin < 1) {
			t.Errorf("%s: GC moved %d bytes, WAF %v; want GC at work and WAF >= 1", name, c.GCBytes, c.WAFMin)
		}
		// The victims it copied account for what GC wrote over the run.
		if w := c.Whole; c.Workload == WorkUniform && (w.Copied <= 0 || w.PerCopied <= 0) {
			t.Errorf("%s: whole run %+v: want victims copied, and bytes written per victim", name, w)
		}
	}
	if len(sum.Verdict) == 0 {
		t.Error("no verdict")
	}
	for _, w := range Workloads {
		for _, name := range []string{"series-" + w + ".csv", "zones-" + w + ".csv", "waf-" + w + ".png", "waf-" + w + ".svg",
			"throughput-" + w + ".png", "valid-histogram-" + w + ".svg"} {
			st, err := os.Stat(filepath.Join(out, name))
			if err != nil || st.Size() == 0 {
				t.Errorf("%s: missing or empty (%v)", name, err)
			}
		}
	}
	f, err := os.Open(filepath.Join(out, "series-uniform.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) < 3 || len(rows[0]) != 2*len(seriesColumns) || rows[0][0] != "mru/greedy seconds" {
		t.Fatalf("series-uniform.csv: %d rows, header %v; want a column set per configuration and samples", len(rows), rows[0])
	}
	var summary map[string]any
	b, err := os.ReadFile(filepath.Join(out, "summary.json"))
	if err != nil || json.Unmarshal(b, &summary) != nil {
		t.Fatalf("summary.json: %v", err)
	}
}

// Rounds: each configuration runs once per round, and the row gives the
// median of the rounds and their range.
func TestGCRepeatGivesMediansAndRanges(t *testing.T) {
	o := tinyGC()
	o.Out, o.Repeat, o.Workloads, o.Configs = "", 3, []string{WorkSeed}, []string{"mru/greedy", "none/greedy"}
	sum, err := measureGC(t.Context(), tinyGCDevice(t), o)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range sum.Configs {
		if len(r.Runs) != 3 {
			t.Fatalf("%s: %d runs; want 3", r.name(), len(r.Runs))
		}
		mbps := r.figure(func(x *gcRun) float64 { return x.HostMiBps })
		if r.HostMiBps != report.Median(mbps) || r.MiBpsMin > r.HostMiBps || r.MiBpsMax < r.HostMiBps {
			t.Errorf("%s: MiB/s %v [%v-%v] from runs %v", r.name(), r.HostMiBps, r.MiBpsMin, r.MiBpsMax, mbps)
		}
		for i, x := range r.Runs {
			if x.Round != i+1 {
				t.Errorf("%s: run %d is of round %d", r.name(), i, x.Round)
			}
		}
	}
	mru, none := sum.Configs[0], sum.Configs[1]
	if got := *mru.MiBpsRatio; got != mru.HostMiBps/none.HostMiBps {
		t.Errorf("mru/none MiB/s ratio %v; want the ratio of the medians %v", got, mru.HostMiBps/none.HostMiBps)
	}
	if m := report.Median([]float64{3, 1, 2, 10}); m != 2.5 {
		t.Errorf("median of 1, 2, 3, 10 = %v", m)
	}
}

func TestGCRejectsBadOptions(t *testing.T) {
	for name, mod := range map[string]func(*GCOptions){
		"util 0":         func(o *GCOptions) { o.Util = 0 },
		"util 0.99":      func(o *GCOptions) { o.Util = 0.99 },
		"no config":      func(o *GCOptions) { o.Configs = []string{} },
		"bad config":     func(o *GCOptions) { o.Configs = []string{"mru"} },
		"bad placement":  func(o *GCOptions) { o.Configs = []string{"fast/greedy"} },
		"bad streams":    func(o *GCOptions) { o.Configs = []string{"mru/greedy/3-streams"} },
		"four parts":     func(o *GCOptions) { o.Configs = []string{"mru/greedy/1-stream/x"} },
		"no-bg twice":    func(o *GCOptions) { o.Configs = []string{"mru/greedy/no-bg/no-bg"} },
		"two streams":    func(o *GCOptions) { o.Configs = []string{"mru/greedy/1-stream/2-streams"} },
		"bad workload":   func(o *GCOptions) { o.Workloads = []string{"random"} },
		"bs":             func(o *GCOptions) { o.BS = 1000 },
		"repeat":         func(o *GCOptions) { o.Repeat = 0 },
		"window":         func(o *GCOptions) { o.Steady.Window = 0 },
		"tolerance":      func(o *GCOptions) { o.Steady.Tol = 1 },
		"files":          func(o *GCOptions) { o.Files = 0 },
		"lifetimes room": func(o *GCOptions) { o.Workloads, o.Files = []string{WorkLifetimes}, 64 },
	} {
		o := tinyGC()
		o.Out = filepath.Join(t.TempDir(), "out") // valid: the error must be the option's
		mod(&o)
		err := GC(t.Context(), &bytes.Buffer{}, tinyGCDevice(t), o)
		if err == nil || strings.Contains(err.Error(), "--out") {
			t.Errorf("%s: %v; want the option refused", name, err)
		}
		if _, serr := os.Stat(o.Out); !errors.Is(serr, os.ErrNotExist) {
			t.Errorf("%s: the refused run left --out behind (%v)", name, serr)
		}
	}
	if err := GC(t.Context(), &bytes.Buffer{}, "null:?size=64M&zone_size=4M", tinyGC()); err == nil || !strings.Contains(err.Error(), "null:") {
		t.Errorf("null: device: %v", err)
	}
}

// setupsRoundTrip parses the configurations named in want (space
// separated) and checks that they print as named.
func setupsRoundTrip(t *testing.T, want string) {
	t.Helper()
	setups, err := parseGCSetups(strings.Fields(want))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range setups {
		names = append(names, s.String())
	}
	if strings.Join(names, " ") != want {
		t.Errorf("names %q; want %q", strings.Join(names, " "), want)
	}
}

// Configurations may name GC's streams; a row that does compares with the
// none row of the same GC policy and streams, and the engine runs with
// them.
func TestGCSetupsNameStreams(t *testing.T) {
	setupsRoundTrip(t, "mru/cost-benefit/1-stream mru/cost-benefit/2-streams none/greedy none/cost-benefit/1-stream")
	rows := []*gcRow{
		{Placement: "none", GCPolicy: "greedy"},
		{Placement: "none", GCPolicy: "cost-benefit", GCStreams: 1},
		{Placement: "none", GCPolicy: "cost-benefit", GCStreams: 2},
	}
	for _, tc := range []struct {
		row  gcRow
		want string
	}{
		{gcRow{Placement: "mru", GCPolicy: "cost-benefit", GCStreams: 2}, "none/cost-benefit/2-streams"},
		{gcRow{Placement: "mru", GCPolicy: "cost-benefit", GCStreams: 1}, "none/cost-benefit/1-stream"},
		{gcRow{Placement: "mru", GCPolicy: "cost-benefit"}, "none/cost-benefit/1-stream"}, // same policy
		{gcRow{Placement: "mru", GCPolicy: "greedy", GCStreams: 1}, "none/greedy"},
	} {
		if b := gcBaseline(rows, &tc.row); b == nil || b.name() != tc.want {
			t.Errorf("%s compares with %v; want %s", tc.row.name(), b, tc.want)
		}
	}
	o := tinyGC()
	o.Workloads, o.Configs, o.Out = []string{WorkHotCold}, []string{"mru/greedy/1-stream", "mru/greedy/2-streams"}, ""
	sum, err := measureGC(t.Context(), "emu:"+filepath.Join(t.TempDir(), "dev")+"?zone_size=256K&zones=48&max_open=7&max_active=7", o)
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{sum.Configs[0].name(), sum.Configs[1].name()}; got[0] != "mru/greedy/1-stream" || got[1] != "mru/greedy/2-streams" {
		t.Errorf("rows %v", got)
	}
}

// The seed workload runs on null: (alone: the others need a device that
// keeps data), and by default on a null: device.
func TestGCSeedOnNull(t *testing.T) {
	o := tinyGC()
	o.Workloads, o.Out = []string{WorkSeed}, ""
	sum, err := measureGC(t.Context(), "null:?zone_size=256K&zones=48&max_open=7&max_active=7", o)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(sum.workloads[0].Rows[0].Runs); n != 1 || sum.workloads[0].Rows[0].HostMiBps <= 0 {
		t.Errorf("seed on null: %d runs, %v MiB/s", n, sum.workloads[0].Rows[0].HostMiBps)
	}
	d, cleanup, err := newGCDevices("", []string{WorkSeed, WorkUniform})
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	if dev, err := d.fresh(WorkSeed); err != nil || !strings.HasPrefix(dev, "null:") ||
		!strings.Contains(dev, "zone_serial=1") || !strings.Contains(dev, "completion_nsec=20000") {
		t.Errorf("seed's default device %q, %v; want null: with zone_serial=1&completion_nsec=20000", dev, err)
	}
	if dev, err := d.fresh(WorkUniform); err != nil || !strings.HasPrefix(dev, "emu:") {
		t.Errorf("uniform's default device %q, %v; want emu:", dev, err)
	}
}

// A configuration may turn background GC off (/no-bg), alone or with
// streams; its row compares with the none row that has it off too; and
// every run's WAF parts leave a data part of about one byte per host byte.
func TestGCNoBackgroundAndWAFParts(t *testing.T) {
	setupsRoundTrip(t, "mru/greedy/no-bg none/greedy/1-stream/no-bg none/greedy")
	rows := []*gcRow{
		{Placement: "none", GCPolicy: "greedy"},
		{Placement: "none", GCPolicy: "greedy", NoBackground: true},
	}
	mru := &gcRow{Placement: "mru", GCPolicy: "greedy", NoBackground: true}
	if b := gcBaseline(rows, mru); b == nil || b.name() != "none/greedy/no-bg" {
		t.Errorf("%s compares with %v; want none/greedy/no-bg", mru.name(), b)
	}
	o := tinyGC()
	o.Workloads, o.Configs, o.Out = []string{WorkUniform}, []string{"mru/greedy", "mru/greedy/no-bg"}, ""
	sum, err := measureGC(t.Context(), "emu:"+filepath.Join(t.TempDir(), "dev")+"?zone_size=256K&zones=48&max_open=7&max_active=7", o)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range sum.Configs {
		for _, x := range r.Runs {
			// Data is what is left of the device bytes once the parts
			// the engine counts apart are taken out: the client's bytes
			// written back, well above nothing and at most what the
			// clients wrote in the measured part (the cache absorbs
			// some overwrites; what it held dirty when the part began
			// is left out, TestGCMeasuresTheWindowsOwnWrites), with
			// the cache's size to spare. (A bound of 1.05 x the host
			// bytes failed under a loaded whole-package -race run at
			// 1.06, before that was left out: the measured part is
			// 3-4 MiB here, the cache 1 MiB.) A part counted
			// twice, or one missed (GC's copies are about 3 host bytes
			// per host byte here), moves it out of that range.
			dataBytes := x.DevBytes - x.HeaderBytes - x.PadBytes - x.MetaBytes - x.GCBytes
			data := x.part(dataBytes)
			if data < 0.5 || dataBytes > x.HostBytes+o.CacheBytes || x.HeaderBytes <= 0 || x.GCBytes <= 0 || x.MetaBytes < 0 || x.PadBytes < 0 {
				t.Errorf("%s: WAF %v, data part %v (host %d, headers %d, pad %d, meta %d, GC %d bytes)", r.name(), x.WAF, data, x.HostBytes, x.HeaderBytes, x.PadBytes, x.MetaBytes, x.GCBytes)
			}
		}
	}
	if !sum.Configs[1].NoBackground || sum.Configs[0].NoBackground {
		t.Errorf("rows %s, %s", sum.Configs[0].name(), sum.Configs[1].name())
	}
}

// lifetimes writes every byte once (files written whole and synced,
// deleted whole): the measured part's data on the device is its host
// bytes, no more. Its device bytes used to include what the cache held
// when the part began, written before it (up to a writer's 128 KiB
// each): the data part read 1.002-1.015 per host byte at the default
// size, where the whole run's is 1.000.
func TestGCMeasuresTheWindowsOwnWrites(t *testing.T) {
	o := tinyGC()
	o.Workloads, o.Configs, o.Out, o.Repeat = []string{WorkLifetimes}, []string{"mru/greedy", "none/greedy"}, "", 2
	sum, err := measureGC(t.Context(), tinyGCDevice(t), o)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range sum.Configs {
		for _, x := range r.Runs {
			data := x.DevBytes - x.HeaderBytes - x.PadBytes - x.MetaBytes - x.GCBytes
			// The host bytes, give or take the writes in flight as the
			// part began: less by those counted on the device then, or
			// not yet counted as host bytes; more by a writeback in
			// flight then (no longer dirty, not yet on the device: it
			// lands in the part though written before it; 256 KiB over
			// once in a loaded CI run). Counting the cache's dirty bytes
			// at the start in, as before, is a megabyte.
			if slack := int64(o.Files) * lifetimeBS; data > x.HostBytes+slack || data < x.HostBytes-slack {
				t.Errorf("%s round %d: %d bytes of data on the device for %d host bytes (%.4f)", r.name(), x.Round, data, x.HostBytes, x.part(data))
			}
		}
	}
}

// lifetimes runs by default on its own geometry (DefaultLifetimesGeometry),
// the others on DefaultGCGeometry: as many zones as the others' device,
// each synced at least every 512 KiB (an eighth of a zone), and room for
// the workload's 16 writers' largest files (four zones each) in its live
// data; 64 zones of 4 MiB, the others' capacity, have none.
func TestGCLifetimesDefaultGeometry(t *testing.T) {
	d, cleanup, err := newGCDevices("", []string{WorkLifetimes, WorkUniform})
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	for _, w := range []string{WorkUniform, WorkHotCold, WorkLifetimes} {
		want := DefaultGCGeometry
		if w == WorkLifetimes {
			want = DefaultLifetimesGeometry
		}
		dev, err := d.fresh(w)
		if err != nil || !strings.HasPrefix(dev, "emu:") || !strings.HasSuffix(dev, "?"+want) {
			t.Errorf("%s's default device %q, %v; want emu: with %s", w, dev, err, want)
		}
		if shown := d.shown(w); !strings.HasSuffix(shown, "?"+want) {
			t.Errorf("%s's device shown as %q; want it to end in %s", w, shown, want)
		}
	}
	zones := func(geometry string) (zones int, zoneSize int64) {
		q, err := url.ParseQuery(geometry)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Sscan(q.Get("zones"), &zones); err != nil {
			t.Fatalf("%s: zones: %v", geometry, err)
		}
		if !strings.HasSuffix(q.Get("zone_size"), "M") {
			t.Fatalf("%s: zone_size %q: want MiB", geometry, q.Get("zone_size"))
		}
		if _, err := fmt.Sscan(strings.TrimSuffix(q.Get("zone_size"), "M"), &zoneSize); err != nil {
			t.Fatalf("%s: zone_size: %v", geometry, err)
		}
		return zones, zoneSize << 20
	}
	n, size := zones(DefaultLifetimesGeometry)
	if gcZones, _ := zones(DefaultGCGeometry); n != gcZones {
		t.Errorf("lifetimes' device has %d zones, the others' %d: none's WAF follows the zone count", n, gcZones)
	}
	if size/8 < 512<<10 {
		t.Errorf("lifetimes syncs every %d bytes (zone/8); want at least 512 KiB", size/8)
	}
	// The workload fits the device as formatted (metadata zones out).
	dev := "emu:" + filepath.Join(t.TempDir(), "dev") + "?" + DefaultLifetimesGeometry
	e, release, err := OpenFormatted(dev, engine.Config{CacheBytes: DefaultGC.CacheBytes})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	defer e.Close()
	spec := Spec{Kind: WorkLifetimes, Files: DefaultGC.Files, Util: DefaultGC.Util, ZoneSize: e.Geometry().ZoneCap}
	if err := spec.check(e.Capacity()); err != nil {
		t.Errorf("default lifetimes device: %v", err)
	}
	small := Spec{Kind: WorkLifetimes, Files: DefaultGC.Files, Util: DefaultGC.Util, ZoneSize: 4 << 20}
	if err := small.check(64 * 4 << 20); err == nil {
		t.Errorf("64 zones of 4 MiB took 16 writers of files up to 16 MiB at util %v", DefaultGC.Util)
	}
}
