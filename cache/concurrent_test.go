package cache

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
)

// TestConcurrentAccess runs writers and readers of shared files at once —
// each owning a byte range that shares folios with its neighbours — with a
// flusher that writes back (sometimes failing) and a small arena that
// forces eviction. Each checks that its reads return its own writes.
func TestConcurrentAccess(t *testing.T) {
	const (
		files   = 2
		workers = 6 // per file
		region  = 150_000
		ops     = 300
	)
	if testing.Short() {
		t.Skip("slow")
	}
	kick := make(chan struct{}, 1)
	c := newTestCache(t, Config{Bytes: 1 << 20, MaxOrder: 9, BlockSize: 1024, DirtyLimit: 512 << 10,
		OnPressure: func() {
			select {
			case kick <- struct{}{}:
			default:
			}
		}})
	b := newMemBacking()
	stop := make(chan struct{})
	flusherDone := make(chan struct{})
	go func() {
		defer close(flusherDone)
		rng := rand.New(rand.NewPCG(9, 9))
		var exts []Extent
		for {
			select {
			case <-stop:
				return
			case <-kick:
			}
			for _, file := range c.DirtyFiles(nil) {
				exts = c.BeginWriteback(file, 64<<10, exts[:0])
				var err error
				if rng.IntN(10) == 0 {
					err = syscall.EIO
				} else {
					for _, e := range exts {
						b.store(file, e.Off, e.Data)
					}
				}
				c.EndWriteback(exts, err)
			}
			if c.DirtyBytes() > 0 { // keep going while anything is dirty
				select {
				case kick <- struct{}{}:
				default:
				}
			}
		}
	}()

	var wg sync.WaitGroup
	errs := make(chan error, files*workers)
	for f := range files {
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- worker(c, b, uint64(f+1), int64(w*region), region, ops, uint64(f*workers+w))
			}()
		}
	}
	wg.Wait()
	close(stop)
	<-flusherDone
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if s := c.Stats(); s.Evictions == 0 {
		t.Error("no evictions: the arena was not under pressure")
	}
}

// worker writes and reads its own range [base, base+n) of file, keeping a
// model of it.
func worker(c *Cache, b Backing, file uint64, base int64, n, ops int, seed uint64) error {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 1))
	model := make([]byte, n)
	buf := make([]byte, n)
	for op := range ops {
		off := rng.IntN(n)
		l := 1 + rng.IntN(min(n-off, 40_000))
		if rng.IntN(2) == 0 {
			p := buf[:l]
			for i := range p {
				p[i] = byte(rng.Uint32()) | 1
			}
			if _, err := c.Write(ctx, c.File(file), base+int64(off), p, b); err != nil {
				return err
			}
			copy(model[off:], p)
			continue
		}
		p := buf[:l]
		if _, err := c.Read(ctx, c.File(file), base+int64(off), p, b); err != nil {
			return err
		}
		if !bytes.Equal(p, model[off:off+l]) {
			return fmt.Errorf("file %d, worker at %d, op %d: read [%d, +%d) differs from what it wrote", file, base, op, off, l)
		}
	}
	return nil
}
