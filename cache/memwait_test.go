package cache

import (
	"context"
	"sync"
	"testing"

	"github.com/zonefold/zonefold/internal/cachehook"
)

// firstRead is where b's first read (held) began, once it has.
func firstRead(b *heldBacking) int64 {
	<-b.started
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ranges[0][0]
}

// memWaitCache is a cache of 8 pages, all of them dirty (nothing to
// evict, no writeback to come): pages 0-6 of file 1, page 0 of file 2,
// which the test forgets to free one page. waits gets a value each time
// an access is about to wait for memory (cachehook.SetMemoryWaitHook).
func memWaitCache(t *testing.T) (*Cache, <-chan struct{}) {
	c := newTestCache(t, Config{Bytes: 8 * pageSize, MaxOrder: 0, DirtyLimit: 8 * pageSize})
	for i := range 7 {
		mustWrite(t, c, 1, int64(i)*pageSize, fill(pageSize, byte(i)), nil)
	}
	mustWrite(t, c, 2, 0, fill(pageSize, 9), nil)
	waits := make(chan struct{}, 64)
	cachehook.SetMemoryWaitHook(c, func() { waits <- struct{}{} })
	return c, waits
}

// TestMissThatWaitedForMemoryReadsWithoutTheFileLock: a read miss of a
// file waited for memory and then got one page, its folio's. It used to
// make that page the folio at once and, with no second page for the
// scratch block that a read without the lock needs, read the device
// under the file's lock, so every hit of the file queued behind its
// device read. At fio randread iodepth 1024 on a cache smaller than the
// file (testdata/fio/randread-cases.py q1024) nearly every miss waits
// for memory, and the file's lock held reads of the device in turn.
// The page it waited for must be the block it reads into without the
// lock: a hit of the file meanwhile gets the lock at once (TryRead).
func TestMissThatWaitedForMemoryReadsWithoutTheFileLock(t *testing.T) {
	c, waits := memWaitCache(t)
	b := newHeldBacking()
	done := make(chan error, 1)
	p := make([]byte, pageSize)
	go func() {
		_, err := c.Read(context.Background(), c.File(1), 100*pageSize, p, b)
		done <- err
	}()
	<-waits // the miss waits for memory
	c.Forget(2)
	if off := firstRead(b); off != 100*pageSize {
		t.Fatalf("the device read began at %d, want %d", off, 100*pageSize)
	}
	hit := make([]byte, pageSize)
	ok := c.TryRead(c.File(1), 3*pageSize, hit)
	close(b.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatal("a hit of the file could not have its lock while a miss that had waited for memory read the device: the read ran under the file's lock")
	}
	checkBytes(t, "hit", hit, fill(pageSize, 3))
	checkBytes(t, "miss", p, make([]byte, pageSize))
}

// TestMissesWaitingForMemoryAreServedInTurn: misses that wait for memory
// get it in the order they came, and only the first waits for memory to
// be freed: one page freed goes to the first, and the second still waits.
func TestMissesWaitingForMemoryAreServedInTurn(t *testing.T) {
	c, waits := memWaitCache(t)
	b := newHeldBacking()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, off := range []int64{100 * pageSize, 200 * pageSize} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Read(context.Background(), c.File(1), off, make([]byte, pageSize), b)
			errs <- err
		}()
		<-waits // this miss waits for memory before the next begins
	}
	c.Forget(2)
	if off := firstRead(b); off != 100*pageSize {
		t.Fatalf("the page freed went to the miss at %d, want the first to wait, at %d", off, 100*pageSize)
	}
	// The first miss now holds the only free page: its device read
	// waits. Its end gives the second miss the clean folio to evict.
	close(b.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
