package cache

import (
	"context"
	"testing"
)

// TestHotPathDoesNotAllocate: writes and reads of cached data, and the
// steady state of a sequential writer whose old folios are written back
// and evicted to make room, allocate nothing per call.
func TestHotPathDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	ctx := context.Background()
	c := newTestCache(t, Config{Bytes: 8 << 20, MaxOrder: 9, BlockSize: 1024})
	small := make([]byte, 1024)
	big := make([]byte, 128<<10)
	mustWrite(t, c, 1, 0, make([]byte, 1<<20), nil)
	var off int64
	cases := []struct {
		name string
		fn   func()
	}{
		{"1K overwrite", func() {
			c.Write(ctx, c.File(1), off, small, nil)
			off = (off + 1024) % (1 << 20)
		}},
		{"128K overwrite", func() {
			c.Write(ctx, c.File(1), off&^(128<<10-1), big, nil)
			off = (off + 128<<10) % (1 << 20)
		}},
		{"read hit", func() {
			c.Read(ctx, c.File(1), off, big[:4000], nil)
			off = (off + 4000) % (1<<20 - 4000)
		}},
	}
	for _, tc := range cases {
		if n := testing.AllocsPerRun(1000, tc.fn); n != 0 {
			t.Errorf("%s: %v allocations per call", tc.name, n)
		}
	}

	// A stream of new data: each write makes a folio, and writing back
	// and evicting old ones makes room. Reusing the chunk structures and
	// the extent slice, nothing allocates in the steady state.
	exts := make([]Extent, 0, 64)
	pos := int64(0)
	stream := func() {
		c.Write(ctx, c.File(2), pos, big, nil)
		pos += int64(len(big))
		if c.DirtyBytes() >= 1<<20 {
			exts = c.BeginWriteback(2, 0, exts[:0])
			c.EndWriteback(exts, nil)
		}
	}
	for range 200 { // fill the arena: from here on, every folio evicts one
		stream()
	}
	if n := testing.AllocsPerRun(2000, stream); n > 0.01 {
		t.Errorf("sequential 128K stream: %v allocations per write", n)
	}
	if c.Stats().Evictions == 0 {
		t.Error("the stream evicted nothing: the test measured no steady state")
	}
}
