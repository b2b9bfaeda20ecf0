package cli

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestOutputCountsArePlural: output said "GC's 1 stream(s)", "reset:
// 1 zone(s)", "1 file(s) x 1 MiB" and "1 files x 100 MiB need more than
// the device's ...": counts now take the noun's number.
func TestOutputCountsArePlural(t *testing.T) {
	dir := t.TempDir()
	dev := fmt.Sprintf("emu:%s?zone_size=4M&zones=32&max_open=8", filepath.Join(dir, "dev"))
	r := runBinary(t, "bench", "run", dev, "--size", "1M", "--open-zones", "7")
	if want := "zonefold keeps 2 for GC's 1 stream and metadata"; r.status != 2 || !strings.Contains(r.stderr, want) {
		t.Errorf("--open-zones 7: exit %d, stderr %q; want 2 and %q", r.status, r.stderr, want)
	}
	if out := zonefold(t, "bench", "run", dev, "--size", "1M"); !strings.HasPrefix(out, "1 file x 1 MiB, write,") {
		t.Errorf("bench run of one file says:\n%s", out)
	}
	r = runBinary(t, "bench", "run", dev, "--force", "--size", "1G")
	if want := "1 file of 1 GiB needs more than"; r.status != 2 || !strings.Contains(r.stderr, want) {
		t.Errorf("bench run of one file too large: exit %d, stderr %q; want 2 (a usage error since h45d) and %q", r.status, r.stderr, want)
	}
	if out := zonefold(t, "zones", "finish", dev, "--zone", "20"); out != "finish: 1 zone\n" {
		t.Errorf("zones finish of one zone says %q", out)
	}
	if out := zonefold(t, "zones", "reset", dev, "--all", "--force"); strings.Contains(out, "(s)") || !strings.HasSuffix(out, " zones\n") {
		t.Errorf("zones reset --all says %q", out)
	}
	for _, s := range []string{r.stderr} {
		if strings.Contains(s, "(s)") {
			t.Errorf("output still says (s): %q", s)
		}
	}
}
