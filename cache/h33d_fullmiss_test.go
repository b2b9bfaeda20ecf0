package cache

import (
	"context"
	"testing"
)

// fullFolio is the folio size of the full-cache tests: 128 KiB, 32 pages,
// the eviction batch, so that one eviction frees exactly one.
const fullFolio = 128 << 10

// newFullCache makes a 1 MiB cache and fills it with file's clean
// 128 KiB folios of b's bytes: nothing is free.
func newFullCache(t *testing.T, file uint64, b *memBacking) *Cache {
	t.Helper()
	c := newTestCache(t, Config{Bytes: 1 << 20, MaxOrder: 9, BlockSize: 4096})
	fillFull(t, c, file, b)
	return c
}

// fillFull fills c, 1 MiB, with file's clean folios of fullFolio bytes.
func fillFull(t *testing.T, c *Cache, file uint64, b *memBacking) {
	t.Helper()
	for off := int64(0); off < 1<<20; off += fullFolio {
		mustRead(t, c, file, off, fullFolio, b)
	}
	if free := c.buddy.free64(); free != 0 {
		t.Fatalf("%d pages free after filling the cache; want 0", free)
	}
}

// TestMissInAFullCacheReadsWithoutTheFileLock: a miss in a cache full
// of clean folios found no free block for a read without the file's
// lock, got its memory from reclaim (a reserve), made the folio of it
// and read Backing into it under the file's lock held for writing, so
// every other access to the file, hits too, waited for the device. With
// more reads in flight than free blocks that was every miss: fio
// randread 64k at iodepth 1024 of a 128 MiB file through a 16 MiB cache
// had half its device reads under the lock (CPU profile: readLocked's
// readBacking 0.51 s, run's unlocked readBackingAt 0.50 s) and ~1000
// workers queued on the file's lock (block profile: 86% in its Lock).
// Holding the lock, the miss evicts a clean folio and reads into the
// block freed, without the lock.
func TestMissInAFullCacheReadsWithoutTheFileLock(t *testing.T) {
	const folio = fullFolio
	g := newGateBacking()
	data := fill(2<<20, 9)
	g.store(1, 0, data)
	c := newFullCache(t, 1, g.memBacking)
	got := make(chan error, 1)
	p := make([]byte, folio)
	go func() {
		_, err := c.Read(context.Background(), c.File(1), 1<<20, p, g)
		got <- err
	}()
	<-g.started
	// The miss is in Backing: a hit on the same file must not wait for
	// it. (Only the oldest folio was evicted for the miss.)
	q := make([]byte, 4096)
	hit := c.TryRead(c.File(1), 1<<20-folio, q)
	close(g.release)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	checkBytes(t, "the miss's bytes", p, data[1<<20:1<<20+folio])
	if !hit {
		t.Fatal("a hit on the file could not get its lock while a miss that had reclaimed memory was in Backing: the miss read under the file's lock")
	}
	checkBytes(t, "the hit's bytes", q, data[1<<20-folio:1<<20-folio+4096])
	// The block read became the folio: the range is a hit now.
	if !c.TryRead(c.File(1), 1<<20, q) {
		t.Fatal("the miss's range is not cached after the read")
	}
	checkAccounting(t, c)
}

// TestBeginMissInAFullCacheEvictsUnderItsLock: BeginMiss (the daemon's
// reader beginning a cold read without a worker) took a block only if
// one was free, so once a cache was full of clean folios every cold read
// went to a worker, which then queued for the file's lock to reclaim, got
// a reserve, queued again to use it, and again to put it in: fio randread
// 64k qd64, 128 MiB through a 16 MiB cache, began 25757 of 54361 misses
// in the reader. Holding the file's lock it may evict the file's clean
// folios (and try other files'), which waits for nothing. Where every
// clean folio belongs to a file whose lock is held elsewhere it still
// refuses at once.
func TestBeginMissInAFullCacheEvictsUnderItsLock(t *testing.T) {
	const folio = fullFolio
	b := newMemBacking()
	data := fill(2<<20, 11)
	b.store(1, 0, data)
	b.store(2, 0, data)
	// Full of file 2's clean folios, whose lock another access holds:
	// nothing can be evicted without waiting.
	c := newFullCache(t, 2, b)
	var m Miss
	fs2 := c.File(2).fs
	fs2.mu.RLock()
	began := beginMiss(t, c, &m, 1, 0, folio, b)
	fs2.mu.RUnlock()
	if began {
		t.Fatal("BeginMiss began with no free memory and every clean folio under a held lock")
	}
	// Full of file 1's clean folios: BeginMiss of file 1 evicts one.
	c.EvictClean(1 << 20)
	fillFull(t, c, 1, b)
	if !beginMiss(t, c, &m, 1, 1<<20, folio, b) {
		t.Fatal("BeginMiss refused in a cache full of the file's own clean folios")
	}
	p := make([]byte, folio)
	if done, busy := c.FinishMiss(&m, p, false); !done || busy {
		t.Fatalf("FinishMiss = %v, %v; want done", done, busy)
	}
	checkBytes(t, "the miss's bytes", p, data[1<<20:1<<20+folio])
	if folioOf(c, 1, 0) != nil {
		t.Fatal("the oldest folio was not the one evicted")
	}
	checkAccounting(t, c)
}
