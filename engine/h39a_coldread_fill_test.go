package engine

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
	"time"
)

// TestH39aColdReadsOfAStreamFillWholeParts: TestH38cSequentialReaderFillsWholeParts
// through the daemon's way (a hit served by ReadCached, a miss begun by
// StartRead, ReadAt only for what neither takes): a sequential reader of
// 32 KiB requests whose readahead windows nobody reads fills each cold
// miss to the next part boundary, so that the requests after it hit.
// Before, StartRead read just the request's folio: 256 cold reads and
// misses for 8 MiB, one device read each. It counts, not times.
func TestH39aColdReadsOfAStreamFillWholeParts(t *testing.T) {
	const K, M = 1 << 10, 1 << 20
	e, a, data, unstick := stuckReadaheadWorkers(t)
	defer unstick()
	s0 := e.Stats()
	d := readDone{ch: make(chan readEnd, 1)}
	p := make([]byte, 32*K)
	began := 0
	for off := int64(0); off < int64(len(data)); off += int64(len(p)) {
		clear(p)
		if !a.ReadCached(p, off) {
			e.PlugReads() // as the daemon's reader: its reads are entered at UnplugReads
			ok := a.StartRead(p, off, d)
			e.UnplugReads()
			if ok {
				began++
				var r readEnd
				select {
				case r = <-d.ch:
				case <-time.After(60 * time.Second):
					t.Fatalf("the cold read at %d did not end in 60 s", off)
				}
				if r.err != nil {
					t.Fatalf("cold read at %d: %v", off, r.err)
				}
				ok = !r.again && r.n == len(p)
			}
			if !ok {
				if n, err := a.ReadAt(p, off); err != nil || n != len(p) {
					t.Fatalf("read at %d: %d, %v", off, n, err)
				}
			}
		}
		if !bytes.Equal(p, data[off:off+int64(len(p))]) {
			t.Fatalf("read at %d: wrong bytes", off)
		}
	}
	s := e.Stats()
	misses, cold := s.Cache.Misses-s0.Cache.Misses, s.ColdReads-s0.ColdReads
	devRead := s.DevRead - s0.DevRead - (s.SumReads-s0.SumReads)*BlockSize
	t.Logf("8 MiB in 32 KiB reads: %d cold reads begun (%d by this loop), %d misses, %d data bytes read from the device, %d prefetched",
		cold, began, misses, devRead, s.Cache.PrefetchedBytes-s0.Cache.PrefetchedBytes)
	if s.Cache.PrefetchedBytes != s0.Cache.PrefetchedBytes {
		t.Fatalf("set-up: readahead read a; the workers were to be stuck")
	}
	if began == 0 {
		t.Fatalf("no read began cold: the test does not test StartRead")
	}
	if misses > 8*M/(128*K)+2 {
		t.Errorf("%d misses for 8 MiB read 32 KiB at a time with no readahead running: want at most one per 128 KiB part (%d)", misses, 8*M/(128*K)+2)
	}
	if devRead != 8*M {
		t.Errorf("read %d bytes of data from the device, want %d", devRead, 8*M)
	}
}

// TestH39aFailedFillCountsOnce: a sequential reader's miss fills past
// its request (cache.ReadAhead, StartRead); a fill that fails is read
// again without it, and only that read's failure is the reader's. Each
// failed read counts once in ChecksumErrs: before, the failed fill
// counted as well (a read that failed counted twice, and a read whose
// fill failed only past its request, which succeeded, counted once),
// and so did readahead's windows that read the bad block. Reads at 0
// and 4 KiB succeed (their fills fail past them), the read at 8 KiB
// fails, through ReadAt and through StartRead (which tells its caller
// to read again, with ReadAt): one count each.
func TestH39aFailedFillCountsOnce(t *testing.T) {
	for _, cold := range []bool{false, true} {
		want := pattern(64<<10, 1)
		e, _ := reopenWithFlippedByte(t, want)
		h, err := e.Open("a")
		if err != nil {
			t.Fatal(err)
		}
		p := make([]byte, BlockSize)
		for _, off := range []int64{0, 4096} {
			if _, err := h.ReadAt(p, off); err != nil || !bytes.Equal(p, want[off:off+BlockSize]) {
				t.Fatalf("read at %d: %v", off, err)
			}
		}
		if cold {
			d := readDone{ch: make(chan readEnd, 1)}
			e.PlugReads()
			ok := h.StartRead(p, 8192, d)
			e.UnplugReads()
			if !ok {
				t.Fatalf("the cold read at 8192 did not begin")
			}
			if r := <-d.ch; r.err == nil && !r.again {
				t.Fatalf("the cold read of the bad block: %d bytes, no error", r.n)
			}
		}
		if _, err := h.ReadAt(p, 8192); !errors.Is(err, syscall.EIO) || !errors.Is(err, ErrChecksum) {
			t.Fatalf("read of the flipped block: %v, want EIO (checksum)", err)
		}
		// Readahead's windows of the file ended (they read the bad
		// block too).
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(time.Millisecond) {
			h.ra.mu.Lock()
			parts := h.ra.parts
			h.ra.mu.Unlock()
			if parts == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("readahead of a still running after 60 s")
			}
		}
		st := e.Stats()
		wantErrs := int64(1)
		if cold && st.ColdReadsAgain == 0 {
			wantErrs = 2 // StartRead read the request alone and failed: the read that follows is a second one
		}
		if st.ChecksumErrs != wantErrs || st.ReadErrs != 0 {
			t.Errorf("cold %v: %d checksum errors, %d read errors; want %d and 0", cold, st.ChecksumErrs, st.ReadErrs, wantErrs)
		}
		e.Close()
	}
}
