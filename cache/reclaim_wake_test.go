package cache

import (
	"context"
	"testing"
	"time"
)

// TestReclaimWakesWhenAReservedPageBecomesAFolio: a read that needs memory
// found none free and nothing to evict because the last free page sat in
// another access's reserve (taken by reclaim, not yet a folio), and went
// to sleep on the cache's events. The reserve then became a clean folio
// (the other read finished), which the sleeper could evict, but nothing
// said so: only frees and the end of writeback wake memory waiters, and a
// read leaves nothing dirty to write back. With every request of a client
// asleep so, no further access came to evict for them and the daemon
// hung (zonefold serve --cache 4K under fio randrw at iodepth 64: fio
// waited for ever for replies). A new folio is a new eviction candidate
// and must wake them.
func TestReclaimWakesWhenAReservedPageBecomesAFolio(t *testing.T) {
	c := newTestCache(t, Config{Bytes: pageSize, MaxOrder: 0})
	b := newMemBacking()
	ctx := context.Background()
	// Another access's reserve holds the only page.
	res := noReserve()
	if err := c.reclaim(ctx, 0, &res); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(ctx, c.File(2), 0, make([]byte, pageSize), b)
		done <- err
	}()
	// The reader is waiting for memory once it has counted its wait: it
	// took the events' channel before its last check, so any Signal from
	// here on wakes it.
	for c.counters.allocWaits.Load() == 0 {
		select {
		case err := <-done:
			t.Fatalf("the read got memory while the only page was reserved: %v", err)
		default:
			time.Sleep(time.Millisecond)
		}
	}
	// The reserve becomes a folio of file 1, read and left clean, as the
	// other access's run loop would make it. (Without a Backing: with
	// one, the reserve is the block the miss reads into without the
	// lock, and becomes the folio only on the run loop's next turn.)
	fs := c.fileOrNew(1)
	fs.mu.Lock()
	a := access{fs: fs, off: 0, end: pageSize, p: make([]byte, pageSize)}
	if _, st, err := c.readLocked(fs, 0, &a, &res); err != nil || st.order >= 0 || st.wait != nil {
		fs.mu.Unlock()
		t.Fatalf("read into the reserved page: stall %+v, %v", st, err)
	}
	fs.mu.Unlock()
	// Nothing else happens in the cache: the waiting read must evict the
	// clean folio. (A hang shows as this bound, far above the microseconds
	// the read takes once woken.)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a read waiting for memory slept on with a clean folio it could evict: lost wakeup")
	}
}
