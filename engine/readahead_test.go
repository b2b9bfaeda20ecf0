package engine

import (
	"bytes"
	"errors"
	"io"
	"sync"
	"testing"
	"time"
)

// TestReadaheadWindows walks readahead.advance through a handle's reads:
// which reads start a stream, how windows grow and where they start.
func TestReadaheadWindows(t *testing.T) {
	const K, M = 1 << 10, 1 << 20
	type step struct {
		off, n     int64
		done       bool // the window in flight ends before this read
		start, end int64
	}
	for _, tc := range []struct {
		name  string
		size  int64
		steps []step
	}{
		{"a stream from 0 grows its windows", 64 * M, []step{
			{off: 0, n: 128 * K, start: 128 * K, end: 640 * K},                    // 4x the read
			{off: 128 * K, n: 128 * K},                                            // one window at a time
			{off: 256 * K, n: 128 * K, done: true, start: 640 * K, end: 1536 * K}, // 1 MiB, cut at its parts' (256 KiB) boundary
			{off: 384 * K, n: 128 * K, done: true},                                // more than half a window ahead
			{off: 1280 * K, n: 128 * K, start: 1536 * K, end: 3584 * K},           // 2 MiB, the cap, aligned now
			{off: 1408 * K, n: 128 * K, done: true},
			{off: 3 * M, n: 128 * K, start: 3584 * K, end: 5632 * K}, // stays 2 MiB
		}},
		{"random reads start nothing", 64 * M, []step{
			{off: 4 * M, n: 4 * K}, {off: 1 * M, n: 4 * K}, {off: 7 * M, n: 4 * K}, {off: 2 * M, n: 4 * K},
		}},
		{"a read where the last ended starts a stream", 64 * M, []step{
			{off: 4 * M, n: 4 * K}, {off: 4*M + 4*K, n: 4 * K, start: 4*M + 8*K, end: 4*M + 128*K}, // to a 128 KiB boundary
		}},
		{"reads a little out of order stay in the stream", 64 * M, []step{
			{off: 0, n: 128 * K, start: 128 * K, end: 640 * K},
			{off: 384 * K, n: 128 * K, done: true, start: 640 * K, end: 1536 * K},
			{off: 256 * K, n: 128 * K},
			{off: 128 * K, n: 128 * K, done: true},
			{off: 640 * K, n: 128 * K, start: 1536 * K, end: 3584 * K},
		}},
		{"a jump ends the stream", 64 * M, []step{
			{off: 0, n: 128 * K, start: 128 * K, end: 640 * K},
			{off: 32 * M, n: 128 * K, done: true},
			{off: 16 * M, n: 128 * K},
		}},
		{"windows end at the file's size", 300 * K, []step{
			{off: 0, n: 128 * K, start: 128 * K, end: 300 * K},
			{off: 128 * K, n: 128 * K, done: true},
			{off: 256 * K, n: 44 * K},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r readahead
			for i, s := range tc.steps {
				if s.done { // every part of the window in flight ends
					for r.parts > 0 {
						r.done(false, 0)
					}
				}
				start, end, _, _, _ := r.advance(s.off, s.n, tc.size, 2*M)
				if end <= start {
					start, end = 0, 0
				}
				if start != s.start || end != s.end {
					t.Fatalf("read %d (%d bytes at %d): window [%d, %d), want [%d, %d)", i, s.n, s.off, start, end, s.start, s.end)
				}
			}
		})
	}
	t.Run("a window is read in parts, the next asked for after the last", func(t *testing.T) {
		for _, c := range []struct {
			start, end, window, part int64
			parts                    int
		}{
			{128 * K, 640 * K, 512 * K, 128 * K, 4}, // the least part
			{1536 * K, 3584 * K, 2 * M, 512 * K, 4},
			{1664 * K, 3584 * K, 2 * M, 512 * K, 4}, // the first part short, to the boundary
			{128 * K, 300 * K, 512 * K, 128 * K, 2}, // the last ends at the file's size
			{5 * K, 5*K + 8*M + 1, 8 * M, 2 * M, 5}, // cut at multiples of the part
			{0, 3 * M, 3 * M, 512 * K, 6},           // a power of two at most a quarter
		} {
			part := windowPart(c.window)
			parts := windowParts(c.start, c.end, part)
			if part != c.part || parts != c.parts {
				t.Fatalf("[%d, %d): %d parts of %d, want %d of %d", c.start, c.end, parts, part, c.parts, c.part)
			}
			at := c.start
			for i := range parts {
				ps, pe := windowPartAt(c.start, c.end, part, i)
				if ps != at || pe <= ps || pe-ps > part || (i < parts-1 && pe%part != 0) {
					t.Fatalf("[%d, %d): part %d is [%d, %d) after %d", c.start, c.end, i, ps, pe, at)
				}
				at = pe
			}
			if at != c.end {
				t.Fatalf("[%d, %d): parts end at %d", c.start, c.end, at)
			}
		}
		var r readahead
		_, _, _, parts, _ := r.advance(0, 128*K, 64*M, 2*M)
		if parts != 4 {
			t.Fatalf("the first window (512 KiB) in %d parts, want 4", parts)
		}
		for i := range parts {
			if s, e, _, _, _ := r.advance(128*K*int64(i+1), 128*K, 64*M, 2*M); e > s {
				t.Fatalf("a window [%d, %d) asked for with %d of %d parts still in flight", s, e, parts-i, parts)
			}
			r.done(false, 0)
		}
		if s, e, _, _, _ := r.advance(640*K, 128*K, 64*M, 2*M); e <= s {
			t.Fatal("no window asked for once every part ended")
		}
	})
	t.Run("a window dropped is asked for again", func(t *testing.T) {
		var r readahead
		start, end, part, parts, _ := r.advance(0, 128*K, 64*M, 2*M)
		for i := range parts {
			r.done(true, start+int64(i)*part)
		}
		s2, e2, _, _, _ := r.advance(128*K, 128*K, 64*M, 2*M)
		if s2 != 256*K || e2 <= s2 {
			t.Fatalf("after [%d, %d) was dropped the next read asked for [%d, %d), want from %d", start, end, s2, e2, 256*K)
		}
	})
}

