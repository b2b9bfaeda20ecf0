package cache

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/zonefold/zonefold/uring"
)

// TestRegionsAreFixedBuffers: the arena registers with a ring, and
// writeback extents go out with WriteFixed through their BufIndex — the
// path the engine's writeback takes.
func TestRegionsAreFixedBuffers(t *testing.T) {
	ring, err := uring.New(uring.Options{Entries: 8})
	if err != nil {
		t.Skipf("no io_uring here: %v", err)
	}
	defer ring.Close()
	c := newTestCache(t, Config{Bytes: 4 << 20, MaxOrder: 9})
	if err := ring.RegisterBuffers(c.Regions()); err != nil {
		t.Fatal(err)
	}
	defer ring.UnregisterBuffers()
	f, err := os.Create(filepath.Join(t.TempDir(), "data"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data := fill(300<<10, 5)
	mustWrite(t, c, 1, 0, data, nil)
	exts := c.BeginWriteback(1, 0, nil)
	var g uring.Group
	g.Add(len(exts))
	for _, e := range exts {
		if err := ring.WriteFixed(uring.FD(int(f.Fd())), e.Data, uint64(e.Off), e.BufIndex, &g); err != nil {
			t.Fatal(err)
		}
	}
	n, err := ring.WaitGroup(&g, "write")
	c.EndWriteback(exts, err)
	if err != nil || n != int64(len(data)) {
		t.Fatalf("fixed writes: %d bytes, %v", n, err)
	}
	got, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("file differs from what was written back")
	}
	if c.DirtyBytes() != 0 {
		t.Errorf("dirty after writeback: %d", c.DirtyBytes())
	}
}
