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
