package bench

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/zns"
)

// h46hNullLayout is the fresh layout of bench kernel's null: device.
func h46hNullLayout(t *testing.T) (kernelDevice, engine.Layout) {
	t.Helper()
	dev := kernelDeviceFor(KernelNull, "", false)
	z, err := zns.Open(dev.spec, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	l, err := engine.FreshLayout(z, engine.Config{CacheBytes: 512 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return dev, l
}

// TestH46hKernelSeedJobsFitBothDevices: the fits check must refuse no
// seed job at the scales bench kernel is run at (1, and 16, its
// default) on either device it serves (null:, and emu in DIR), and the
// emu file it makes for the look is gone after.
func TestH46hKernelSeedJobsFitBothDevices(t *testing.T) {
	dir := t.TempDir()
	for _, scale := range []float64{1, 16} {
		jobs, err := loadKernelJobs(filepath.Join("..", "testdata", "fio"), nil, scale)
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) < 4 {
			t.Fatalf("%d seed jobs", len(jobs))
		}
		for _, mode := range []string{KernelNull, KernelEmu} {
			dev := kernelDeviceFor(mode, dir, false)
			// As Kernel checks, before it sizes the cache.
			if err := checkKernelJobsFit(dev, engine.Config{}, jobs); err != nil {
				t.Errorf("--scale %g, %s: %v", scale, mode, err)
			}
			if dev.file != "" {
				if _, err := os.Stat(dev.file); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s: the emu file is left behind: %v", dev.file, err)
				}
			}
		}
	}
}

// TestH46hKernelJobSectionsCountedEach: a job file's sections were
// counted as that many files of the largest section's size= (and bs=,
// iodepth=): a large section beside a small one was refused though both
// fit; nrfiles= was left out (a header per file admission counts, so a
// job of many small files passed and would meet ENOSPC); filesize= with
// no size= (a valid fio job) was refused as having no size; and bs=
// with a value per direction (bs=4k,8k) was refused as not a size.
// Each section's files now count at their own sizes.
func TestH46hKernelJobSectionsCountedEach(t *testing.T) {
	dev, l := h46hNullLayout(t)
	mib := int64(1 << 20)
	big := l.Room / 2 / mib * mib
	for _, tc := range []struct {
		name, text string
		fits       bool
	}{
		{"big-and-small", fmt.Sprintf("[global]\nrw=write\nbs=1m\n[big]\nsize=%dm\n[small]\nsize=1m\nbs=4k\niodepth=64\n", big/mib+1), true},
		{"two-big", fmt.Sprintf("[global]\nrw=write\nbs=1m\n[a]\nsize=%dm\n[b]\nsize=%dm\n", big/mib+1, big/mib+1), false},
		{"same-file-twice", fmt.Sprintf("[w]\nfilename=f\nrw=write\nbs=1m\nsize=%dm\n[r]\nstonewall\nfilename=f\nrw=read\nbs=1m\nsize=%dm\n", big/mib+1, big/mib+1), true},
		// Data within the room; a block more per 16 KiB file (a header)
		// of nrfiles files are not.
		{"many-files", fmt.Sprintf("[many]\nrw=write\nbs=4k\nnrfiles=%d\nsize=%d\n", (l.Room-l.Room/8)/16384, (l.Room-l.Room/8)/16384*16384), false},
		{"filesize", "[fs]\nrw=write\nbs=64k\nnrfiles=4\nfilesize=8m\n", true},
		{"filesize-too-big", fmt.Sprintf("[fs]\nrw=write\nbs=64k\nnrfiles=4\nfilesize=%dm\n", l.Room/3/mib), false},
		{"bs-per-direction", "[rw]\nrw=randrw\nbs=4k,8k\nsize=64m\n", true},
	} {
		err := checkKernelJobsFit(dev, engine.Config{CacheBytes: 512 << 20}, []kernelJob{{name: tc.name, text: tc.text}})
		var bad *OptionError
		if tc.fits && err != nil || !tc.fits && !errors.As(err, &bad) {
			t.Errorf("%s (room %d): %v; want fits %v", tc.name, l.Room, err, tc.fits)
		}
		if !tc.fits && err != nil && !strings.Contains(err.Error(), "job "+tc.name+" on null:") {
			t.Errorf("%s: %v; want the job named", tc.name, err)
		}
	}
}

// TestH46hKernelHugeScaleIsRefused: --scale multiplies size= in float
// and converted it to int64: past 8 EiB the conversion wrapped, and
// scaleJob wrote size=1m: bench kernel ran a 1 MiB job for --scale 1e12.
func TestH46hKernelHugeScaleIsRefused(t *testing.T) {
	text, err := scaleJob("[a]\nsize=32m\n", 1e12)
	if err == nil {
		t.Errorf("--scale 1e12 of size=32m: %q; want an error", text)
	}
	var bad *OptionError
	if err != nil && (!errors.As(err, &bad) || !strings.Contains(err.Error(), "--scale")) {
		t.Errorf("%v; want an option error naming --scale", err)
	}
}

// TestH46hHugeReadHoldsBlocks: ceilDiv added b-1 to a size within a
// block of 8 EiB and wrapped: a read job of size=9223372036854775807
// held a negative count of blocks.
func TestH46hHugeReadHoldsBlocks(t *testing.T) {
	w := Workload{Files: 1, Size: math.MaxInt64, BS: 4096, IODepth: 1, RW: "read", Loops: 1}
	if held, _ := w.blocksHeld(1 << 30); held <= 1<<30 {
		t.Errorf("%d bytes hold %d blocks", w.Size, held)
	}
	_, l := h46hNullLayout(t)
	var bad *OptionError
	if err := checkFits(w, l, true); !errors.As(err, &bad) {
		t.Errorf("%v; want it refused", err)
	}
}

// TestH46hHugeFilesCountsDoNotWrap: blocksHeld multiplied --files by
// each file's blocks, and checkFits the blocks by the block size,
// unchecked: 16384 files of 1 PiB held 2^52 blocks, 2^64 bytes, which
// wrapped to 0, and bench run let the workload through, formatted the
// device and wrote until ENOSPC; 2 files of 4 EiB were refused with
// "(-8 EiB)" as their total. Counts now stop past the room, and the
// total says it is past int64's range.
func TestH46hHugeFilesCountsDoNotWrap(t *testing.T) {
	_, l := h46hNullLayout(t)
	for _, w := range []Workload{
		{Files: 16384, Size: 1 << 50, BS: 128 << 10, IODepth: 1, RW: "write", Loops: 1},
		{Files: 16384, Size: 1 << 50, BS: 4096, IODepth: 1, RW: "read", Loops: 1},
		{Files: 4096, Size: 7 << 60, BS: 4096, IODepth: 1, RW: "randwrite", Loops: 1},
		{Files: 2, Size: 4 << 60, BS: 128 << 10, IODepth: 1, RW: "write", Loops: 1},
	} {
		err := checkFits(w, l, true)
		var bad *OptionError
		if !errors.As(err, &bad) || strings.Contains(err.Error(), "-") && strings.Contains(err.Error(), "(-") {
			t.Errorf("%d files x %d %s: %v; want refused, no negative total", w.Files, w.Size, w.RW, err)
		}
	}
}

// TestH46hRefusalNamesTheOverwritesMargin: a refusal's "need" counts
// overwriteBlocks (the writes in flight over blocks already written)
// beside the record headers and pads, but said "with the engine's record
// headers and pads" alone: its number was more than those explain.
func TestH46hRefusalNamesTheOverwritesMargin(t *testing.T) {
	_, l := h46hNullLayout(t)
	w := Workload{Files: 1, BS: 1 << 20, IODepth: 32, RW: "write", Loops: 2}
	for w.Size = l.Room / (1 << 20) * (1 << 20); l.Need(1, w.Size) > l.Room; w.Size -= 1 << 20 {
	} // fits but for the margin
	if w.overwriteBlocks() == 0 || l.Need(1, w.Size) > l.Room {
		t.Fatalf("%+v: margin %d blocks, need %d of %d", w, w.overwriteBlocks(), l.Need(1, w.Size), l.Room)
	}
	err := checkFits(w, l, true)
	if err == nil || !strings.Contains(err.Error(), "record headers and pads and the writes in flight over blocks already written") {
		t.Errorf("%v; want the margin named", err)
	}
}

// TestH46hKernelJobOverwritesCounted: a sequential job that writes its
// files more than once (io_size= past size=, time_based) overwrites its
// blocks, whose writes in flight admission counts twice: read as one
// pass, it got no margin for them (as --loops gets).
func TestH46hKernelJobOverwritesCounted(t *testing.T) {
	for _, text := range []string{
		"[a]\nrw=write\nbs=1m\nsize=8m\nio_size=32m\n",
		"[a]\nrw=write\nbs=1m\nsize=8m\ntime_based\nruntime=10\n",
		"[global]\ntime_based=1\n[a]\nrw=write\nbs=1m\nsize=8m\n",
	} {
		ws, err := kernelJobWorkloads(text)
		if err != nil || len(ws) != 1 || ws[0].overwriteBlocks() == 0 {
			t.Errorf("%q: %+v, %v; want one workload with an overwrite margin", text, ws, err)
		}
	}
	if ws, err := kernelJobWorkloads("[a]\nrw=write\nbs=1m\nsize=8m\ntime_based=0\n"); err != nil || ws[0].overwriteBlocks() != 0 {
		t.Errorf("time_based=0: %+v, %v; want no margin", ws, err)
	}
}

// TestH46hSectionsAtTheLimitRun: checkAllFit adds up a job's sections
// (kernelJobWorkloads); the largest pair it lets through (a large
// sequential section and a small randwrite one, written twice) runs to
// the end with both writing at once on one engine, and a block more is
// refused: the sum counts what admission counts.
func TestH46hSectionsAtTheLimitRun(t *testing.T) {
	small := Workload{Files: 2, Size: 512 << 10, BS: 8192, IODepth: 4, RW: "randwrite", Loops: 2, Seed: 3, Prefix: "small"}
	big := Workload{Files: 1, Size: 4096, BS: 4096, IODepth: 2, RW: "write", Loops: 1, Prefix: "big"}
	e, _ := h45dDevice(t)
	l := h46cLayout(t, e)
	for checkAllFit([]Workload{big, small}, l, "") == nil {
		big.Size += 4096
	}
	over := big
	big.Size -= 4096
	var bad *OptionError
	if err := checkAllFit([]Workload{over, small}, l, ""); !errors.As(err, &bad) || !strings.Contains(err.Error(), "the 3 files of its 2 job sections hold") {
		t.Errorf("%v; want the pair refused", err)
	}
	errs := make(chan error, 2)
	for _, w := range []Workload{big, small} {
		go func() {
			_, err := RunWorkload(t.Context(), e, w)
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("big %d + small %d at the limit: %v", big.Size, small.Size, err)
		}
	}
}

// TestH46hKernelLargeScaleIsRefusedAsNotFitting: bench kernel set its
// default cache (twice the largest job's bytes) before the fits check,
// whose engine configuration check then failed on that cache: --scale
// 1000 (jobs of up to 64 GiB on the 16 GiB null: device) exited 1 with
// "engine: cache: size 128 GiB: more than the memory available", not
// the job it cannot hold (exit 2).
func TestH46hKernelLargeScaleIsRefusedAsNotFitting(t *testing.T) {
	so := fioEnv(t)
	err := Kernel(t.Context(), io.Discard, KernelOptions{Dir: t.TempDir(), Mode: KernelNull, JobsDir: filepath.Join("..", "testdata", "fio"),
		Jobs: []string{"16x8k-randwrite"}, Rounds: 1, Scale: 1000, FioEngine: so,
		testBeforeFio: func() { t.Error("fio started") }})
	var bad *OptionError
	if !errors.As(err, &bad) || !strings.Contains(err.Error(), "job 16x8k-randwrite on null:") {
		t.Errorf("%v; want the job refused as not fitting", err)
	}
}

// TestH46hKernelJobBSSplit: bssplit= (sizes with their shares) was left
// out, so a job's writes counted as 4 KiB ones: its writes in flight
// over written blocks, up to 64 KiB each, got a 4 KiB margin.
func TestH46hKernelJobBSSplit(t *testing.T) {
	ws, err := kernelJobWorkloads("[a]\nrw=randwrite\nbssplit=4k/50:64k/40:16k/10,8k\nsize=8m\n")
	if err != nil || len(ws) != 1 || ws[0].BS != 64<<10 {
		t.Errorf("%+v, %v; want one workload of 64 KiB writes", ws, err)
	}
}

// TestH46hKernelJobSharedFileDepth: numjobs= jobs on one filename= write
// the same file, so its writes in flight are each job's iodepth= added
// up; and an error in [global] names it.
func TestH46hKernelJobSharedFileDepth(t *testing.T) {
	ws, err := kernelJobWorkloads("[a]\nfilename=f\nnumjobs=4\niodepth=8\nrw=randwrite\nbs=4k\nsize=8m\n")
	if err != nil || len(ws) != 1 || ws[0].Files != 1 || ws[0].IODepth != 32 {
		t.Errorf("%+v, %v; want 1 file with 32 writes in flight", ws, err)
	}
	if _, err := kernelJobWorkloads("[global]\nnumjobs=x\n[a]\nsize=8m\n"); err == nil || !strings.HasPrefix(err.Error(), "[global] numjobs=x") {
		t.Errorf("%v; want [global] named", err)
	}
}
