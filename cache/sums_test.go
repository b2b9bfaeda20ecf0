package cache

import (
	"context"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// castagnoli is the reference the cache's sums are checked against.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// TestExtentSums checks that every page sum writeback is handed is the
// CRC32C of that page's bytes as they go out, over random whole-page and
// partial writes, fills from Backing and truncates, rewriting pages
// already summed; and that whole-page writes do get sums.
func TestExtentSums(t *testing.T) {
	ctx := context.Background()
	b := newMemBacking()
	b.files[1] = fill(4<<20, 9)
	c := newTestCache(t, Config{Bytes: 16 << 20, MaxOrder: 9})
	rng := rand.New(rand.NewPCG(5, 6))
	summed := 0
	for round := range 300 {
		switch op := rng.IntN(10); {
		case op < 5: // whole pages, any order
			off := int64(rng.IntN(1024)) * pageSize
			n := pageSize << rng.IntN(5)
			if _, err := c.Write(ctx, 1, off, fill(n, byte(round)), b); err != nil {
				t.Fatal(err)
			}
		case op < 9: // a part of a page, or straddling pages
			off := int64(rng.IntN(4 << 20))
			n := 1 + rng.IntN(3*pageSize)
			if _, err := c.Write(ctx, 1, off, fill(n, byte(round)), b); err != nil {
				t.Fatal(err)
			}
		default:
			c.Truncate(1, int64(rng.IntN(5<<20)))
		}
		if rng.IntN(8) != 0 {
			continue
		}
		exts := c.BeginWriteback(1, 0, nil)
		for _, e := range exts {
			if e.Sums == nil {
				continue
			}
			if len(e.Sums)*pageSize != len(e.Data) {
				t.Fatalf("round %d: extent of %d bytes with %d sums", round, len(e.Data), len(e.Sums))
			}
			for i, s := range e.Sums {
				if want := crc32.Checksum(e.Data[i*pageSize:(i+1)*pageSize], castagnoli); s != want {
					t.Fatalf("round %d: page %d of extent at %d: sum %#x, bytes sum to %#x", round, i, e.Off, s, want)
				}
				summed++
			}
		}
		c.EndWriteback(exts, nil)
	}
	if summed == 0 {
		t.Fatal("no extent carried sums")
	}
}

// TestExtentSumsTruncate: a truncate that zeroes the rest of a summed,
// dirty page must not leave that page's old sum.
func TestExtentSumsTruncate(t *testing.T) {
	c := newTestCache(t, Config{Bytes: 4 << 20, MaxOrder: 9})
	mustWrite(t, c, 1, 0, fill(4*pageSize, 1), nil)
	c.Truncate(1, 2*pageSize+100)
	for _, e := range c.BeginWriteback(1, 0, nil) {
		for i, s := range e.Sums {
			if want := crc32.Checksum(e.Data[i*pageSize:(i+1)*pageSize], castagnoli); s != want {
				t.Fatalf("page %d of extent at %d: sum %#x, bytes sum to %#x", i, e.Off, s, want)
			}
		}
	}
}

// TestExtentSumsSmallBlocks: with blocks smaller than a page, no sums.
func TestExtentSumsSmallBlocks(t *testing.T) {
	c := newTestCache(t, Config{Bytes: 4 << 20, MaxOrder: 9, BlockSize: 1024})
	mustWrite(t, c, 1, 0, fill(64<<10, 1), nil)
	for _, e := range c.BeginWriteback(1, 0, nil) {
		if e.Sums != nil {
			t.Fatalf("extent at %d has sums with 1 KiB blocks", e.Off)
		}
	}
}