// coldFile writes size bytes to name, syncs, and reopens the engine so
// that nothing of the file is in the cache.
func coldFile(t *testing.T, cfg Config, size int) (*Engine, *File, []byte) {
	t.Helper()
	devName := emuDevice(t, 16, "4M", "")
	e := formatOpen(t, devName, cfg)
	f := mustCreate(t, e, "a")
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*7 + i>>12)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = reopen(t, devName, cfg)
	t.Cleanup(func() { e.Close() })
	f, err := e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	return e, f, data
}

// raIdle waits until the handle has no window queued or being read.
func raIdle(t *testing.T, h *File) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		h.ra.mu.Lock()
		busy := h.ra.parts > 0
		h.ra.mu.Unlock()
		if !busy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("readahead window still in flight after 20 s")
		}
	}
}

// TestSequentialColdReadsReadAhead: after a cold read at the start of a
// file, the window past it is read into the cache, and reading it takes
// nothing from the device; random reads read nothing ahead, and
// ReadaheadMax < 0 turns it off.
func TestSequentialColdReadsReadAhead(t *testing.T) {
	const K = 1 << 10
	t.Run("sequential", func(t *testing.T) {
		cfg := smallConfig()
		cfg.CacheBytes = 64 << 20 // windows up to 2 MiB (a 32nd)
		e, f, data := coldFile(t, cfg, 2<<20)
		p := make([]byte, 128*K)
		if _, err := f.ReadAt(p, 0); err != nil {
			t.Fatal(err)
		}
		raIdle(t, f)
		st := e.Stats()
		if st.Cache.PrefetchedBytes != 512*K {
			t.Fatalf("prefetched %d bytes after the first read, want the first window, %d", st.Cache.PrefetchedBytes, 512*K)
		}
		for off := int64(128 * K); off < 640*K; off += 128 * K {
			if _, err := f.ReadAt(p, off); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(p, data[off:off+128*K]) {
				t.Fatalf("bytes at %d differ", off)
			}
		}
		if m := e.Stats().Cache.Misses; m != st.Cache.Misses {
			t.Fatalf("reads of the window read ahead missed %d times", m-st.Cache.Misses)
		}
		// The rest of the file, sequentially: every byte right.
		got := make([]byte, len(data))
		for off := 0; off < len(data); off += 128 * K {
			if _, err := f.ReadAt(got[off:off+128*K], int64(off)); err != nil && !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(got, data) {
			t.Fatal("a sequential read of the file differs from what was written")
		}
	})
	t.Run("random", func(t *testing.T) {
		e, f, _ := coldFile(t, smallConfig(), 2<<20)
		p := make([]byte, 4*K)
		for _, off := range []int64{1024 * K, 256 * K, 1792 * K, 512 * K, 4 * K} {
			if _, err := f.ReadAt(p, off); err != nil {
				t.Fatal(err)
			}
		}
		raIdle(t, f)
		if n := e.Stats().Cache.PrefetchedBytes; n != 0 {
			t.Fatalf("random reads read %d bytes ahead", n)
		}
	})
	t.Run("off", func(t *testing.T) {
		cfg := smallConfig()
		cfg.ReadaheadMax = -1
		e, f, _ := coldFile(t, cfg, 2<<20)
		p := make([]byte, 128*K)
		for off := int64(0); off < 1<<20; off += 128 * K {
			if _, err := f.ReadAt(p, off); err != nil {
				t.Fatal(err)
			}
		}
		raIdle(t, f)
		if n := e.Stats().Cache.PrefetchedBytes; n != 0 {
			t.Fatalf("readahead off, yet %d bytes read ahead", n)
		}
	})
}

// TestReadaheadAgainstRemoveAndClose: windows in flight when the file is
// removed, or the engine closed, fail nothing and hold nothing up; a
// removed file's handle reads nothing more.
func TestReadaheadAgainstRemoveAndClose(t *testing.T) {
	const K = 1 << 10
	e, f, _ := coldFile(t, smallConfig(), 4<<20)
	p := make([]byte, 64*K)
	var wg sync.WaitGroup
	wg.Go(func() {
		for off := int64(0); off < 4<<20; off += 64 * K {
			if _, err := f.ReadAt(p, off); err != nil {
				return // removed under it
			}
		}
	})
	if err := e.Remove("a"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	g := mustCreate(t, e, "b")
	if _, err := g.WriteAt(bytes.Repeat([]byte{1}, 8<<20), 0); err != nil {
		t.Fatal(err)
	}
	q := make([]byte, 256*K)
	wg.Go(func() {
		for off := int64(0); off < 8<<20; off += 256 * K {
			if _, err := g.ReadAt(q, off); err != nil {
				return // closed under it
			}
		}
	})
	if err := e.Close(); err != nil {
		t.Fatalf("Close with readahead running: %v", err)
	}
	wg.Wait()
}

// TestReadaheadRacingShrinkAndGrow: windows read ahead while the file is
// cut to nothing and grown back must never bring the cut bytes back:
// after the shrink and grow, every byte reads as zero.
func TestReadaheadRacingShrinkAndGrow(t *testing.T) {
	const K, size = 1 << 10, 4 << 20
	cfg := smallConfig()
	cfg.CacheBytes = 64 << 20
	e, f, _ := coldFile(t, cfg, size)
	zeros := make([]byte, size)
	got := make([]byte, size)
	for round := range 20 {
		var wg sync.WaitGroup
		wg.Go(func() {
			p := make([]byte, 128*K)
			for off := int64(0); off < size; off += 128 * K {
				if _, err := f.ReadAt(p, off); err != nil && !errors.Is(err, io.EOF) {
					t.Error(err)
					return
				}
			}
		})
		if err := f.Truncate(0); err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(size); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		raIdle(t, f)
		if _, err := f.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, zeros) {
			i := 0
			for got[i] == 0 {
				i++
			}
			t.Fatalf("round %d: byte %d reads %#x after a cut to 0 and a grow", round, i, got[i])
		}
		// Bytes to cut again, on the device and out of the cache.
		data := bytes.Repeat([]byte{byte(round + 1)}, size)
		if _, err := f.WriteAt(data, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		e.cache.EvictClean(1 << 30)
	}
}
