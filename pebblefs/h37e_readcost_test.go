package pebblefs

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/internal/report"
)

// TestReadVsReadAtCost measures what a handle's Read (vfs.Copy's reads:
// pebblefs has no Link, so vfs.LinkOrCopy copies every ingested and
// checkpointed table) costs against ReadAt in the same chunks (io.Copy's
// 32 KiB), both on a handle opened with vfs.SequentialReadsOption as
// vfs.Copy opens it. A 128 MiB file is written once; each round reads it
// whole once each way (the order alternating from round to round), each
// on a freshly opened engine whose cache is a quarter of the file, after
// the emulated device's file was dropped from the kernel's page cache
// (POSIX_FADV_DONTNEED), so every read comes from the disk. It also
// times vfs.Copy itself against the same copy made with ReadAt. The
// ratios of the medians are printed with each side's range. A
// measurement, not a check: ZONEFOLD_READ_COST=1 runs it
// (ZONEFOLD_READ_COST_WARM=1 keeps the kernel's page cache,
// ZONEFOLD_READ_COST_ROUNDS=N runs N rounds, default 7).
//
//	ZONEFOLD_READ_COST=1 go test -ldflags=-checklinkname=0 -run TestReadVsReadAtCost -v -count=1 -timeout 30m ./pebblefs/
func TestReadVsReadAtCost(t *testing.T) {
	if os.Getenv("ZONEFOLD_READ_COST") == "" {
		t.Skip("ZONEFOLD_READ_COST=1 runs it")
	}
	const (
		fileSize = 128 << 20
		chunk    = 32 << 10 // io.Copy's buffer, vfs.Copy's read size
	)
	rounds := 7
	if v, err := strconv.Atoi(os.Getenv("ZONEFOLD_READ_COST_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	warm := os.Getenv("ZONEFOLD_READ_COST_WARM") != ""
	path := filepath.Join(t.TempDir(), "dev")
	dev := fmt.Sprintf("emu:%s?zone_size=8M&zones=96", path)
	cfg := engine.Config{CacheBytes: 32 << 20, DirtyLimit: 16 << 20}

	e := formatOpen(t, dev, 0, cfg)
	y := New(e)
	w, err := y.Create("src", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i*7 + i>>12)
	}
	for range fileSize / len(buf) {
		if _, err := w.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	dropOS := func() {
		if warm {
			return
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			t.Fatal(err)
		}
	}
	readWhole := func(y *FS, useRead bool) {
		f, err := y.Open("src", vfs.SequentialReadsOption)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		p := make([]byte, chunk)
		var total int64
		for {
			var n int
			if useRead {
				n, err = f.Read(p)
			} else {
				n, err = f.ReadAt(p, total)
			}
			total += int64(n)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if total != fileSize {
			t.Fatalf("read %d bytes of %d", total, fileSize)
		}
	}
	copyReadAt := func(y *FS) { // vfs.Copy, reading with ReadAt
		src, err := y.Open("src", vfs.SequentialReadsOption)
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		dst, err := y.Create("dst", vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		defer dst.Close()
		if _, err := io.Copy(dst, io.NewSectionReader(src, 0, fileSize)); err != nil {
			t.Fatal(err)
		}
		if err := dst.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	type arm struct {
		name string
		run  func(y *FS)
	}
	arms := []arm{
		{"read: Read", func(y *FS) { readWhole(y, true) }},
		{"read: ReadAt", func(y *FS) { readWhole(y, false) }},
		{"copy: vfs.Copy (Read)", func(y *FS) {
			if err := vfs.Copy(y, "src", "dst"); err != nil {
				t.Fatal(err)
			}
		}},
		{"copy: ReadAt", copyReadAt},
	}
	rate := make([][]float64, len(arms))
	cpu := make([][]float64, len(arms)) // the process's CPU time per MiB: steadier on a shared machine
	devRead := make([]int64, len(arms))
	for r := range rounds {
		for pair := 0; pair < len(arms); pair += 2 {
			for j := range 2 {
				k := pair + (j+r)%2 // alternate which of the pair goes first
				dropOS()
				e := reopenEngine(t, dev, cfg)
				y := New(e)
				s0 := e.Stats()
				c0 := report.ProcessCPU()
				t0 := time.Now()
				arms[k].run(y)
				d := time.Since(t0)
				cpu[k] = append(cpu[k], (report.ProcessCPU()-c0).Seconds()*1e6/(fileSize>>20))
				devRead[k] += e.Stats().DevRead - s0.DevRead
				if err := y.Remove("dst"); err != nil && !os.IsNotExist(err) {
					t.Fatal(err)
				}
				if err := e.Close(); err != nil {
					t.Fatal(err)
				}
				rate[k] = append(rate[k], fileSize/(1<<20)/d.Seconds())
			}
		}
	}
	t.Logf("%d rounds, %d MiB file, %d KiB chunks, engine cache %d MiB, kernel page cache dropped: %v", rounds, fileSize>>20, chunk>>10, cfg.CacheBytes>>20, !warm)
	for k := 0; k < len(arms); k += 2 {
		a, b := rate[k], rate[k+1]
		t.Logf("  %-22s %7.1f MiB/s (%.1f..%.1f, spread %.2f), dev_read %d MiB/round", arms[k].name, report.Median(a), slices.Min(a), slices.Max(a), slices.Max(a)/slices.Min(a), devRead[k]/int64(rounds)>>20)
		t.Logf("  %-22s %7.1f MiB/s (%.1f..%.1f, spread %.2f), dev_read %d MiB/round", arms[k+1].name, report.Median(b), slices.Min(b), slices.Max(b), slices.Max(b)/slices.Min(b), devRead[k+1]/int64(rounds)>>20)
		t.Logf("  ratio of medians (first/second): %.3f", report.Median(a)/report.Median(b))
		a, b = cpu[k], cpu[k+1]
		t.Logf("  CPU us/MiB: %.0f (%.0f..%.0f) vs %.0f (%.0f..%.0f): ratio of medians %.3f", report.Median(a), slices.Min(a), slices.Max(a), report.Median(b), slices.Min(b), slices.Max(b), report.Median(a)/report.Median(b))
	}
}
