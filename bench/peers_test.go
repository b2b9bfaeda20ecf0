package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zonefold/zonefold/engine"
)

// peerSamples is a run's series: steady WAF waf, rate host bytes a second.
func peerSamples(n int, rate int64, waf float64) []sample {
	var out []sample
	for i := range n {
		h := int64(i) * rate
		out = append(out, sample{Seconds: float64(i), Host: h, Dev: int64(float64(h) * waf), GC: h / 10})
	}
	return out
}

func peerRun(mbps, waf float64, gc int64) *PeerRun {
	return &PeerRun{Capacity: 200 << 20, HostMiBps: mbps, WAF: waf, GCBytes: gc, GCZones: gc / (4 << 20), Steady: true,
		samples: peerSamples(20, int64(mbps*(1<<20)), waf)}
}

// A summary of made-up runs: the medians, the ratios against zonefold,
// the targets' verdicts, a skipped and a failed target, and the outputs.
func TestPeersSummary(t *testing.T) {
	sum := &PeersSummary{Device: "/dev/nullb0", Kernel: "6.1.0-57-amd64", Geometry: "64 zones of 4M", Cache: 16 << 20, DirtyMax: 8 << 20, Repeat: 3,
		Steady: DefaultSteady, RunLimit: 90}
	mk := func(w string, zf, f2fs []*PeerRun) *PeerWorkload {
		return &PeerWorkload{Workload: w, Shape: w + " shape", Rows: []*PeerRow{
			{Target: TargetZonefold, Runs: zf},
			{Target: "f2fs", Runs: f2fs},
			{Target: "btrfs", Runs: []*PeerRun{{Error: "write f3: no space left on device", Capacity: 240 << 20}}},
			{Target: "xfs", Skipped: "kernel 6.1.0-57-amd64: zoned xfs needs Linux >= 6.15"},
		}}
	}
	sum.Workloads = []*PeerWorkload{
		// zonefold's WAF 0.9 vs f2fs 1.2: 0.75x, met.
		mk(WorkHotCold, []*PeerRun{peerRun(10, 0.9, 1e6), peerRun(12, 0.8, 1e6), peerRun(11, 1.0, 1e6)},
			[]*PeerRun{peerRun(20, 1.2, -1), peerRun(22, 1.3, -1), peerRun(21, 1.1, -1)}),
		// 1.0 vs 1.1: 0.91x, not met.
		mk(WorkLifetimes, []*PeerRun{peerRun(10, 1.0, 0)}, []*PeerRun{peerRun(20, 1.1, 0)}),
		// 30 vs 20 MiB/s: met.
		mk(WorkSeed, []*PeerRun{peerRun(30, 1.0, 0)}, []*PeerRun{peerRun(20, 1.0, 0), {Error: "ENOSPC"}}),
		// No target for uniform.
		mk(WorkUniform, []*PeerRun{peerRun(30, 2.0, 0)}, []*PeerRun{peerRun(20, 2.5, 0)}),
	}
	summarizePeers(sum)

	hc := sum.Workloads[0]
	zf, f2 := hc.Rows[0], hc.Rows[1]
	if zf.WAF != 0.9 || zf.WAFMin != 0.8 || zf.WAFMax != 1.0 || zf.HostMiBps != 11 || zf.MiBpsMin != 10 || zf.MiBpsMax != 12 {
		t.Errorf("zonefold medians: %+v", zf)
	}
	if f2.WAFVsZF == nil || *f2.WAFVsZF != 1.2/0.9 || *f2.MiBpsVsZF != 21.0/11 {
		t.Errorf("f2fs ratios: %v %v", f2.WAFVsZF, f2.MiBpsVsZF)
	}
	if f2.GCBytes != -1 {
		t.Errorf("f2fs GC bytes %d: unknown should stay -1", f2.GCBytes)
	}
	if bt := hc.Rows[2]; bt.Error == "" || bt.WAFVsZF != nil || len(bt.done()) != 0 {
		t.Errorf("failed btrfs row: %+v", bt)
	}
	// A row with one failed round keeps the others' medians and says so.
	if seedF2 := sum.Workloads[2].Rows[1]; seedF2.HostMiBps != 20 || seedF2.Error != "ENOSPC" {
		t.Errorf("f2fs seed row with a failed round: %+v", seedF2)
	}
	want := []string{
		"hotcold: zonefold WAF 0.900 vs f2fs's 1.200 (the best kernel file system's): 0.75x, target <= 0.8x: met",
		"lifetimes: zonefold WAF 1.000 vs f2fs's 1.100 (the best kernel file system's): 0.91x, target <= 0.8x: NOT met",
		"seed: zonefold 30.0 MiB/s vs f2fs's 20.0 (the best kernel file system's): 1.50x, target >= 1x: met",
	}
	if strings.Join(sum.Targets, "\n") != strings.Join(want, "\n") {
		t.Errorf("targets:\n%s\nwant:\n%s", strings.Join(sum.Targets, "\n"), strings.Join(want, "\n"))
	}

	var out bytes.Buffer
	dir := t.TempDir()
	if err := printPeers(&out, dir, sum); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"hotcold: hotcold shape", "0.900 (0.800-1.000)", "FAILED: write f3: no space left on device",
		"skipped: kernel 6.1.0-57-amd64", "some rounds FAILED: ENOSPC", want[0],
		fmt.Sprintf("warm-up at most %g capacities, then %g measured; each run stopped after 1m30s", DefaultSteady.Cap, DefaultSteady.Span)} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, out.String())
		}
	}
	if err := writePeersOutputs(dir, sum); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"summary.json", "hotcold-series.csv", "hotcold-waf.png", "hotcold-waf.svg", "seed-throughput.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back PeersSummary
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Workloads) != 4 || back.Workloads[0].Rows[0].WAF != 0.9 || back.Workloads[0].Rows[3].Skipped == "" {
		t.Errorf("summary.json round trip: %+v", back.Workloads[0])
	}
}

