package cache

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"
)

// beginMiss begins a miss of [off, off+n) of file and fills its block
// from b, as the engine's StartRead does with the device.
func beginMiss(t *testing.T, c *Cache, m *Miss, file uint64, off int64, n int, b *memBacking) bool {
	t.Helper()
	mem, ok := c.BeginMiss(c.File(file), off, n, m)
	if !ok {
		return false
	}
	start, end := m.Range()
	if int64(len(mem)) != end-start || start > off || end < off+int64(n) {
		t.Fatalf("BeginMiss(%d, %d): range [%d, %d) with %d bytes of memory", off, n, start, end, len(mem))
	}
	if err := b.ReadBacking(file, start, mem); err != nil {
		t.Fatal(err)
	}
	return true
}

// TestMissBecomesTheFolio: a miss begun with BeginMiss and finished with
// FinishMiss puts its block in the cache (a later read is a hit, read
// from nowhere else) and copies the read's bytes out; while it is in
// flight a Read of the same range waits for it rather than reading the
// blocks again, and a second BeginMiss of them is refused.
func TestMissBecomesTheFolio(t *testing.T) {
	c := newTestCache(t, Config{Bytes: 4 << 20, MaxOrder: 9, BlockSize: 4096})
	b := newMemBacking()
	data := fill(256<<10, 3)
	b.store(1, 0, data)
	var m Miss
	if !beginMiss(t, c, &m, 1, 64<<10, 64<<10, b) {
		t.Fatal("BeginMiss of a whole missing 64 KiB folio refused")
	}
	var m2 Miss
	if _, ok := c.BeginMiss(c.File(1), 64<<10, 64<<10, &m2); ok {
		t.Fatal("a second BeginMiss of blocks being read began")
	}
	reads := b.reads
	got := make(chan []byte)
	go func() {
		p := make([]byte, 64<<10)
		c.Read(context.Background(), c.File(1), 64<<10, p, b)
		got <- p
	}()
	time.Sleep(20 * time.Millisecond)
	p := make([]byte, 64<<10)
	if done, busy := c.FinishMiss(&m, p, true); !done || busy {
		t.Fatalf("FinishMiss = %v, %v; want done", done, busy)
	}
	checkBytes(t, "the miss's bytes", p, data[64<<10:128<<10])
	checkBytes(t, "a read that waited for the miss", <-got, data[64<<10:128<<10])
	if b.reads != reads {
		t.Fatalf("the read that waited for the miss read Backing %d times", b.reads-reads)
	}
	if f := folioOf(c, 1, 64<<10); f == nil || f.order != 4 {
		t.Fatal("no 64 KiB folio made of the miss's block")
	}
	// Not a whole folio's worth: a read ending before the folio would.
	if _, ok := c.BeginMiss(c.File(1), 128<<10, 8<<10+512, &m2); ok {
		t.Fatal("BeginMiss of a read that ends inside a block of the folio began")
	}
}

// TestMissAfterAChangeIsNotCached: a write or a truncate of the range
// while its miss is read, or the file's Forget, makes FinishMiss refuse
// (the caller reads again) and leave the cache as the change left it:
// the miss's bytes, older than the change, are never cached.
func TestMissAfterAChangeIsNotCached(t *testing.T) {
	for _, change := range []string{"write", "truncate", "forget"} {
		t.Run(change, func(t *testing.T) {
			c := newTestCache(t, Config{Bytes: 4 << 20, MaxOrder: 9, BlockSize: 4096})
			b := newMemBacking()
			old := fill(64<<10, 1)
			b.store(1, 0, old)
			free := c.buddy.free64()
			var m Miss
			if !beginMiss(t, c, &m, 1, 0, 64<<10, b) {
				t.Fatal("BeginMiss refused")
			}
			fresh := fill(4096, 9)
			switch change {
			case "write":
				mustWrite(t, c, 1, 8192, fresh, b)
			case "truncate":
				c.Truncate(1, 8192)
			case "forget":
				c.Forget(1)
			}
			p := make([]byte, 64<<10)
			if done, busy := c.FinishMiss(&m, p, true); done || busy {
				t.Fatalf("FinishMiss after a %s = %v, %v; want neither", change, done, busy)
			}
			if !bytes.Equal(p, make([]byte, len(p))) {
				t.Fatal("FinishMiss that refused wrote into p")
			}
			if change == "write" {
				checkBytes(t, "the written block", mustRead(t, c, 1, 8192, 4096, b), fresh)
			}
			if change != "forget" {
				if f := folioOf(c, 1, 0); f != nil && f.order == 4 {
					t.Fatal("the miss's block became the folio after a change")
				}
			}
			// Its block went back: the arena holds nothing else.
			if change == "forget" && c.buddy.free64() != free {
				t.Fatal("the miss's block was not given back")
			}
		})
	}
}

// TestFinishMissNeverWaitsUnlessAsked: FinishMiss with wait false does
// not wait for the file's lock: it reports busy and keeps the miss, and
// one with wait true then ends it.
func TestFinishMissNeverWaitsUnlessAsked(t *testing.T) {
	c := newTestCache(t, Config{Bytes: 4 << 20, MaxOrder: 9, BlockSize: 4096})
	b := newMemBacking()
	data := fill(64<<10, 5)
	b.store(1, 0, data)
	var m Miss
	if !beginMiss(t, c, &m, 1, 0, 64<<10, b) {
		t.Fatal("BeginMiss refused")
	}
	fs := c.File(1).fs
	fs.mu.RLock()
	p := make([]byte, 64<<10)
	if done, busy := c.FinishMiss(&m, p, false); done || !busy {
		t.Fatalf("FinishMiss(wait false) with the file locked = %v, %v; want busy", done, busy)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if done, busy := c.FinishMiss(&m, p, true); !done || busy {
			t.Errorf("FinishMiss(wait true) = %v, %v; want done", done, busy)
		}
	})
	time.Sleep(10 * time.Millisecond)
	fs.mu.RUnlock()
	wg.Wait()
	checkBytes(t, "the miss's bytes", p, data)
}
