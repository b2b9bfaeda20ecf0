package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// bench fio and bench gc format their DEVICE afresh for every run, each
// run claiming it anew: the first run's claim created the emu file and,
// as that run succeeded, kept it; a later run that failed then found the
// file there and kept it too. A failed bench left the emu file it had
// created (26 MiB here), and the user's retry was refused as holding
// data. As bench run does (h41g), a bench that fails removes the emu file
// it created, whichever round failed.
func TestBenchFailingInALaterRunRemovesTheEmuFileItCreated(t *testing.T) {
	dir := t.TempDir()
	bogus := filepath.Join(dir, "bogus.so")
	if err := os.WriteFile(bogus, []byte("not an engine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args func(dev string) []string
		skip func() bool
	}{
		// The in-process run succeeds and keeps the file; fio, in the
		// daemon's run after it, cannot load the engine.
		{"fio", func(dev string) []string {
			return []string{"bench", "fio", dev, "--size", "1M", "--rounds", "1", "--fio-engine", bogus}
		}, func() bool { _, err := exec.LookPath("fio"); return err != nil }},
		// The 1-stream run succeeds; the 2-stream one asks for more open
		// zones than the device has beside GC's two streams.
		{"gc", func(dev string) []string {
			return []string{"bench", "gc", dev, "--workload", "uniform", "--files", "2", "--open-zones", "3",
				"--configs", "mru/greedy/1-stream,mru/greedy/2-streams", "--out", filepath.Join(dir, "gc-out")}
		}, func() bool { return false }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.skip() {
				if os.Getenv("ZONEFOLD_REQUIRE_FIO") != "" {
					t.Fatal("fio is not on PATH (make test installs it)")
				}
				t.Skip("fio is not on PATH")
			}
			path := filepath.Join(dir, c.name+"-dev")
			dev := "emu:" + path + "?zone_size=1M&zones=24&max_open=5&max_active=5"
			var out, errb bytes.Buffer
			if code := Main(c.args(dev), &out, &errb); code == 0 {
				t.Fatalf("bench %s was to fail in its second run; exit 0:\n%s", c.name, out.String())
			}
			if _, err := os.Lstat(path); !os.IsNotExist(err) {
				t.Errorf("bench %s failed (%s), yet the emu file it created is there (%v)", c.name, errb.String(), err)
			}
		})
	}
	// A device the user had before the bench stays, whatever the bench
	// did to it.
	path := filepath.Join(dir, "kept")
	dev := "emu:" + path + "?zone_size=1M&zones=24&max_open=5&max_active=5"
	zonefold(t, "format", dev)
	var out, errb bytes.Buffer
	args := []string{"bench", "gc", dev, "--force", "--workload", "uniform", "--files", "2", "--open-zones", "3",
		"--configs", "mru/greedy/1-stream,mru/greedy/2-streams", "--out", filepath.Join(dir, "gc-out")}
	if code := Main(args, &out, &errb); code == 0 {
		t.Fatalf("bench gc was to fail in its second run; exit 0")
	}
	if _, err := os.Lstat(path); err != nil {
		t.Errorf("bench gc failed on a device the user made, and removed it: %v", err)
	}
}
