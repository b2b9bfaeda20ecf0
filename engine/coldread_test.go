package engine

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"sync"
	"testing"
	"time"
)

// readDone is a ReadDone that sends what it was told on a channel.
type readDone struct{ ch chan readEnd }

type readEnd struct {
	n     int
	err   error
	again bool
}

func (d readDone) ReadDone(n int, err error, again bool) { d.ch <- readEnd{n, err, again} }

// startReads begins a batch of reads of h under one plug (as the
// daemon's reader does) and returns how many began.
func startReads(e *Engine, h *File, bufs [][]byte, offs []int64, d readDone) int {
	e.PlugReads()
	defer e.UnplugReads()
	began := 0
	for i, p := range bufs {
		if h.StartRead(p, offs[i], d) {
			began++
		}
	}
	return began
}

// startAll begins every read of h as startReads does and fails the test
// unless each begins within 10 s. StartRead only tries the cache's lock
// of the file, so a read can fail to begin while the reaper finishes an
// earlier one under that lock (the ring's batch may be entered before
// the plug ends: another user's Flush enters everything prepared):
// such a read is begun again, alone, until it begins.
func startAll(t *testing.T, e *Engine, h *File, bufs [][]byte, offs []int64, d readDone) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	e.PlugReads()
	for i, p := range bufs {
		for !h.StartRead(p, offs[i], d) {
			if time.Now().After(deadline) {
				e.UnplugReads()
				t.Fatalf("the cold read at %d (%d of %d) did not begin in 10 s", offs[i], i+1, len(bufs))
			}
			// Enter what is prepared, so that what holds the lock can end.
			e.UnplugReads()
			time.Sleep(time.Millisecond)
			e.PlugReads()
		}
	}
	e.UnplugReads()
}

// coldReads reads the block of bs bytes at n*bs of h, which makes the
// file's cache state, and returns n buffers of bs bytes and the offsets
// of the first n such blocks, not in order (nothing sequential).
func coldReads(t *testing.T, h *File, n, bs int) ([][]byte, []int64) {
	t.Helper()
	if _, err := h.ReadAt(make([]byte, bs), int64(n*bs)); err != nil {
		t.Fatal(err)
	}
	bufs, offs := make([][]byte, n), make([]int64, n)
	for i := range bufs {
		bufs[i], offs[i] = make([]byte, bs), int64((i*3+1)%n*bs)
	}
	return bufs, offs
}

