package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// h45dNeedFio skips without fio and the engine, unless
// ZONEFOLD_REQUIRE_FIO is set (make test sets it), where it fails
// (killFioEnv); the bench finds the engine through ZONEFOLD_FIO_ENGINE.
func h45dNeedFio(t *testing.T) {
	t.Helper()
	_, eng := killFioEnv(t)
	if eng == "" {
		t.Skip("no fio or engine")
	}
	t.Setenv("ZONEFOLD_FIO_ENGINE", eng)
}

// TestH45dBenchFioLoopsRunOnBothSides: bench fio refused every --loops
// but 1, because fio's job made one pass whatever it said. --loops N
// now goes to fio's job too: both sides write N x the files' size in
// each round (real fio, through the daemon), and the heading says so.
func TestH45dBenchFioLoopsRunOnBothSides(t *testing.T) {
	h45dNeedFio(t)
	dev := "emu:" + filepath.Join(t.TempDir(), "dev") + "?zone_size=1M&zones=24&max_open=8&max_active=8"
	args := []string{"bench", "fio", dev, "--files", "2", "--size", "2M", "--bs", "64K", "--iodepth", "4", "--loops", "3", "--rounds", "2", "--cache", "16M", "--json"}
	r := runBinary(t, args...)
	if r.status != 0 {
		t.Fatalf("%v: %+v", args, r)
	}
	var got struct {
		Loops          int   `json:"loops"`
		InProcessBytes int64 `json:"in_process_bytes"`
		DaemonBytes    int64 `json:"daemon_bytes"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, r.stdout)
	}
	const want = 2 * 3 * 2 * 2 << 20 // rounds x loops x files x size
	if got.Loops != 3 || got.InProcessBytes != want || got.DaemonBytes != want {
		t.Errorf("%v: %+v; want 3 loops and %d bytes on each side", args, got, want)
	}
	args = append(args[:len(args)-1], "--rounds", "1", "--force")
	if r := runBinary(t, args...); r.status != 0 || !strings.HasPrefix(r.stdout, "2 files x 2 MiB, write, 3 loops, bs 64 KiB") {
		t.Errorf("%v: %+v; want the heading to name the loops", args, r)
	}
}

// TestH45dBenchFioRefusesWhatTheDeviceCannotHold: bench fio's workload
// is bench run's, and so is the usage error (exit 2) for files the
// device cannot hold, before either side writes (here 13 MiB of files
// on a device with room for 12).
func TestH45dBenchFioRefusesWhatTheDeviceCannotHold(t *testing.T) {
	h45dNeedFio(t)
	path := filepath.Join(t.TempDir(), "dev")
	args := []string{"bench", "fio", "emu:" + path + "?zone_size=1M&zones=16", "--size", "13M", "--rounds", "1"}
	r := runBinary(t, args...)
	if r.status != 2 || !strings.Contains(r.stderr, "1 file of 13 MiB needs more than the 12 MiB the device holds for files") || r.stdout != "" {
		t.Fatalf("%v: %+v; want status 2 and the workload against the device", args, r)
	}
	checkErrorLine(t, args, r.stderr)
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("%v: the emu file it created is there: %v", args, err)
	}
}
