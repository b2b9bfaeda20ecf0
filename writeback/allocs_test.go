package writeback

import (
	"context"
	"runtime"
	"testing"

	"github.com/zonefold/zonefold/cache"
)

// doneStore completes every append as it is submitted.
type doneStore struct{}

func (doneStore) WriteExtents(_ uint64, _ []cache.Extent, p Pending) error {
	p.Add(1)
	p.Done(nil)
	return nil
}

// TestFlushRoundDoesNotAllocate: once the cache holds a file's folios, a
// round of dirtying scattered 8 KiB blocks of several files and writing
// them back allocates nothing, even with a garbage collection in the
// round (the daemon collects every few hundred MiB written: a pool that
// the collector empties made every flush regrow its extent list).
func TestFlushRoundDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	w, c := newTestWriteback(t, doneStore{}, Config{MaxChain: 256 << 10})
	ctx := context.Background()
	buf := make([]byte, 8<<10)
	const files = 4
	round := func() {
		for file := uint64(1); file <= files; file++ {
			for off := int64(0); off < 1<<20; off += 16 << 10 { // every other 8 KiB
				if _, err := c.Write(ctx, c.File(file), off, buf, nil); err != nil {
					t.Fatal(err)
				}
			}
		}
		runtime.GC()
		for file := uint64(1); file <= files; file++ {
			if err := w.FlushFile(ctx, file); err != nil {
				t.Fatal(err)
			}
		}
	}
	round() // the folios, and the flushes' lists at their size
	if n := testing.AllocsPerRun(10, round); n != 0 {
		t.Errorf("a writeback round allocated %v times, want 0", n)
	}
}
