package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestH45gBenchRefusalErasesNothing: bench run and bench fio refuse,
// as a usage error (exit 2), a workload whose files the device cannot
// hold, but with --force they had formatted the device first: the
// refusal came from the engine opened on it, and the data on it was gone.
// A usage error changes nothing: the emu file that holds a file system
// and a file is byte-for-byte what it was.
func TestH45gBenchRefusalErasesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev")
	dev := "emu:" + path + "?zone_size=1M&zones=16"
	if r := runBinary(t, "bench", "run", dev, "--size", "4M", "--bs", "64K"); r.status != 0 {
		t.Fatalf("bench run that fits: %+v", r)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Count(before, []byte{0}) == len(before) {
		t.Fatal("the device holds nothing to lose")
	}
	cmds := [][]string{{"bench", "run", dev, "--force", "--size", "13M"}}
	if _, eng := killFioEnv(t); eng != "" {
		t.Setenv("ZONEFOLD_FIO_ENGINE", eng)
		cmds = append(cmds, []string{"bench", "fio", dev, "--force", "--size", "13M", "--rounds", "1"})
	}
	for _, args := range cmds {
		r := runBinary(t, args...)
		if r.status != 2 || !strings.Contains(r.stderr, "the device holds for files") {
			t.Errorf("%v: %+v; want the usage error for files the device cannot hold", args, r)
		}
		after, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(before, after) {
			t.Errorf("%v: refused, yet the device changed (%d bytes before, %d after)", args, len(before), len(after))
			before = after
		}
	}
}
