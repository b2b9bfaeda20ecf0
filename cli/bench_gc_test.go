package cli

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// The flags reach bench gc: a small run through the command prints the
// table.
func TestBenchGCCommand(t *testing.T) {
	dev := "emu:" + filepath.Join(t.TempDir(), "dev") + "?zone_size=256K&zones=48&max_open=7&max_active=7"
	var stdout, stderr bytes.Buffer
	code := Main([]string{"bench", "gc", dev, "--out", t.TempDir(), "--files", "4", "--util", "0.5", "--workload", "uniform,seed",
		"--warmup-cap", "0.5", "--measure", "0.3", "--cache", "1M", "--skew", "90/10", "--placements", "mru,none", "--gc-policies", "greedy"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"placement/gc", "mru/greedy", "none/greedy", "uniform:", "seed:", "analytic greedy WAF"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, stdout.String())
		}
	}
}

func TestBenchGCRejectsBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"--util", "0"},
		{"--util", "0.99"},
		{"--repeat", "0"},
		{"--skew", "80"},
		{"--workload", "random"},
		{"--measure", "0"},
		{"--configs", "mru"},
		{"--configs", "fast/greedy"},
		{"--placements", "mru", "--gc-policies", "lazy"},
		{"--bs", "1000"},
		{"--bs", "8Q"},
		{"--cache", "lots"},
		{"--files", "0"},
		{"null:?size=64M&zone_size=4M"},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(append([]string{"bench", "gc", "--out", t.TempDir()}, args...), &stdout, &stderr)
		if code == 0 || !strings.HasPrefix(stderr.String(), "zonefold: ") {
			t.Errorf("%v: exit %d, stderr %q; want a one-line error", args, code, stderr.String())
		}
	}
}