func TestZoneCensus(t *testing.T) {
	got := zoneCensus([]engine.ZoneValid{
		{State: "meta"}, {State: "meta"}, {State: "free", Cap: 4}, {State: "open", Cap: 4, Valid: 1},
		{State: "full", Cap: 4, Valid: 3}, {State: "full", Cap: 4, Valid: 1}, {State: "gc", Cap: 4},
	})
	if want := "1 free, 1 open, 2 full holding 50% valid data, 1 gc, 2 meta"; got != want {
		t.Errorf("zoneCensus = %q, want %q", got, want)
	}
}

// A run stopped by --run-limit says so, with how far it got.
func TestPeersRunLimit(t *testing.T) {
	err := overLimit(90*time.Second, 150<<20, 100<<20)
	if want := "did not finish within --run-limit 1m30s: the workload had written 150 MiB (1.50 capacities)"; err.Error() != want {
		t.Errorf("overLimit = %q, want %q", err, want)
	}
	o := DefaultPeers
	o.RunLimit = -time.Second
	if err := o.validate(); err == nil || !strings.Contains(err.Error(), "--run-limit") {
		t.Errorf("negative --run-limit: %v", err)
	}
}

// zonefold's own account names each kind of bytes and the failed appends.
func TestEngineBreakdown(t *testing.T) {
	got := engineBreakdown(engine.Stats{HostWritten: 100 << 20, DevData: 90 << 20, DevPad: 1 << 20, GCWritten: 10 << 20, Appends: 7, AppendErrs: 2})
	for _, s := range []string{"host 100.0 MiB", "data 90.0", "pad 1.0", "gc 10.0 MiB", "7 appends, 2 failed"} {
		if !strings.Contains(got, s) {
			t.Errorf("engineBreakdown = %q, lacks %q", got, s)
		}
	}
}

// blockedBackend's writes never return until released, whatever their
// context says: a kernel file system whose writers are stuck in D state.
type blockedBackend struct{ release chan struct{} }

