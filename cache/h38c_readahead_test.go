package cache

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"testing"
)

// badBlockBacking fails every read that covers the byte at bad.
type badBlockBacking struct {
	*memBacking
	bad int64
}

func (b badBlockBacking) ReadBacking(file uint64, off int64, p []byte) error {
	if off <= b.bad && b.bad < off+int64(len(p)) {
		b.mu.Lock()
		b.reads++
		b.mu.Unlock()
		return syscall.EIO
	}
	return b.memBacking.ReadBacking(file, off, p)
}

// TestReadAheadFillsToFill: a sequential reader's 32 KiB reads through
// ReadAhead with fill at the next 256 KiB boundary cost one Backing read
// per 256 KiB (the first read's miss makes a 256 KiB folio; the next
// seven hit), where Read made a 32 KiB folio, one Backing read, per
// request; and they return the file's bytes. A miss that is not at a
// folio boundary of that size still makes the folio alignment allows,
// and a fill that meets a folio already cached stops short of it.
func TestReadAheadFillsToFill(t *testing.T) {
	const K = 1 << 10
	ctx := context.Background()
	data := fill(1<<20, 5)
	reads := func(t *testing.T, fillTo func(off int64) int64) (int, *Cache, *memBacking) {
		c := newTestCache(t, Config{Bytes: 8 << 20, MaxOrder: 9, BlockSize: 4096})
		b := newMemBacking()
		b.store(1, 0, data)
		p := make([]byte, 32*K)
		for off := int64(0); off < int64(len(data)); off += int64(len(p)) {
			n, err := c.ReadAhead(ctx, c.File(1), off, p, fillTo(off), b)
			if err != nil || n != len(p) {
				t.Fatalf("read at %d: %d, %v", off, n, err)
			}
			if !bytes.Equal(p, data[off:off+int64(n)]) {
				t.Fatalf("read at %d: wrong bytes", off)
			}
		}
		return b.reads, c, b
	}
	t.Run("to the next 256 KiB boundary", func(t *testing.T) {
		n, c, _ := reads(t, func(off int64) int64 { return (off + 32*K + 256*K - 1) &^ (256*K - 1) })
		if n != 4 {
			t.Fatalf("1 MiB in 32 KiB reads: %d Backing reads, want 4 (one per 256 KiB)", n)
		}
		if s := c.Stats(); s.Misses != 4 || s.Hits != 28 {
			t.Fatalf("%d misses, %d hits; want 4 and 28", s.Misses, s.Hits)
		}
	})
	t.Run("no fill is Read", func(t *testing.T) {
		if n, _, _ := reads(t, func(int64) int64 { return 0 }); n != 32 {
			t.Fatalf("1 MiB in 32 KiB reads without fill: %d Backing reads, want 32", n)
		}
	})
	t.Run("alignment and cached folios bound the fill", func(t *testing.T) {
		c := newTestCache(t, Config{Bytes: 8 << 20, MaxOrder: 9, BlockSize: 4096})
		b := newMemBacking()
		b.store(1, 0, data)
		p := make([]byte, 32*K)
		// A folio at 256 KiB (cached), then a miss at 32 KiB that may
		// fill to 512 KiB: 32 KiB is aligned to 32 KiB only.
		if _, err := c.Read(ctx, c.File(1), 256*K, p, b); err != nil {
			t.Fatal(err)
		}
		if _, err := c.ReadAhead(ctx, c.File(1), 32*K, p, 512*K, b); err != nil || !bytes.Equal(p, data[32*K:64*K]) {
			t.Fatalf("read at 32 KiB: %v", err)
		}
		// At 64 KiB, aligned to 64 KiB: a 64 KiB folio.
		if _, err := c.ReadAhead(ctx, c.File(1), 64*K, p, 512*K, b); err != nil || !bytes.Equal(p, data[64*K:96*K]) {
			t.Fatalf("read at 64 KiB: %v", err)
		}
		// At 128 KiB, aligned to 128 KiB, but a folio at 256 KiB: 128 KiB.
		if _, err := c.ReadAhead(ctx, c.File(1), 128*K, p, 512*K, b); err != nil || !bytes.Equal(p, data[128*K:160*K]) {
			t.Fatalf("read at 128 KiB: %v", err)
		}
		s := c.Stats()
		if got, want := s.Folios, [MaxOrder + 1]int64{3: 2, 4: 1, 5: 1}; got != want {
			t.Fatalf("folios by order %v, want %v", got, want)
		}
		if b.reads != 4 {
			t.Fatalf("%d Backing reads, want 4", b.reads)
		}
		// Everything the fills read is the file's.
		for off := int64(0); off < 288*K; off += 32 * K {
			if off == 0 {
				continue
			}
			if !c.TryRead(c.File(1), off, p) || !bytes.Equal(p, data[off:off+32*K]) {
				t.Fatalf("at %d: not cached, or not the file's bytes", off)
			}
		}
	})
	t.Run("a fill that fails past the read is read again without it", func(t *testing.T) {
		c := newTestCache(t, Config{Bytes: 8 << 20, MaxOrder: 9, BlockSize: 4096})
		b := badBlockBacking{newMemBacking(), 200 * K}
		b.store(1, 0, data)
		p := make([]byte, 32*K)
		if _, err := c.ReadAhead(ctx, c.File(1), 0, p, 256*K, b); err != nil || !bytes.Equal(p, data[:32*K]) {
			t.Fatalf("read at 0, fill to 256 KiB over a bad block at 200 KiB: %v", err)
		}
		if b.reads != 2 {
			t.Fatalf("%d Backing reads, want 2 (the fill, then the read alone)", b.reads)
		}
		if _, err := c.ReadAhead(ctx, c.File(1), 192*K, p, 256*K, b); !errors.Is(err, syscall.EIO) {
			t.Fatalf("read of the bad block: %v, want EIO", err)
		}
	})
}
