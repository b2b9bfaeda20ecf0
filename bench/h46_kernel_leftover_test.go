package bench

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/zns"
)

// TestKernelFitsCheckStartsFromNoLeftover: bench kernel's emu file is
// its own scratch (fresh removes it before every round), so a file left
// there by a run that was killed, of another geometry, must not fail the
// fits check that runs before the rounds: it is removed first, as fresh
// does, and none is left after.
func TestKernelFitsCheckStartsFromNoLeftover(t *testing.T) {
	dir := t.TempDir()
	dev := kernelDeviceFor(KernelEmu, dir, false)
	z, err := zns.Open("emu:"+dev.file+"?zone_size=1M&zones=16", zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	jobs, err := loadKernelJobs(filepath.Join("..", "testdata", "fio"), nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkKernelJobsFit(dev, engine.Config{}, jobs); err != nil {
		t.Fatalf("fits check over a leftover emu file of another geometry: %v", err)
	}
	if _, err := os.Stat(dev.file); !os.IsNotExist(err) {
		t.Errorf("%s: left behind after the check: %v", dev.file, err)
	}
}
