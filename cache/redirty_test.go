package cache

import "testing"

// TestRedirtyWritesCachedCleanBlocksAgain: Redirty makes the clean
// blocks the cache holds in its range dirty, so writeback hands them out
// again with the bytes they hold; blocks it does not hold stay out of
// the cache, and blocks dirty already are counted once.
func TestRedirtyWritesCachedCleanBlocksAgain(t *testing.T) {
	c := newTestCache(t, Config{Bytes: 4 << 20, MaxOrder: 5, BlockSize: 4096})
	b := newMemBacking()
	data := fill(64<<10, 3)
	mustWrite(t, c, 1, 0, data, b)
	b.flush(c) // clean now
	if d := c.DirtyBytes(); d != 0 {
		t.Fatalf("after writeback: %d bytes dirty", d)
	}
	mustWrite(t, c, 1, 8192, fill(4096, 9), b) // one block dirty already
	copy(data[8192:], fill(4096, 9))
	if got := c.Redirty(1, 4096, 16384); got != 2*4096 {
		t.Fatalf("Redirty of 3 blocks, one dirty already: %d bytes made dirty, want %d", got, 2*4096)
	}
	if d := c.DirtyBytes(); d != 3*4096 {
		t.Fatalf("dirty bytes after Redirty: %d, want %d", d, 3*4096)
	}
	if _, dirty := blockState(c, 1, 0); dirty {
		t.Fatal("a block before the range is dirty")
	}
	if got := c.Redirty(1, 1<<20, 2<<20); got != 0 || folioOf(c, 1, 1<<20) != nil {
		t.Fatalf("Redirty of blocks not cached: %d bytes, folio made %v", got, folioOf(c, 1, 1<<20) != nil)
	}
	if got := c.Redirty(2, 0, 4096); got != 0 || c.file(2) != nil {
		t.Fatalf("Redirty of a file not cached: %d bytes, state made %v", got, c.file(2) != nil)
	}
	b.files[1] = make([]byte, len(data)) // the backing copy is gone
	b.flush(c)
	checkBytes(t, "backing after writeback of the redirtied blocks", b.files[1][4096:16384], data[4096:16384])
}
