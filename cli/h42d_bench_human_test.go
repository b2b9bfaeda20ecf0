package cli

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// bench run printed its block size in bytes ("write bs=131072") where
// every other size it prints, and the conventions, are KiB/MiB/GiB; and a
// run that wrote nothing (--rw read, randread) printed WAF 0.000, a ratio
// of nothing to nothing that reads as "writes cost nothing". The text
// now says "bs 128 KiB" and "-" for a WAF (and SQEs per enter) with
// nothing to divide; --json keeps bs in bytes and leaves waf (and
// sqes_per_enter) out, as stat --json leaves write_amplification out
// before there is one.
func TestBenchRunPrintsHumanBlockSizesAndNoWAFWithoutWrites(t *testing.T) {
	dev := "emu:" + filepath.Join(t.TempDir(), "dev") + "?zone_size=1M&zones=64"
	out := zonefold(t, "bench", "run", dev, "--size", "2M", "--bs", "128K")
	if head, _, _ := strings.Cut(out, "\n"); !strings.Contains(head, "bs 128 KiB") || strings.Contains(head, "131072") {
		t.Errorf("bench run's heading %q; want bs 128 KiB", head)
	}
	if !regexp.MustCompile(`(?m)^\s+\S+\s+\S+\s+\S+\s+\S+\s+1\.\d{3}\s`).MatchString(out) {
		t.Errorf("a writing run's WAF is missing:\n%s", out)
	}
	for _, rw := range []string{"read", "randread"} {
		out := zonefold(t, "bench", "run", dev, "--force", "--rw", rw, "--size", "2M", "--bs", "4K")
		head, table, _ := strings.Cut(out, "\n")
		if !strings.Contains(head, "bs 4 KiB") {
			t.Errorf("%s: heading %q; want bs 4 KiB", rw, head)
		}
		lines := strings.Split(strings.TrimSpace(table), "\n")
		cols, vals := strings.Fields(lines[0]), strings.Fields(lines[1]) // the table's heading and row
		for i, c := range cols {
			if c == "WAF" && i < len(vals) && vals[i] != "-" {
				t.Errorf("%s: WAF %q where nothing was written; want -:\n%s", rw, vals[i], out)
			}
		}
		var js map[string]any
		if err := json.Unmarshal([]byte(zonefold(t, "bench", "run", dev, "--force", "--rw", rw, "--size", "2M", "--bs", "4K", "--json")), &js); err != nil {
			t.Fatal(err)
		}
		if _, ok := js["waf"]; ok || js["bs"] != float64(4096) || js["host_bytes"] != float64(0) {
			t.Errorf("%s --json: waf %v, bs %v, host_bytes %v; want no waf, bs 4096, host_bytes 0", rw, js["waf"], js["bs"], js["host_bytes"])
		}
	}
}

// bench batching printed "file writes 4096 B".
func TestBenchBatchingPrintsHumanBlockSizes(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main([]string{"bench", "batching", "--time", "10ms", "--rounds", "1", "--dir", t.TempDir()}, &out, &errb); code != 0 {
		t.Fatalf("bench batching: exit %d: %s", code, errb.String())
	}
	if head, _, _ := strings.Cut(out.String(), "\n"); !strings.Contains(head, "4 KiB") || strings.Contains(head, "4096") {
		t.Errorf("bench batching's heading %q; want 4 KiB", head)
	}
}