func (b blockedBackend) Capacity() int64                    { return 64 << 20 }
func (b blockedBackend) Create(string) (BackendFile, error) { return b, nil }
func (b blockedBackend) Remove(string) error                { return nil }
func (b blockedBackend) Sync(context.Context) error         { return nil }
func (b blockedBackend) Counters() Counters {
	return Counters{GCWritten: -1, GCResets: -1, GCNanos: -1}
}
func (b blockedBackend) Close() error { return nil }
func (b blockedBackend) WriteAt(_ context.Context, p []byte, _ int64) (int, error) {
	<-b.release
	return len(p), nil
}

// A run whose writers stay blocked after its context ends is reported
// hung, grace after, rather than waited for; one whose writers return
// is not.
func TestControlledOrHung(t *testing.T) {
	b := blockedBackend{release: make(chan struct{})}
	defer close(b.release) // let the left-behind writers go at the end
	spec := Spec{Kind: WorkHotCold, Files: 2, BS: 64 << 10, IODepth: 1, Util: 0.5, HotShare: 0.8, HotFiles: 0.5, ZoneSize: 4 << 20, Seed: 1}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, hung, err := controlledOrHung(ctx, newGen(spec, b), DefaultSteady, 10*time.Millisecond, 50*time.Millisecond)
	if !hung || err == nil {
		t.Fatalf("blocked writers: hung %v, err %v; want hung", hung, err)
	}

	// Writers that return (here at once): a cancelled run ends with its
	// error, not hung.
	done := make(chan struct{})
	close(done)
	_, _, hung, err = controlledOrHung(ctx, newGen(spec, blockedBackend{release: done}), DefaultSteady, 10*time.Millisecond, time.Minute)
	if hung || err == nil {
		t.Errorf("cancelled run: hung %v, err %v; want its error, not hung", hung, err)
	}
}

// A hung target stops bench peers; the rows that had not run say why.
func TestPeersNotRun(t *testing.T) {
	sum := &PeersSummary{Workloads: []*PeerWorkload{
		{Workload: WorkHotCold, Rows: []*PeerRow{{Target: TargetZonefold, Runs: []*PeerRun{peerRun(10, 1, 0)}}, {Target: "btrfs", Runs: []*PeerRun{{Error: "hung: ..."}}}}},
		{Workload: WorkSeed, Rows: []*PeerRow{{Target: TargetZonefold}, {Target: "xfs", Skipped: "needs Linux >= 6.15"}}},
	}}
	notRun(sum, "not run: bench peers stopped when btrfs hung on hotcold")
	if r := sum.Workloads[1].Rows[0]; r.Skipped != "not run: bench peers stopped when btrfs hung on hotcold" {
		t.Errorf("seed zonefold: %q", r.Skipped)
	}
	if r := sum.Workloads[1].Rows[1]; r.Skipped != "needs Linux >= 6.15" {
		t.Errorf("a skipped row's own reason was replaced: %q", r.Skipped)
	}
	if r := sum.Workloads[0].Rows[1]; r.Skipped != "" {
		t.Errorf("the hung row is not 'not run': %q", r.Skipped)
	}
}

// TestPeersRefusesDeviceStrings: bench peers takes a zoned block device
// only. An emu: or null: string, which every other command takes, was
// refused with "stat emu:/tmp/d?zone_size=1M&zones=16: no such file or
// directory"; the refusal now says what DEVICE must be and what to run
// without one, and creates nothing.
func TestPeersRefusesDeviceStrings(t *testing.T) {
	emu := filepath.Join(t.TempDir(), "d")
	for _, dev := range []string{"emu:" + emu + "?zone_size=1M&zones=16", "null:?size=1G&zone_size=64M"} {
		_, err := openPeerDevice(dev, false)
		if err == nil {
			t.Fatalf("%s: accepted", dev)
		}
		for _, want := range []string{"zoned block device", "make bench-peers"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q; want it to say %q", dev, err, want)
			}
		}
	}
	if _, err := os.Stat(emu); !os.IsNotExist(err) {
		t.Errorf("emu file after the refusal: %v; want none", err)
	}
}