// TestStartReadReadsColdFolios: reads begun with StartRead of a file the
// cache does not hold each end once, with the file's bytes, and end up
// in the cache (read again, they are hits: ReadCached serves them).
func TestStartReadReadsColdFolios(t *testing.T) {
	const bs, n = 64 << 10, 8
	// No readahead: with an earlier read ended before a later one begins
	// (the batch entered early), readahead may read the later one's folio.
	cfg := smallConfig()
	cfg.ReadaheadMax = -1
	e, h, data := coldFile(t, cfg, (n+1)*bs)
	bufs, offs := coldReads(t, h, n, bs)
	d := readDone{make(chan readEnd, n)}
	startAll(t, e, h, bufs, offs, d)
	for range n {
		select {
		case r := <-d.ch:
			if r.n != bs || r.err != nil || r.again {
				t.Fatalf("a read ended with %+v", r)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a read StartRead began never ended")
		}
	}
	for i, p := range bufs {
		if !bytes.Equal(p, data[offs[i]:offs[i]+bs]) {
			t.Fatalf("read at %d: bytes differ from the file's", offs[i])
		}
		if !h.ReadCached(make([]byte, bs), offs[i]) {
			t.Fatalf("read at %d: not in the cache after it", offs[i])
		}
	}
	// A read the cache holds is not begun.
	if h.StartRead(make([]byte, bs), offs[0], d) {
		t.Fatal("StartRead began a read of a cached folio")
	}
}

// TestStartReadRacingRemoveTruncateOverwrite: reads begun with StartRead
// race a removal of the file, a shrink, or an overwrite written back;
// every one ends (none waits on the change, and the change does not
// wait on them for ever), and a read that ends with bytes has the file's
// bytes of before or after the change, never a mix the cache keeps: once
// the change is done, the file reads as it says.
func TestStartReadRacingRemoveTruncateOverwrite(t *testing.T) {
	const bs, n = 64 << 10, 16
	for _, change := range []string{"remove", "truncate", "overwrite"} {
		t.Run(change, func(t *testing.T) {
			for iter := range 6 {
				e, h, data := coldFile(t, smallConfig(), (n+1)*bs)
				if _, err := h.ReadAt(make([]byte, bs), n*bs); err != nil {
					t.Fatal(err)
				}
				bufs, offs := make([][]byte, n), make([]int64, n)
				for i := range bufs {
					bufs[i], offs[i] = make([]byte, bs), int64(i)*bs
				}
				fresh := bytes.Repeat([]byte{0xee}, n*bs)
				d := readDone{make(chan readEnd, n)}
				var wg sync.WaitGroup
				wg.Go(func() {
					time.Sleep(time.Duration(iter*50) * time.Microsecond)
					var err error
					switch change {
					case "remove":
						err = e.Remove("a")
					case "truncate":
						err = h.Truncate(bs)
					case "overwrite":
						if _, err = h.WriteAt(fresh, 0); err == nil {
							err = h.Sync()
						}
					}
					if err != nil {
						t.Error(err)
					}
				})
				began := startReads(e, h, bufs, offs, d)
				again := 0
				for range began {
					select {
					case r := <-d.ch:
						if r.err != nil && !errors.Is(r.err, fs.ErrNotExist) {
							t.Errorf("a read ended with %v", r.err)
						}
						if r.again {
							again++
						}
					case <-time.After(20 * time.Second):
						t.Fatalf("a read StartRead began never ended (%s)", change)
					}
				}
				wg.Wait()
				if iter == 0 {
					t.Logf("%d of %d reads began, %d of them to be read again", began, n, again)
				}
				switch change {
				case "remove":
					// The handle still reads the file it opened (see
					// Remove): its bytes.
					got := make([]byte, n*bs)
					if _, err := h.ReadAt(got, 0); err != nil && !errors.Is(err, fs.ErrNotExist) {
						t.Fatal(err)
					} else if err == nil && !bytes.Equal(got, data[:n*bs]) {
						t.Fatalf("iteration %d: the removed file's handle reads other bytes", iter)
					}
				case "truncate":
					if err := h.Truncate((n + 1) * bs); err != nil {
						t.Fatal(err)
					}
					got := make([]byte, (n+1)*bs)
					if _, err := h.ReadAt(got, 0); err != nil && !errors.Is(err, io.EOF) {
						t.Fatal(err)
					}
					if !bytes.Equal(got[:bs], data[:bs]) || !bytes.Equal(got[bs:], make([]byte, n*bs)) {
						t.Fatalf("iteration %d: after a shrink to %d and a grow back, the file does not read as its first %d bytes and zeros", iter, bs, bs)
					}
				case "overwrite":
					got := make([]byte, n*bs)
					if _, err := h.ReadAt(got, 0); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, fresh) {
						t.Fatalf("iteration %d: the overwritten file reads old bytes", iter)
					}
				}
				if err := e.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestStartReadDoesNotAllocate: a cold read begun with StartRead and
// ended on the reaper allocates nothing (its state lives in the read
// scratch it holds), as the cached read path does not.
func TestStartReadDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	const bs, n = 64 << 10, 8
	cfg := smallConfig()
	cfg.ReadaheadMax = -1
	e, h, _ := coldFile(t, cfg, (n+1)*bs)
	bufs, offs := coldReads(t, h, n, bs)
	d := readDone{make(chan readEnd, n)}
	run := func() {
		e.cache.EvictClean(1 << 30)
		startAll(t, e, h, bufs, offs, d)
		for range n {
			if r := <-d.ch; r.n != bs || r.err != nil || r.again {
				t.Fatalf("a read ended with %+v", r)
			}
		}
	}
	for range 5 {
		run()
	}
	if a := testing.AllocsPerRun(50, run); a >= 1 {
		t.Fatalf("%.1f allocations per batch of %d cold reads, want none", a, n)
	}
}
