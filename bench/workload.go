package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/zonefold/zonefold/engine"
)

// Workload is an fio-like job run inside the process, straight against
// the engine's File API: bench run, bench fio's in-process side, and the
// fill and overwrite phases of bench gc.
type Workload struct {
	Files   int    // files, written or read in parallel
	BS      int    // bytes per operation
	IODepth int    // operations in flight per file (goroutines)
	Size    int64  // bytes per file
	RW      string // write, randwrite, read, randread
	// Loops is how many times each file's Size is written (random
	// overwrites past the first pass); default 1.
	Loops int
	// Ops, if set, is the operations per file instead of Size/BS × Loops:
	// a phase that writes a given number of bytes, not whole passes.
	Ops int64
	// Keep opens existing files as they are instead of truncating them:
	// an overwrite phase after a fill phase.
	Keep bool
	// WarmCache keeps, for a read workload, what the untimed layout
	// left in the cache. Without it the cache is written back and
	// emptied (Engine.DropCache) before the timed reads, which then
	// read the device: with files that fit the cache, every read was
	// a hit and bench run printed the cache's speed as the device's.
	WarmCache bool
	EndFsync  bool   // fsync every file at the end, inside the timing
	Prefix    string // file name prefix; default "job"
	Seed      uint64
	// Progress, if set, is called now and then with bytes done and total.
	Progress func(done, total int64)
	// Sample, if set, is called every SampleEvery with the bytes done so
	// far (for throughput and WAF over time).
	Sample      func(done int64)
	SampleEvery time.Duration
	// fioDraws says fio runs the workload too, drawing randwrite's
	// offsets itself (bench fio): the fits check counts every block its
	// draws may hit, not those RunWorkload's seeded draws hit.
	fioDraws bool
}

// WorkloadResult is what a workload did.
type WorkloadResult struct {
	Bytes   int64
	Ops     int64
	Elapsed time.Duration
	P50     time.Duration
	P99     time.Duration
	Stats   engine.Stats // engine counters over the run
}

// MiBps is throughput in MiB/s (the unit of every rate zonefold prints).
func (r WorkloadResult) MiBps() float64 { return mibPerS(r.Bytes, r.Elapsed) }

// opsPerFile is the operations the workload does on each file: Ops, or
// Size/BS for each of its Loops (at least one).
func (w Workload) opsPerFile() int64 {
	if w.Ops > 0 {
		return w.Ops
	}
	return w.Size / int64(w.BS) * int64(max(w.Loops, 1))
}

// bytes is what the workload reads or writes in all.
func (w Workload) bytes() int64 { return w.opsPerFile() * int64(w.BS) * int64(w.Files) }

// rng is the random source of file fi's worker q (its randwrite and
// randread offsets), the same for every run of w.
func (w Workload) rng(fi, q int) *rand.Rand {
	return rand.New(rand.NewPCG(w.Seed, uint64(fi*1024+q)))
}

// IOPS is operations per second.
func (r WorkloadResult) IOPS() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Elapsed.Seconds()
}

func (w *Workload) check() error {
	switch {
	case w.Files < 1:
		return errors.New("workload: files must be at least 1")
	case w.BS < 1 || w.BS > 64<<20:
		return fmt.Errorf("workload: bs %d out of range", w.BS)
	case w.IODepth < 1 || w.IODepth > 1024:
		return fmt.Errorf("workload: iodepth %d out of range", w.IODepth)
	case w.Size < int64(w.BS):
		return fmt.Errorf("workload: size %d smaller than bs %d", w.Size, w.BS)
	case w.Ops < 0:
		return fmt.Errorf("workload: ops %d is negative", w.Ops)
	}
	switch w.RW {
	case "write", "randwrite", "read", "randread":
	default:
		return fmt.Errorf("workload: rw %q: want write, randwrite, read or randread", w.RW)
	}
	return nil
}

