package bench

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/zonefold/zonefold/engine"
)

// TestH45dFioLoopsOnBothSides: bench fio --loops N ran N passes in
// process and one through fio (its job had no loops), so the ratio set
// N passes against one. Both sides write N x the files' size, with real
// fio through the daemon.
func TestH45dFioLoopsOnBothSides(t *testing.T) {
	so := fioEnv(t)
	fioBin, err := exec.LookPath("fio")
	if err != nil {
		t.Fatal(err)
	}
	cfg := engine.Config{CacheBytes: 16 << 20}
	for _, w := range []Workload{
		{Files: 2, BS: 64 << 10, IODepth: 4, Size: 2 << 20, RW: "write", Loops: 3},
		{Files: 1, BS: 16 << 10, IODepth: 8, Size: 2 << 20, RW: "randwrite", Loops: 2},
	} {
		dev := "emu:" + filepath.Join(t.TempDir(), "dev") + "?zone_size=1M&zones=24&max_open=8&max_active=8"
		want := int64(w.Loops*w.Files) * w.Size
		in, err := inProcessRound(t.Context(), dev, cfg, w)
		if err != nil || in.Bytes != want {
			t.Errorf("%s --loops %d in process: %d bytes, %v; want %d", w.RW, w.Loops, in.Bytes, err, want)
		}
		d, err := daemonRound(t.Context(), dev, cfg, w, fioBin, so)
		if err != nil || d.Bytes != want {
			t.Errorf("%s --loops %d through fio and the daemon: %d bytes, %v; want %d", w.RW, w.Loops, d.Bytes, err, want)
		}
	}
}
