package cache

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// heldBacking is memBacking whose first read is held until release is
// closed (no time limit: a test that needs the read to end releases it).
// calls counts ReadBacking calls; each call's range is kept.
type heldBacking struct {
	*memBacking
	started chan struct{} // closed once the first read is held
	release chan struct{}
	calls   atomic.Int32
	mu      sync.Mutex
	ranges  [][2]int64
}

func newHeldBacking() *heldBacking {
	return &heldBacking{memBacking: newMemBacking(), started: make(chan struct{}), release: make(chan struct{})}
}

func (h *heldBacking) ReadBacking(file uint64, off int64, p []byte) error {
	h.mu.Lock()
	h.ranges = append(h.ranges, [2]int64{off, off + int64(len(p))})
	h.mu.Unlock()
	if h.calls.Add(1) == 1 {
		close(h.started)
		<-h.release
	}
	return h.memBacking.ReadBacking(file, off, p)
}

// pollUntil polls until cond holds or fail says the test has failed; it
// never decides the result on time (the deadline only ends a test that
// would otherwise hang).
func pollUntil(t *testing.T, what string, cond, fail func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); {
		if fail() {
			t.Fatalf("%s: failed before it happened", what)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still not after 20 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestConcurrentMissesOfOneRunReadItOnce: a second read of blocks that
// another read is bringing in through Backing without the file's lock
// waits for that read, as the kernel's readers wait on a locked folio,
// rather than read the same blocks from the device again (fio's
// sequential reads at queue depth 16 each read the folio the one before
// them was reading; with readahead, readers reach the window being read).
func TestConcurrentMissesOfOneRunReadItOnce(t *testing.T) {
	c := newTestCache(t, Config{Bytes: 4 << 20, MaxOrder: 5, BlockSize: 4096})
	h := newHeldBacking()
	data := fill(128<<10, 7)
	h.store(1, 0, data)
	var wg sync.WaitGroup
	var first, second []byte
	wg.Go(func() { first = mustRead(t, c, 1, 0, 128<<10, h) })
	<-h.started
	wg.Go(func() { second = mustRead(t, c, 1, 64<<10, 4096, h) })
	pollUntil(t, "the second read waits for the first's",
		func() bool { return c.Stats().FillWaits > 0 },
		func() bool { return h.calls.Load() > 1 })
	close(h.release)
	wg.Wait()
	if n := h.calls.Load(); n != 1 {
		t.Fatalf("Backing read %d times (%v), want once", n, h.ranges)
	}
	checkBytes(t, "first read", first, data)
	checkBytes(t, "second read", second, data[64<<10:68<<10])
}

// TestPrefetchFillsTheCache: what Prefetch brings in, later reads find
// without Backing; it reads only what is missing and copies nothing out.
func TestPrefetchFillsTheCache(t *testing.T) {
	c := newTestCache(t, Config{Bytes: 8 << 20, BlockSize: 4096})
	b := newMemBacking()
	data := fill(1<<20, 3)
	b.store(1, 0, data)
	mustRead(t, c, 1, 0, 4096, b) // one block already in
	if err := c.Prefetch(context.Background(), c.File(1), 0, 1<<20, b); err != nil {
		t.Fatal(err)
	}
	reads := b.reads
	if got, want := c.Stats().PrefetchedBytes, uint64(1<<20-4096); got != want {
		t.Fatalf("prefetched %d bytes, want %d", got, want)
	}
	var got []byte
	for off := int64(0); off < 1<<20; off += 128 << 10 {
		got = append(got, mustRead(t, c, 1, off, 128<<10, b)...)
	}
	if b.reads != reads {
		t.Fatalf("reads after Prefetch went to Backing %d times", b.reads-reads)
	}
	checkBytes(t, "read after prefetch", got, data)
}

// TestPrefetchNeverWaits: readahead is a guess; it must not hold its
// caller (a daemon's readahead worker) while memory is all dirty or
// blocks are under writeback, nor read again what another read is
// reading.
func TestPrefetchNeverWaits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	t.Run("memory all dirty", func(t *testing.T) {
		c := newTestCache(t, Config{Bytes: 1 << 20, DirtyLimit: 1 << 20, BlockSize: 4096})
		b := newMemBacking()
		b.store(2, 0, fill(256<<10, 1))
		mustWrite(t, c, 1, 0, fill(1<<20, 2), nil)
		if err := c.Prefetch(ctx, c.File(2), 0, 256<<10, b); err != nil {
			t.Fatalf("Prefetch with no memory to spare: %v (it waited)", err)
		}
		if b.reads != 0 {
			t.Fatalf("Prefetch read %d times with no memory", b.reads)
		}
	})
	t.Run("under writeback", func(t *testing.T) {
		c := newTestCache(t, Config{Bytes: 4 << 20, MaxOrder: 5, BlockSize: 4096})
		b := newMemBacking()
		mustWrite(t, c, 1, 0, fill(64<<10, 2), nil)
		exts := c.BeginWriteback(1, 0, nil)
		defer c.EndWriteback(exts, nil)
		// The folio stays, its blocks past 32 KiB under writeback and no
		// longer uptodate: a read of them waits for the writeback.
		c.Truncate(1, 32<<10)
		if err := c.Prefetch(ctx, c.File(1), 0, 64<<10, b); err != nil {
			t.Fatalf("Prefetch over blocks under writeback: %v (it waited)", err)
		}
		if b.reads != 0 {
			t.Fatalf("Prefetch read blocks under writeback %d times", b.reads)
		}
	})
	t.Run("another read in flight", func(t *testing.T) {
		c := newTestCache(t, Config{Bytes: 4 << 20, MaxOrder: 5, BlockSize: 4096})
		h := newHeldBacking()
		data := fill(512<<10, 9)
		h.store(1, 0, data)
		var wg sync.WaitGroup
		var first []byte
		wg.Go(func() { first = mustRead(t, c, 1, 0, 128<<10, h) })
		defer wg.Wait()
		<-h.started
		if err := c.Prefetch(ctx, c.File(1), 0, 512<<10, h); err != nil {
			t.Fatal(err)
		}
		select {
		case <-h.release:
			t.Fatal("released early")
		default:
		}
		h.mu.Lock()
		for _, r := range h.ranges[1:] {
			if r[0] < 128<<10 {
				t.Errorf("Prefetch read [%d, %d) again while the first read had it in flight", r[0], r[1])
			}
		}
		h.mu.Unlock()
		close(h.release)
		wg.Wait()
		calls := h.calls.Load()
		rest := mustRead(t, c, 1, 128<<10, 384<<10, h)
		if n := h.calls.Load(); n != calls {
			t.Fatalf("reading what Prefetch brought in called Backing %d more times", n-calls)
		}
		checkBytes(t, "first", first, data[:128<<10])
		checkBytes(t, "rest", rest, data[128<<10:])
	})
}