// RunWorkload runs w against e. Read workloads first lay the files out
// (untimed).
func RunWorkload(ctx context.Context, e *engine.Engine, w Workload) (WorkloadResult, error) {
	if err := w.check(); err != nil {
		return WorkloadResult{}, err
	}
	if w.Loops < 1 {
		w.Loops = 1
	}
	if w.Prefix == "" {
		w.Prefix = "job"
	}
	reading := w.RW == "read" || w.RW == "randread"
	files := make([]*engine.File, w.Files)
	for i := range files {
		name := fmt.Sprintf("%s.%d", w.Prefix, i)
		var err error
		if reading {
			files[i], err = e.OpenFile(name, engine.OCreate)
			if err == nil && files[i].Size() < w.Size {
				err = layOut(ctx, files[i], w.Size, w.BS)
			}
		} else {
			flags := engine.OCreate
			if !w.Keep {
				flags |= engine.OTrunc
			}
			files[i], err = e.OpenFile(name, flags)
		}
		if err != nil {
			return WorkloadResult{}, err
		}
	}
	if reading && !w.WarmCache {
		if _, err := e.DropCache(ctx); err != nil {
			return WorkloadResult{}, fmt.Errorf("workload: empty the cache before the reads: %w", err)
		}
	}
	blocks := w.Size / int64(w.BS)
	perFile := w.opsPerFile()
	total := w.bytes()
	var done atomic.Int64
	hist := hdrhistogram.New(1, int64(10*time.Second), 3)
	var histMu sync.Mutex
	before := e.Stats()
	start := time.Now()
	stopTick := make(chan struct{})
	var tickWG sync.WaitGroup
	if w.Progress != nil || w.Sample != nil {
		every := w.SampleEvery
		if every <= 0 {
			every = 200 * time.Millisecond
		}
		tickWG.Go(func() {
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-stopTick:
					return
				case <-t.C:
					if w.Progress != nil {
						w.Progress(done.Load(), total)
					}
					if w.Sample != nil {
						w.Sample(done.Load())
					}
				}
			}
		})
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, w.Files*w.IODepth)
	var wg sync.WaitGroup
	for fi, f := range files {
		// Each of the file's workers takes every IODepth-th operation.
		for q := range w.IODepth {
			wg.Go(func() {
				rng := w.rng(fi, q)
				buf := make([]byte, w.BS)
				for i := range buf {
					buf[i] = byte(fi + q + i)
				}
				local := hdrhistogram.New(1, int64(10*time.Second), 3)
				for op := int64(q); op < perFile; op += int64(w.IODepth) {
					if ctx.Err() != nil {
						break
					}
					var off int64
					switch w.RW {
					case "write", "read":
						off = op % blocks * int64(w.BS)
					default:
						off = rng.Int64N(blocks) * int64(w.BS)
					}
					t0 := time.Now()
					var err error
					if reading {
						_, err = f.ReadAtContext(ctx, buf, off)
					} else {
						_, err = f.WriteAtContext(ctx, buf, off)
					}
					if err != nil {
						errs <- err
						cancel()
						break
					}
					_ = local.RecordValue(int64(time.Since(t0)))
					done.Add(int64(w.BS))
				}
				histMu.Lock()
				hist.Merge(local)
				histMu.Unlock()
			})
		}
	}
	wg.Wait()
	var err error
	select {
	case err = <-errs:
	default:
	}
	if err == nil && w.EndFsync && !reading {
		for _, f := range files {
			if err = f.SyncContext(ctx); err != nil {
				break
			}
		}
	}
	elapsed := time.Since(start)
	close(stopTick)
	tickWG.Wait()
	if w.Progress != nil {
		w.Progress(done.Load(), total)
	}
	for _, f := range files {
		f.Close()
	}
	// Untimed: write back what is still cached, so that the counters (and
	// so WAF) cover every byte the workload wrote.
	if err == nil && !reading {
		err = e.Sync(ctx)
	}
	res := WorkloadResult{
		Bytes: done.Load(), Ops: done.Load() / int64(w.BS), Elapsed: elapsed,
		P50: time.Duration(hist.ValueAtQuantile(50)), P99: time.Duration(hist.ValueAtQuantile(99)),
		Stats: e.Stats().Sub(before),
	}
	return res, err
}

// layOut writes a file sequentially to size and syncs it.
func layOut(ctx context.Context, f *engine.File, size int64, bs int) error {
	buf := make([]byte, bs)
	for off := f.Size() / int64(bs) * int64(bs); off < size; off += int64(bs) {
		for i := range buf {
			buf[i] = byte(off>>12) + byte(i)
		}
		if _, err := f.WriteAtContext(ctx, buf[:min(int64(bs), size-off)], off); err != nil {
			return err
		}
	}
	return f.SyncContext(ctx)
}
