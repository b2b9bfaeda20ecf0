package cache

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
)

// failBacking refuses every read: a read through it succeeds only with
// what the cache holds uptodate.
type failBacking struct{}

var errFailBacking = errors.New("fail backing: the cache was asked for bytes it should hold")

func (failBacking) ReadBacking(uint64, int64, []byte) error { return errFailBacking }

// TestWholeFolioMissRacingChanges: a miss that covers a whole folio-to-be
// is read without the file lock into an arena block that becomes the
// folio (no copy) if nothing changed meanwhile. A write, truncate,
// eviction, another read of the run or Forget while that read is
// outstanding must leave the racing read with bytes that are each
// block's old or new contents (never arena garbage), the cache holding
// exactly the file's current bytes, and no arena block leaked.
func TestWholeFolioMissRacingChanges(t *testing.T) {
	const size = 64 << 10 // one order-4 folio
	old := fill(size, 'o')
	newer := fill(size, 'N')
	// pending: a change's own reads, each one's error, awaited once
	// the held read is let go.
	var pending chan error
	for _, tc := range []struct {
		name string
		// change runs while the read's Backing call is held; it returns
		// the file's bytes [0, size) afterwards.
		change func(t *testing.T, c *Cache, g *gateBacking) []byte
		// forgotten: the read ends with ErrForgotten.
		forgotten bool
	}{
		{"nothing", func(t *testing.T, c *Cache, g *gateBacking) []byte {
			return old
		}, false},
		{"write of one block inside", func(t *testing.T, c *Cache, g *gateBacking) []byte {
			mustWrite(t, c, 1, 16<<10, newer[16<<10:20<<10], g)
			want := bytes.Clone(old)
			copy(want[16<<10:], newer[16<<10:20<<10])
			return want
		}, false},
		{"write of the whole folio", func(t *testing.T, c *Cache, g *gateBacking) []byte {
			mustWrite(t, c, 1, 0, newer, g)
			return newer
		}, false},
		{"truncate inside", func(t *testing.T, c *Cache, g *gateBacking) []byte {
			g.truncate(1, 20<<10)
			c.Truncate(1, 20<<10)
			want := bytes.Clone(old)
			clear(want[20<<10:])
			return want
		}, false},
		{"write, write back, evict", func(t *testing.T, c *Cache, g *gateBacking) []byte {
			mustWrite(t, c, 1, 8<<10, newer[8<<10:40<<10], g)
			g.flush(c)
			c.EvictClean(1 << 20)
			want := bytes.Clone(old)
			copy(want[8<<10:], newer[8<<10:40<<10])
			return want
		}, false},
		{"reads of the run and of a part of it", func(t *testing.T, c *Cache, g *gateBacking) []byte {
			// Both wait for the outstanding read (no second Backing
			// read of the run) and get its bytes.
			errs := make(chan error, 2)
			pending = errs
			for _, r := range [][2]int64{{0, size}, {20 << 10, 8 << 10}} {
				go func() {
					p := make([]byte, r[1])
					_, err := c.Read(context.Background(), c.File(1), r[0], p, g)
					if err == nil && !bytes.Equal(p, old[r[0]:r[0]+r[1]]) {
						err = errors.New("a read waiting for the fill got other bytes")
					}
					errs <- err
				}()
			}
			select {
			case <-g.started:
				t.Error("a read of a run being read went to Backing itself")
			case <-time.After(50 * time.Millisecond):
			}
			return old
		}, false},
		{"forget", func(t *testing.T, c *Cache, g *gateBacking) []byte {
			c.Forget(1)
			return nil
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pending = nil
			c := newTestCache(t, Config{Bytes: 1 << 20, MaxOrder: 4, BlockSize: 4096})
			g := newGateBacking()
			g.store(1, 0, old)
			done := make(chan error, 1)
			got := make([]byte, size)
			go func() {
				_, err := c.Read(context.Background(), c.File(1), 0, got, g)
				done <- err
			}()
			<-g.started // the read has the old bytes, unlocked
			changed := make(chan []byte, 1)
			go func() { changed <- tc.change(t, c, g) }()
			var want []byte
			select {
			case want = <-changed:
			case <-time.After(20 * time.Second): // the read is held until released: a change that waits for it never returns
				t.Fatal("the change waited for the outstanding read")
			}
			// Reads under the lock from here on (and the Backing reads
			// of writes) pass the gate without waiting.
			close(g.release)
			go func() {
				for range g.started {
				}
			}()
			defer close(g.started)
			err := <-done
			if pending != nil {
				for range cap(pending) {
					if err := <-pending; err != nil {
						t.Error(err)
					}
				}
			}
			if tc.forgotten {
				if !errors.Is(err, ErrForgotten) {
					t.Fatalf("read of a forgotten file: %v; want ErrForgotten", err)
				}
				if b := c.Stats().CachedBytes; b != 0 {
					t.Fatalf("%d bytes of the arena held after Forget; want 0 (scratch leaked)", b)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// The racing read: each block old or current, never poison.
			for b := 0; b < size; b += 4096 {
				blk := got[b : b+4096]
				if !bytes.Equal(blk, old[b:b+4096]) && !bytes.Equal(blk, want[b:b+4096]) {
					t.Fatalf("the racing read's block at %d is neither the old nor the new bytes (%#x...)", b, blk[:4])
				}
			}
			// The cache holds the current bytes: a read that may not
			// go to Backing returns them.
			if _, err := c.Read(context.Background(), c.File(1), 0, got, failBacking{}); err != nil {
				t.Fatalf("after the race the cache does not hold the range: %v", err)
			}
			checkBytes(t, "cached bytes after the race", got, want)
			// Nothing but the range's folios holds arena memory.
			g.flush(c)
			if b, n := c.Stats().CachedBytes, c.EvictClean(1<<20); b != n || c.Stats().CachedBytes != 0 {
				t.Fatalf("%d bytes cached, %d evictable: a scratch block leaked", b, n)
			}
		})
	}
}

// TestWholeFolioMissMakesOneFolio: a cold read of whole folios leaves
// exactly those folios cached, holding the stored bytes, with no arena
// block left over; a miss read straight into the folio-to-be and one
// read into scratch and copied must not differ in what they leave.
func TestWholeFolioMissMakesOneFolio(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxOrder int
		off, n   int64
	}{
		{"64k", 4, 0, 64 << 10},
		{"4k", 0, 8 << 10, 4 << 10},
		{"unaligned 64k", 4, 4 << 10, 64 << 10},
		{"unaligned bytes", 4, 100, 64<<10 - 200},
		{"2m", 9, 2 << 20, 2 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCache(t, Config{Bytes: 8 << 20, MaxOrder: tc.maxOrder, BlockSize: 4096})
			b := newMemBacking()
			data := fill(6<<20, 's')
			b.store(1, 0, data)
			checkBytes(t, "cold read", mustRead(t, c, 1, tc.off, int(tc.n), b), data[tc.off:tc.off+tc.n])
			reads := b.reads
			got := make([]byte, tc.n)
			if _, err := c.Read(context.Background(), c.File(1), tc.off, got, failBacking{}); err != nil {
				t.Fatalf("read again: %v", err)
			}
			checkBytes(t, "cached", got, data[tc.off:tc.off+tc.n])
			lo, hi := tc.off&^(pageSize-1), pageUp(tc.off+tc.n)
			if s := c.Stats(); s.CachedBytes != hi-lo {
				t.Fatalf("%d bytes of the arena held after reading %d pages; want %d (%d Backing reads)", s.CachedBytes, (hi-lo)/pageSize, hi-lo, reads)
			}
			// Evicted, the range reads through Backing again: nothing of
			// the first read (a fill it registered) is left to wait for.
			c.EvictClean(16 << 20)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if _, err := c.Read(ctx, c.File(1), tc.off, got, b); err != nil {
				t.Fatalf("read after eviction: %v", err)
			}
			checkBytes(t, "read after eviction", got, data[tc.off:tc.off+tc.n])
		})
	}
}
