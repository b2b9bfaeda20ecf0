package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tinyGCDevice is a device bench gc fills in a moment: 46 data zones of
// 256 KiB, one open zone per file (4 files, GC and metadata: 6).
func tinyGCDevice(t *testing.T) string {
	return "emu:" + filepath.Join(t.TempDir(), "dev") + "?zone_size=256K&zones=48&max_open=6&max_active=6"
}

// tinyGC is bench gc's options for tinyGCDevice: 4 files, a small cache,
// frequent samples.
func tinyGC() GCOptions {
	o := DefaultGC
	o.Files, o.CacheBytes, o.Sample = 4, 2<<20, 20*time.Millisecond
	return o
}

func TestGCJSONAndFiles(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	var stdout bytes.Buffer
	o := tinyGC()
	o.JSON, o.Out, o.Util, o.Passes, o.Configs = true, out, 0.7, 1.5, []string{"mru/greedy", "none/greedy"}
	if err := GC(t.Context(), &stdout, tinyGCDevice(t), o); err != nil {
		t.Fatal(err)
	}
	var sum gcSummary
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout.String())
	}
	if len(sum.Configs) != 2 || sum.Configs[0].name() != "mru/greedy" || sum.Configs[1].name() != "none/greedy" {
		t.Fatalf("configurations %+v; want mru/greedy and none/greedy", sum.Configs)
	}
	// The overwrites write 1.5 capacities onto a device 70% full: GC must
	// run, and then every device byte written is at least a host byte.
	for _, c := range sum.Configs {
		if c.GCBytes <= 0 || c.ZonesReset <= 0 {
			t.Errorf("%s: GC relocated %d bytes, reset %d zones; want both > 0", c.name(), c.GCBytes, c.ZonesReset)
		}
		if c.WAF < 1 || c.DevBytes < c.HostBytes {
			t.Errorf("%s: WAF %.3f (%d device bytes for %d host bytes); want >= 1 once GC ran", c.name(), c.WAF, c.DevBytes, c.HostBytes)
		}
		if c.HostMiBps <= 0 || c.HostBytes <= 0 {
			t.Errorf("%s: host %d bytes at %.1f MiB/s", c.name(), c.HostBytes, c.HostMiBps)
		}
		// The histogram accounts for every live byte, no more.
		if c.ValidBytes != c.LiveBytes || c.LiveBytes != int64(sum.Files)*sum.FileSize {
			t.Errorf("%s: zones hold %d valid bytes; the files hold %d (%d x %d)", c.name(), c.ValidBytes, c.LiveBytes, sum.Files, sum.FileSize)
		}
		if c.WAFRatio == nil || c.MiBpsRatio == nil || c.Baseline != "none/greedy" {
			t.Errorf("%s: no ratios against none/greedy: %+v", c.name(), c)
		}
		if c.GCShare < 0 || c.GCShare > 1 {
			t.Errorf("%s: GC share %v outside [0, 1]", c.name(), c.GCShare)
		}
	}
	if r := sum.Configs[1].WAFRatio; r != nil && *r != 1 {
		t.Errorf("none against itself: WAF ratio %v", *r)
	}
	if len(sum.Verdict) != 1 || !strings.HasPrefix(sum.Verdict[0], "mru/greedy vs none/greedy: ") {
		t.Errorf("verdict %q", sum.Verdict)
	}

	for _, name := range []string{"summary.json", "series.csv", "zones.csv",
		"waf.png", "waf.svg", "throughput.png", "throughput.svg", "valid-histogram.png", "valid-histogram.svg"} {
		st, err := os.Stat(filepath.Join(out, name))
		if err != nil || st.Size() == 0 {
			t.Errorf("%s: missing or empty (%v)", name, err)
		}
	}
	f, err := os.Open(filepath.Join(out, "series.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) < 3 || len(rows[0]) != 2*len(seriesColumns) {
		t.Fatalf("series.csv: %d rows, header %v; want a column set per configuration and samples", len(rows), rows[0])
	}
	for i, c := range []string{"mru/greedy", "none/greedy"} {
		if h := rows[0][i*len(seriesColumns)]; h != c+" seconds" {
			t.Errorf("series.csv column %d is %q; want %q", i*len(seriesColumns), h, c+" seconds")
		}
	}
}

func TestGCTable(t *testing.T) {
	var stdout bytes.Buffer
	o := tinyGC()
	o.Out, o.Util, o.Passes, o.Configs = t.TempDir(), 0.5, 0.3, []string{"mru/cost-benefit"}
	if err := GC(t.Context(), &stdout, tinyGCDevice(t), o); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"placement/gc", "mru/cost-benefit", "no mru and none pair"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, stdout.String())
		}
	}
}

// An interrupted bench gc used to leave its (empty) --out folder behind.
func TestGCInterruptedLeavesNoFolder(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	o := tinyGC()
	o.Out, o.Util, o.Passes = out, 0.5, 0.3
	err := GC(ctx, &bytes.Buffer{}, tinyGCDevice(t), o)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("bench gc with a canceled context: %v", err)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an interrupted bench gc left %s: %v", out, err)
	}
}
