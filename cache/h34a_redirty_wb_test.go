package cache

import (
	"errors"
	"testing"
)

var errAppendFailed = errors.New("test: the append failed")

// TestRedirtyOfBlocksUnderWritebackWritesThemAgain: Redirty of blocks
// under writeback (dirty, taken by BeginWriteback) must make them go out
// again after that writeback, as its doc says. The engine maps an append
// before its flush ends the writeback (writeback.end after the last
// completion), so a zone that goes offline in between has the file's
// extents in it while the blocks are still under writeback: the offline
// watcher's Redirty found them dirty already and left them, and the
// writeback's successful end then made them clean, mapped in the
// offline zone — the cache held the bytes and nothing wrote them again.
func TestRedirtyOfBlocksUnderWritebackWritesThemAgain(t *testing.T) {
	c := newTestCache(t, Config{Bytes: 4 << 20, MaxOrder: 5, BlockSize: 4096})
	b := newMemBacking()
	data := fill(64<<10, 5)
	mustWrite(t, c, 1, 0, data, b)
	exts := c.BeginWriteback(1, 0, nil)
	if len(exts) == 0 {
		t.Fatal("BeginWriteback took nothing")
	}
	for _, e := range exts {
		b.store(1, e.Off, e.Data) // the append lands (in the zone that goes offline)
	}
	// The zone goes offline before the writeback ends.
	if got := c.Redirty(1, 0, 64<<10); got != 64<<10 {
		t.Errorf("Redirty of 64 KiB under writeback: %d bytes to write again, want %d", got, 64<<10)
	}
	c.EndWriteback(exts, nil)
	if d := c.DirtyBytes(); d != 64<<10 {
		t.Fatalf("dirty bytes after the writeback Redirty ran under ended: %d, want %d (the redirty was lost)", d, 64<<10)
	}
	if _, dirty := blockState(c, 1, 32<<10); !dirty {
		t.Fatal("a redirtied block is clean after the writeback it ran under")
	}
	b.files[1] = make([]byte, len(data)) // the device's copy is gone
	b.flush(c)
	checkBytes(t, "backing after writeback of the redirtied blocks", b.files[1], data)
	if d := c.DirtyBytes(); d != 0 {
		t.Fatalf("dirty bytes after the second writeback: %d, want 0", d)
	}
}

// TestRedirtyUnderWritebackThatFailsStaysDirtyOnce: a writeback that
// fails leaves the redirtied blocks dirty, counted once, and its retry
// makes them clean (no third write).
func TestRedirtyUnderWritebackThatFailsStaysDirtyOnce(t *testing.T) {
	c, b, exts := redirtiedUnderWriteback(t, 16<<10)
	c.EndWriteback(exts, errAppendFailed)
	if d := c.DirtyBytes(); d != 16<<10 {
		t.Fatalf("dirty bytes after a failed writeback: %d, want %d", d, 16<<10)
	}
	b.flush(c)
	if d := c.DirtyBytes(); d != 0 {
		t.Fatalf("dirty bytes after the retry: %d, want 0", d)
	}
}

// TestTruncateUnderWritebackDropsARedirty: blocks a truncate cuts while
// they are under writeback and redirtied are not made dirty again by
// the writeback's end: they are gone.
func TestTruncateUnderWritebackDropsARedirty(t *testing.T) {
	c, _, exts := redirtiedUnderWriteback(t, 64<<10)
	c.Truncate(1, 16<<10)
	c.EndWriteback(exts, nil)
	if d := c.DirtyBytes(); d != 16<<10 {
		t.Fatalf("dirty bytes after the writeback: %d, want %d (the blocks before the cut)", d, 16<<10)
	}
	if _, dirty := blockState(c, 1, 32<<10); dirty {
		t.Fatal("a block past the truncate is dirty")
	}
}

// redirtiedUnderWriteback writes n bytes of file 1, takes them for
// writeback and redirties them while they are under it; the caller ends
// the writeback.
func redirtiedUnderWriteback(t *testing.T, n int) (*Cache, *memBacking, []Extent) {
	t.Helper()
	c := newTestCache(t, Config{Bytes: 4 << 20, MaxOrder: 5, BlockSize: 4096})
	b := newMemBacking()
	mustWrite(t, c, 1, 0, fill(n, 7), b)
	exts := c.BeginWriteback(1, 0, nil)
	c.Redirty(1, 0, int64(n))
	return c, b, exts
}
