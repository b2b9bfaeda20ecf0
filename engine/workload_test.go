package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
)

// Workload is the tests' load generator: Files files, each written by
// IODepth goroutines with BS-byte writes, sequentially (RW "write", Size
// bytes per file) or at random block offsets (RW "randwrite", Ops writes
// per file, default Size/BS). Keep opens the files as they are instead
// of truncating them. The benchmarks' generator is package bench's; this
// one stays small because engine tests cannot import bench.
type Workload struct {
	Files, BS, IODepth int
	Size               int64
	RW                 string
	Ops                int64
	Keep               bool
	Seed               uint64
}

// RunWorkload runs w against e and writes everything back.
func RunWorkload(ctx context.Context, e *Engine, w Workload) (Stats, error) {
	if w.Files < 1 || w.BS < 1 || w.IODepth < 1 || w.Size < int64(w.BS) {
		return Stats{}, fmt.Errorf("workload %+v: want files, bs and iodepth >= 1 and size >= bs", w)
	}
	if w.RW != "write" && w.RW != "randwrite" {
		return Stats{}, fmt.Errorf("workload rw %q: want write or randwrite", w.RW)
	}
	before := e.Stats()
	blocks := w.Size / int64(w.BS)
	ops := w.Ops
	if ops <= 0 {
		ops = blocks
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var firstErr error
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
		cancel()
	}
	var wg sync.WaitGroup
	for fi := range w.Files {
		flags := OCreate
		if !w.Keep {
			flags |= OTrunc
		}
		f, err := e.OpenFile(fmt.Sprintf("job.%d", fi), flags)
		if err != nil {
			return Stats{}, err
		}
		defer f.Close()
		for q := range w.IODepth {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(w.Seed, uint64(fi*1024+q)))
				buf := make([]byte, w.BS)
				for i := range buf {
					buf[i] = byte(fi + q + i)
				}
				for op := int64(q); op < ops && ctx.Err() == nil; op += int64(w.IODepth) {
					off := op % blocks * int64(w.BS)
					if w.RW == "randwrite" {
						off = rng.Int64N(blocks) * int64(w.BS)
					}
					if _, err := f.WriteAtContext(ctx, buf, off); err != nil {
						fail(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if firstErr != nil {
		return Stats{}, firstErr
	}
	if err := e.Sync(ctx); err != nil {
		return Stats{}, err
	}
	return e.Stats().Sub(before), nil
}
