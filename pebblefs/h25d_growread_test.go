package pebblefs

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestH25DConcurrentReadersOfAGrowingFile: readers on their own handles
// (one of them sequential, with readahead) read a file one writer
// appends to and syncs; every byte any of them reads is the one written
// there, never zeros, as on Linux, where a write that extends a file
// moves i_size past bytes only once they are in the page cache, and
// Stat's size covers only bytes a read returns. Pebble reads a file
// while it is appended to when Checkpoint copies the live WAL
// (vfs.CopyAcrossFS) as the LogWriter writes it: zeros read there put a
// hole in the checkpoint's WAL.
func TestH25DConcurrentReadersOfAGrowingFile(t *testing.T) {
	e := formatOpen(t, emuDevice(t, 32, "1M"), 0, testConfig())
	defer e.Close()
	y := New(e)
	pattern := func(off int64) byte { return byte(off*7 + off>>12 + 1) }
	w, err := y.Create("grow", "pebble-wal")
	if err != nil {
		t.Fatal(err)
	}
	const total = 3 << 19
	var wg sync.WaitGroup
	done := make(chan struct{})
	errc := make(chan error, 8)
	for i := range 4 {
		var opts []vfs.OpenOption
		if i == 0 {
			opts = append(opts, vfs.SequentialReadsOption)
		}
		r, err := y.Open("grow", opts...)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer r.Close()
			rng := rand.New(rand.NewPCG(uint64(i), 25))
			buf := make([]byte, 64<<10)
			var seqOff int64
			for {
				select {
				case <-done:
					return
				default:
				}
				fi, err := r.Stat()
				if err != nil {
					errc <- err
					return
				}
				size := fi.Size()
				var off int64
				if i == 0 {
					off = seqOff // sequential
				} else if size > 0 {
					off = rng.Int64N(size)
				}
				p := buf[:1+rng.IntN(len(buf))]
				n, err := r.ReadAt(p, off)
				if err != nil && !errors.Is(err, io.EOF) {
					errc <- fmt.Errorf("reader %d: ReadAt(%d, %d): %v", i, len(p), off, err)
					return
				}
				if off+int64(n) < size && n < len(p) {
					errc <- fmt.Errorf("reader %d: ReadAt(%d, %d) read %d of a file of %d bytes", i, len(p), off, n, size)
					return
				}
				for j := range n {
					if p[j] != pattern(off+int64(j)) {
						errc <- fmt.Errorf("reader %d: byte %d reads %#x, written %#x", i, off+int64(j), p[j], pattern(off+int64(j)))
						return
					}
				}
				seqOff += int64(n)
			}
		})
	}
	rng := rand.New(rand.NewPCG(25, 25))
	var off int64
	for off < total {
		b := make([]byte, 1+rng.IntN(20000))
		for j := range b {
			b[j] = pattern(off + int64(j))
		}
		if _, err := w.Write(b); err != nil {
			t.Fatal(err)
		}
		off += int64(len(b))
		if rng.IntN(8) == 0 {
			if err := w.Sync(); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(done)
	wg.Wait()
	w.Close()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	if got := readFile(t, y, "grow"); int64(len(got)) != off {
		t.Fatalf("read back %d bytes of %d", len(got), off)
	} else {
		for j := range got {
			if got[j] != pattern(int64(j)) {
				t.Fatalf("byte %d reads %#x", j, got[j])
			}
		}
	}
}
