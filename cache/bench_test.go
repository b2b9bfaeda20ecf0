package cache

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkSeqWrite streams 128 KiB writes through the cache with the
// data written back (to nowhere) and evicted as it goes, at max order 9
// and 0: the cache's side of `zonefold bench folios`.
func BenchmarkSeqWrite(b *testing.B) {
	for _, order := range []int{MaxOrder, 0} {
		b.Run(fmt.Sprintf("order%d", order), func(b *testing.B) {
			c, err := New(Config{Bytes: 64 << 20, MaxOrder: order, DirtyLimit: 16 << 20})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			buf := make([]byte, 128<<10)
			exts := make([]Extent, 0, 1024)
			var pos int64
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Write(context.Background(), c.File(1), pos, buf, nil); err != nil {
					b.Fatal(err)
				}
				pos += int64(len(buf))
				if c.DirtyBytes() >= 8<<20 {
					exts = c.BeginWriteback(1, 0, exts[:0])
					c.EndWriteback(exts, nil)
				}
			}
		})
	}
}

// BenchmarkOverwrite1K overwrites a 4 MiB file 1 KiB at a time with one
// and two state critical sections.
func BenchmarkOverwrite1K(b *testing.B) {
	for _, split := range []bool{false, true} {
		b.Run(fmt.Sprintf("split=%v", split), func(b *testing.B) {
			c, err := New(Config{Bytes: 16 << 20, MaxOrder: MaxOrder, BlockSize: 1024})
			if err != nil {
				b.Fatal(err)
			}
			c.splitStateLock = split
			defer c.Close()
			ctx := context.Background()
			if _, err := c.Write(ctx, c.File(1), 0, make([]byte, 4<<20), nil); err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, 1024)
			var pos int64
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				c.Write(ctx, c.File(1), pos, buf, nil)
				pos = (pos + 1024) % (4 << 20)
			}
		})
	}
}

// zeroBacking stands for a device read: it writes p (zeros), as the
// kernel's copy or a DMA and then the engine's checksum pass leave the
// block in the CPU's cache.
type zeroBacking struct{}

func (zeroBacking) ReadBacking(_ uint64, _ int64, p []byte) error {
	clear(p)
	return nil
}

// BenchmarkColdRead reads a file the cache does not hold, 64 KiB (max
// order 4, the folio a 64 KiB read makes) or 4 KiB at a time, evicting as
// it goes: the cache's CPU per cold read continuation (the miss taken,
// read without the lock, put into the cache and copied out), as fio
// random reads through the daemon see it.
func BenchmarkColdRead(b *testing.B) {
	for _, size := range []int{64 << 10, 4 << 10} {
		b.Run(fmt.Sprintf("%dk", size>>10), func(b *testing.B) {
			c, err := New(Config{Bytes: 32 << 20, MaxOrder: 4})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			f := c.File(1)
			buf := make([]byte, size)
			var pos int64
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Read(ctx, f, pos, buf, zeroBacking{}); err != nil {
					b.Fatal(err)
				}
				pos = (pos + int64(size)) % (1 << 40)
			}
			if s := c.Stats(); s.Hits != 0 {
				b.Fatalf("%d hits: the benchmark read cached data", s.Hits)
			}
		})
	}
}
