package bench

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zonefold/zonefold/engine"
)

// TestH46cKernelRefusesAJobTheDeviceCannotHoldUpFront: bench kernel
// had no fits check: a job (or a --scale) whose files pass the zonefold
// side's device formatted it, served it and started fio, which met
// ENOSPC once the device was full, after the earlier jobs' rounds (exit
// 1). Now it is refused before any round (an OptionError: exit 2),
// saying the job, what it needs and what to change; fio never starts.
// 17 GiB of sequential writes on the 16 GiB null device here.
func TestH46cKernelRefusesAJobTheDeviceCannotHoldUpFront(t *testing.T) {
	so := fioEnv(t)
	jobs := t.TempDir()
	job := "[global]\nioengine=external:${ZONEFOLD_FIO_ENGINE}\nsock=${ZONEFOLD_SOCK}\n\n[big]\nrw=write\nbs=1m\nsize=17g\n"
	if err := os.WriteFile(filepath.Join(jobs, "big.fio"), []byte(job), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	started := false
	err := Kernel(ctx, io.Discard, KernelOptions{Dir: t.TempDir(), Mode: KernelNull, JobsDir: jobs, Rounds: 1, FioEngine: so, Config: engine.Config{CacheBytes: 16 << 20},
		testBeforeFio: func() { started = true; cancel() }})
	var bad *OptionError
	if started || !errors.As(err, &bad) || !strings.Contains(err.Error(), "job big on null:") ||
		!strings.Contains(err.Error(), "1 file of 17 GiB needs more than") || !strings.Contains(err.Error(), "lower --scale, or leave the job out (--job)") {
		t.Errorf("fio started: %v; error %v; want the job refused up front as an option error", started, err)
	}
}

// TestH46cKernelJobWorkload: the fits check reads each seed job as the
// workload fio runs: its files (numjobs=), size=, bs=, iodepth= and rw=,
// [global] values applying where a section has none.
func TestH46cKernelJobWorkload(t *testing.T) {
	for name, want := range map[string]Workload{
		"16x8k-randwrite": {Files: 16, Size: 4 << 20, BS: 8 << 10, IODepth: 4, RW: "randwrite", Loops: 1, fioDraws: true},
		"4k-qd128":        {Files: 1, Size: 32 << 20, BS: 4 << 10, IODepth: 128, RW: "randwrite", Loops: 1, fioDraws: true},
		"4x1m-end-fsync":  {Files: 4, Size: 32 << 20, BS: 1 << 20, IODepth: 1, RW: "write", Loops: 1, fioDraws: true},
		"seq128k":         {Files: 1, Size: 64 << 20, BS: 128 << 10, IODepth: 16, RW: "write", Loops: 1, fioDraws: true},
	} {
		b, err := os.ReadFile(filepath.Join("..", "testdata", "fio", name+".fio"))
		if err != nil {
			t.Fatal(err)
		}
		ws, err := kernelJobWorkloads(string(b))
		var w Workload
		if len(ws) == 1 {
			w = ws[0]
		}
		if err != nil || w.Files != want.Files || w.Size != want.Size || w.BS != want.BS || w.IODepth != want.IODepth || w.RW != want.RW || w.Loops != want.Loops || !w.fioDraws {
			t.Errorf("%s: %+v, %v; want %+v", name, w, err, want)
		}
	}
}
