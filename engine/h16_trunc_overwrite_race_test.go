package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"
)

// TestH16ReadRacingShrinkNeverReturnsOverwrittenBytes: a block written
// (A) and fsynced, then overwritten (B, acknowledged, dirty in the
// cache), then read by one handle while another shrinks the file to 0.
// The read began after B was acknowledged, so it may return B (before
// the shrink) or nothing (after it), never A: A was replaced before the
// read or the shrink began. Truncate drops the cache's dirty B
// (cache.Truncate) before it cuts the extent map; a reader that took the
// old size misses in the cache in between and reads A back from the
// device.
func TestH16ReadRacingShrinkNeverReturnsOverwrittenBytes(t *testing.T) {
	devName := emuDevice(t, 32, "4M", "")
	e := formatOpen(t, devName, Config{CacheBytes: 32 << 20, DirtyLimit: 8 << 20})
	defer e.Close()
	const size = 256 << 10
	// The first half: 0x11, synced and evicted (a cold read's miss, read
	// from the device without the cache's file lock). The second half:
	// 0xaa synced, then overwritten with 0xbb (dirty in the cache).
	a := append(bytes.Repeat([]byte{0x11}, size), bytes.Repeat([]byte{0xaa}, size)...)
	b := bytes.Repeat([]byte{0xbb}, size)
	deadline := time.Now().Add(15 * time.Second)
	for iter := 0; time.Now().Before(deadline); iter++ {
		f := mustCreate(t, e, fmt.Sprintf("f%d", iter))
		if _, err := f.WriteAt(a, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		e.cache.EvictClean(1 << 40)
		if _, err := f.WriteAt(b, size); err != nil { // acknowledged, dirty
			t.Fatal(err)
		}
		r, err := e.OpenFile(f.Name(), 0)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 2*size)
		var n int
		var rerr error
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Go(func() {
			<-start
			n, rerr = r.ReadAt(got, 0)
		})
		close(start)
		time.Sleep(time.Duration(iter%40) * 10 * time.Microsecond)
		if err := f.Truncate(0); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			t.Fatal(rerr)
		}
		if i := bytes.IndexByte(got[:n], 0xaa); i >= 0 {
			t.Fatalf("iteration %d: a read that began after 0xbb overwrote the file (acknowledged) and raced a Truncate(0) returned %d bytes, byte %d = 0xaa: the overwritten bytes, never the file's content during the read", iter, n, i)
		}
		r.Close()
		f.Close()
		if err := e.Remove(f.Name()); err != nil {
			t.Fatal(err)
		}
	}
}
