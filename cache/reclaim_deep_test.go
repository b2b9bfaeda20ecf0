package cache

import (
	"context"
	"testing"
	"time"
)

// TestReclaimFindsCleanFolioPastTheFirstScan: a read that needs memory
// must not go to sleep while the LRU holds a folio it could evict. Here
// 600 dirty folios (writeback never runs: nothing calls BeginWriteback)
// sit before one clean folio a cache hit referenced. reclaim's full pass
// clears the reference and moves the folio to the young end, behind 433
// dirty ones; its last look before sleeping (evict(1)) scanned only the
// first 256 (evictScan), missed it, and the read slept though memory was
// one eviction away: with no writeback to end and nothing freed, for
// ever. (In the daemon a writeback that fails, say on a full device,
// leaves such folios dirty; every waiter then depends on the flusher's
// next attempt to wake it, however much clean memory is evictable.)
func TestReclaimFindsCleanFolioPastTheFirstScan(t *testing.T) {
	const dirtyPages = 600
	c := newTestCache(t, Config{Bytes: (dirtyPages + 1) * pageSize, MaxOrder: 0, DirtyLimit: (dirtyPages + 1) * pageSize})
	b := newMemBacking()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	page := make([]byte, pageSize)
	for i := range dirtyPages {
		if _, err := c.Write(ctx, c.File(1), int64(i)*pageSize, page, b); err != nil {
			t.Fatal(err)
		}
	}
	// The last free page becomes a clean folio, referenced by a hit.
	for range 2 {
		if _, err := c.Read(ctx, c.File(2), 0, page, b); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.lruLength(); got != dirtyPages+1 {
		t.Fatalf("LRU holds %d folios, want %d", got, dirtyPages+1)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(ctx, c.File(3), 0, make([]byte, pageSize), b)
		done <- err
	}()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			if n := c.counters.allocWaits.Load(); n != 0 {
				t.Fatalf("the read waited for memory %d times with a clean folio to evict", n)
			}
			return
		default:
		}
		if c.counters.allocWaits.Load() != 0 {
			cancel()
			<-done
			t.Fatal("the read went to sleep for memory with a clean, evictable folio in the LRU (past the first 256 it looked at)")
		}
		time.Sleep(time.Millisecond)
	}
}
