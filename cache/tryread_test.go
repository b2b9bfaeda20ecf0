package cache

import (
	"bytes"
	"context"
	"testing"
)

// TestTryReadOnlyWholeHitsAndNeverWaits: TryRead (a connection's reader
// serving a read without a worker) copies only a range the cache holds
// whole, and gives up at once, having copied nothing, where Read would
// read through Backing or wait for the file's lock.
func TestTryReadOnlyWholeHitsAndNeverWaits(t *testing.T) {
	c := newTestCache(t, Config{Bytes: 1 << 20, MaxOrder: 2, BlockSize: 4096})
	b := newMemBacking()
	want := bytes.Repeat([]byte{'x'}, 32<<10)
	b.store(1, 0, want)
	f := c.File(1)
	p := make([]byte, 8<<10)
	if c.TryRead(f, 0, p) {
		t.Fatal("TryRead of a range not in the cache read it")
	}
	if !bytes.Equal(p, make([]byte, len(p))) {
		t.Fatal("a TryRead that failed copied bytes")
	}
	if _, err := c.Read(context.Background(), f, 0, p, b); err != nil {
		t.Fatal(err)
	}
	clear(p)
	if !c.TryRead(f, 0, p) || !bytes.Equal(p, want[:len(p)]) {
		t.Fatal("TryRead of a cached range did not read it")
	}
	// Partly cached: the first 8 KiB are, the next 8 KiB are not.
	q := make([]byte, 16<<10)
	if c.TryRead(f, 0, q) {
		t.Fatal("TryRead of a partly cached range read it")
	}
	if !bytes.Equal(q, make([]byte, len(q))) {
		t.Fatal("a TryRead that failed copied bytes")
	}
	// The file's lock held for writing (a fill under the lock, a
	// write): TryRead gives up rather than wait.
	f.fs.mu.Lock()
	ok := c.TryRead(f, 0, p)
	f.fs.mu.Unlock()
	if ok {
		t.Fatal("TryRead read under a held file lock")
	}
	if c.TryRead(File{}, 0, p) || c.TryRead(f, -1, p) || c.TryRead(f, 0, nil) {
		t.Fatal("TryRead of no file, a negative offset or nothing read")
	}
}
