package cache

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

// TestFullCacheMissesEvictUnderTheLockStress: in a cache far smaller
// than the files read, whole-folio misses (Read's gapMiss, BeginMiss and
// FinishMiss) evict clean folios under the file's lock they hold while
// other accesses of the same file and of another one hit (Read, TryRead),
// miss the usual way, read ahead (Prefetch) and write the same bytes
// back (so the file's gen moves and writeback runs). Every read must
// return the files' bytes — a folio freed while one copied from it, or
// a block freed twice and handed out twice, shows as poison (0xA5) or
// another file's bytes — and once all is written back and evicted the
// arena must be all free again (no block leaked, none counted twice).
// Run it with -race.
func TestFullCacheMissesEvictUnderTheLockStress(t *testing.T) {
	const (
		files    = 2
		fileSize = 4 << 20
		workers  = 6
	)
	ops := 1500
	if testing.Short() {
		ops = 300
	}
	c := newTestCache(t, Config{Bytes: 1 << 20, MaxOrder: 5, BlockSize: 4096, DirtyLimit: 256 << 10})
	b := newMemBacking()
	want := map[uint64][]byte{}
	for f := uint64(1); f <= files; f++ {
		want[f] = fill(fileSize, byte(17*f))
		b.store(f, 0, want[f])
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, workers+1)
	var flushMu sync.Mutex
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 34))
			buf := make([]byte, 128<<10)
			var m Miss
			for op := range ops {
				file := uint64(1 + rng.IntN(files))
				fl := c.File(file)
				size := []int{4 << 10, 16 << 10, 64 << 10, 128 << 10}[rng.IntN(4)]
				off := int64(rng.IntN(fileSize/size)) * int64(size)
				p := buf[:size]
				check := func(what string) error {
					if string(p) != string(want[file][off:off+int64(size)]) {
						return fmt.Errorf("worker %d op %d: %s of file %d at %d (%d bytes) differs from the file's bytes", w, op, what, file, off, size)
					}
					return nil
				}
				var err error
				switch k := rng.IntN(10); {
				case k < 4:
					if _, err = c.Read(ctx, fl, off, p, b); err == nil {
						err = check("Read")
					}
				case k < 6:
					if c.TryRead(fl, off, p) {
						err = check("TryRead")
					}
				case k < 8:
					mem, ok := c.BeginMiss(fl, off, size, &m)
					if !ok {
						break
					}
					lo, _ := m.Range()
					if err = b.ReadBacking(file, lo, mem); err != nil {
						c.AbortMiss(&m)
						break
					}
					done, busy := c.FinishMiss(&m, p, false)
					if busy {
						done, _ = c.FinishMiss(&m, p, true)
					}
					if done {
						err = check("FinishMiss")
					}
				case k < 9:
					err = c.Prefetch(ctx, fl, off, int64(size), b)
				default:
					// The file's own bytes again: gen moves, writeback runs.
					if _, err = c.Write(ctx, fl, off, want[file][off:off+int64(size)], b); err == nil && c.DirtyBytes() > 128<<10 {
						flushMu.Lock()
						b.flush(c)
						flushMu.Unlock()
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	b.flush(c)
	s := c.Stats()
	if s.Evictions == 0 {
		t.Fatal("no evictions: the cache was not full")
	}
	var pages int64
	for k, n := range s.Folios {
		pages += n << k
	}
	if pages*pageSize != s.CachedBytes {
		t.Fatalf("live folios hold %d bytes, the arena has %d bytes in use", pages*pageSize, s.CachedBytes)
	}
	if n := c.lruLength(); int64(n) != func() (all int64) {
		for _, n := range s.Folios {
			all += n
		}
		return all
	}() {
		t.Fatalf("%d folios on the LRU, %v live", n, s.Folios)
	}
	c.EvictClean(1 << 40)
	if s := c.Stats(); s.CachedBytes != 0 || s.DirtyBytes != 0 {
		t.Fatalf("after writeback and eviction: %d bytes in use, %d dirty; want none", s.CachedBytes, s.DirtyBytes)
	}
}
