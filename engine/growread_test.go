package engine

import (
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
)

// TestReadRacingAnAppendSeesOnlyWrittenBytes: a file one handle appends
// to, read through others within the size they see (Size, Fstat), reads
// back the bytes written, never zeros: an appending write's piece sets
// the size before its data is in the cache (so records that carry the
// data carry a size covering it), and a read used to take that size and
// read the not-yet-copied bytes as a hole. Linux moves i_size past a
// write's bytes once they are in the page cache. (pebblefs's
// TestH25DConcurrentReadersOfAGrowingFile found it through Pebble's
// vfs; this is the engine's own, also what daemon clients reach.)
func TestReadRacingAnAppendSeesOnlyWrittenBytes(t *testing.T) {
	e := formatOpen(t, memDevice(t, 32, "1M"), Config{CacheBytes: 8 << 20})
	defer e.Close()
	pattern := func(off int64) byte { return byte(off*7+off>>12) | 1 } // never zero
	w, err := e.Create("grow")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	const total = 3 << 19
	done := make(chan struct{})
	errc := make(chan error, 4)
	var wg sync.WaitGroup
	for i := range 3 {
		r, err := e.Open("grow")
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer r.Close()
			rng := rand.New(rand.NewPCG(uint64(i), 25))
			buf := make([]byte, 64<<10)
			for {
				select {
				case <-done:
					return
				default:
				}
				size := r.Size()
				if i == 1 {
					fi, err := r.Fstat()
					if err != nil {
						errc <- err
						return
					}
					size = fi.Size
				}
				if size == 0 {
					continue
				}
				// The last bytes within the size, where an append races.
				off := max(0, size-int64(1+rng.IntN(len(buf))))
				n, err := r.ReadAt(buf[:size-off], off)
				if err != nil && err != io.EOF {
					errc <- err
					return
				}
				for j := range n {
					if want := pattern(off + int64(j)); buf[j] != want {
						errc <- fmt.Errorf("reader %d: byte %d of %d reads %#x, written %#x", i, off+int64(j), size, buf[j], want)
						return
					}
				}
			}
		})
	}
	rng := rand.New(rand.NewPCG(7, 25))
	var off int64
	for off < total {
		piece := make([]byte, 1+rng.IntN(48<<10))
		for j := range piece {
			piece[j] = pattern(off + int64(j))
		}
		if _, err := w.WriteAt(piece, off); err != nil {
			t.Fatal(err)
		}
		off += int64(len(piece))
		if rng.IntN(16) == 0 {
			if err := w.Sync(); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case err := <-errc:
			close(done)
			wg.Wait()
			t.Fatal(err)
		default:
		}
	}
	close(done)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
}
