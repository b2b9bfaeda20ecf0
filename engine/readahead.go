package engine

import (
	"context"
	"math/bits"
	"sync"
)

// Readahead. A handle that reads its file sequentially has the bytes past
// its reads brought into the cache (cache.Prefetch) before it asks for
// them, in windows that background workers read, as the kernel's
// on-demand readahead does for a struct file: without it every cold
// request of a sequential reader was one folio and one device read, and
// the daemon's cold sequential reads ran at 0.12-0.16x the kernel's.
//
// A handle enters a sequential stream with a read at offset 0 or one that
// starts exactly where its furthest read ended; in a stream, reads that
// arrive a little out of order (a client's queue of requests, run by
// several of the daemon's goroutines) keep it, and any other read ends it.
// The first window is four times the read (at least readaheadMin), each
// next one twice the last, up to Config.ReadaheadMax; a window is asked
// for once less than half a window of read-ahead bytes is left before
// the reader, starting where the last ended, and ends at the file's size
// as the read saw it or, short of that, on a multiple of its part size
// (windowPart: a power of two), so that every window but the first
// starts on a part boundary. One window per handle is queued or read at
// a time, in about readaheadWorkers parts (windowParts) that workers
// read side by side: read by one worker, folio by
// folio, a window had one device read in flight, where the kernel
// submits a whole window's reads at once. The parts lie between
// multiples of the part size, so Prefetch makes each one folio (one
// device read): windows that started where a 4 KiB reader's read ended
// were read in folios of 4, 8, 16 ... KiB up to the next boundary.
//
// A reader in a stream that misses (it overtook its windows: a 32 KiB
// reader does whenever a worker starts a part late, and its fill then
// broke the worker's part into small folios too) fills its miss up to
// the next part boundary (cache.ReadAhead), not just its request, as
// the kernel's synchronous readahead reads a window at a sequential
// reader's miss. So does the daemon's cold read of such a miss
// (File.StartRead, cache.BeginMissAhead): before, it read one folio
// per request, and a cold 4 KiB reader at queue depth 16 through the
// daemon issued 17 device reads per MiB. On an emu device in this VM, where a device read costs
// a virtio exit, a cold 32 KiB sequential reader took 2.4-2.6x the CPU
// per MiB of a 512 KiB one before both changes, 1.04-1.06x after
// (BenchmarkSeqRead; README, "Small sequential reads").
//
// Readahead is a guess: it never holds a reader. The queue is bounded (a
// window that does not fit is dropped), Prefetch never waits (for memory,
// for writeback or for another read of the same blocks), and an error,
// or a file removed meanwhile, is left to the reader's own read to find.
// A reader that reaches a window being read waits for that read instead
// of reading the blocks again (the cache's fills). The workers run their
// windows as engine operations (enter, leave), so Close waits for a
// window in progress; they stop when Close begins. Nothing is allocated
// per window.

// readaheadMin is the smallest window; defaultReadaheadMax the default
// largest (Config.ReadaheadMax): with 8 MiB, cold 128 KiB requests at
// queue depth 4 ran 1.5x faster than with 2 MiB (coldread-cases.py).
const (
	readaheadMin        = 128 << 10
	defaultReadaheadMax = 8 << 20
	readaheadWorkers    = 4
	readaheadQueue      = 64
)

// readahead is a handle's sequential-stream state.
type readahead struct {
	mu     sync.Mutex
	next   int64 // the end of the furthest read of the stream
	ahead  int64 // the end of what readahead asked for
	window int64 // the next window's size; 0: not in a stream
	parts  int   // parts of the window in flight (queued or being read)
}

// raJob is one window for a worker: [off, end) of h's file.
type raJob struct {
	h        *File
	off, end int64
}

// advance records a read of n bytes at off of a file of size bytes and
// returns the window to read ahead, if any (end > start), cut into parts
// (windowParts) that it counts in flight: the caller queues each or
// gives it back with done. fill is how far the read itself may fill a
// miss (cache.ReadAhead): in a stream, to the next part boundary past
// it (within size), so that a reader that overtook the windows reads a
// part in one device read, not one per request; else the read's end.
func (r *readahead) advance(off, n, size, maxWindow int64) (start, end, part int64, parts int, fill int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	readEnd := off + n
	if !r.continues(off, n) {
		r.window, r.next, r.ahead = 0, readEnd, 0
		return 0, 0, 0, 0, readEnd
	}
	r.next = max(r.next, readEnd)
	if r.window == 0 {
		r.window = firstWindow(n, maxWindow)
		r.ahead = r.next
	}
	part = windowPart(r.window)
	fill = fillTo(readEnd, part, size)
	if r.parts > 0 {
		return 0, 0, 0, 0, fill
	}
	// A reader that overtook the windows reads for itself; the next
	// window starts past it.
	r.ahead = max(r.ahead, r.next)
	if r.ahead-r.next >= r.window/2 {
		return 0, 0, 0, 0, fill
	}
	start, end = r.ahead, min(r.ahead+r.window, size)
	if end < size {
		// Ends on a part boundary, so that the next window's parts
		// (and the folios Prefetch makes in them) are naturally
		// aligned: a window that starts where a 4 KiB reader's read
		// ended made folios of 4, 8, 16 KiB up to the next boundary,
		// each a device read.
		if a := end &^ (part - 1); a > start {
			end = a
		}
	}
	if start >= end {
		return 0, 0, 0, 0, fill
	}
	parts = windowParts(start, end, part)
	r.ahead, r.parts = end, parts
	r.window = min(2*r.window, maxWindow)
	return start, end, part, parts, fill
}

// continues reports whether a read of n bytes at off is in the stream
// (or begins one). Under r.mu.
func (r *readahead) continues(off, n int64) bool {
	slack := max(r.window, 16*n) // how far out of order a stream's reads arrive
	inStream := r.window > 0 && off >= r.next-slack && off <= r.next+slack
	return inStream || off == r.next || off == 0
}

// firstWindow is a stream's first window, for reads of n bytes.
func firstWindow(n, maxWindow int64) int64 { return min(max(4*n, readaheadMin), maxWindow) }

// fillTo is how far a read in a stream that ends at readEnd may fill a
// miss: to the next multiple of part (the window's part size) past it,
// within size.
func fillTo(readEnd, part, size int64) int64 {
	return min(max(readEnd, (readEnd+part-1)&^(part-1)), max(readEnd, size))
}

// fill is advance's fill for a read of n bytes at off, without
// recording the read: for a read that may yet not happen (StartRead
// asks before it knows whether it begins, and records the read only
// if it does).
func (r *readahead) fill(off, n, size, maxWindow int64) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.continues(off, n) {
		return off + n
	}
	w := r.window
	if w == 0 {
		w = firstWindow(n, maxWindow)
	}
	return fillTo(off+n, windowPart(w), size)
}

// windowPart is the part of a window of w bytes a worker reads: the
// largest power of two at most w/readaheadWorkers, at least
// readaheadMin (itself a power of two).
func windowPart(w int64) int64 {
	p := max(readaheadMin, w/readaheadWorkers)
	return int64(1) << (bits.Len64(uint64(p)) - 1)
}

// windowParts is how many parts the window [start, end) is cut into at
// the multiples of part (a power of two) between them: the first and
// the last may be short. readaheadWorkers for a window a power of two
// long that starts on a boundary, one more when it does not, up to
// twice as many when the window is not a power of two.
func windowParts(start, end, part int64) int {
	base := start &^ (part - 1)
	return int((end - base + part - 1) / part)
}

// windowPartAt is the i-th of windowParts' parts of [start, end).
func windowPartAt(start, end, part int64, i int) (ps, pe int64) {
	base := start &^ (part - 1)
	return max(start, base+int64(i)*part), min(end, base+int64(i+1)*part)
}

// done ends a part of the window in flight: dropped says it was not
// read, and the next read asks again from start, its start.
func (r *readahead) done(dropped bool, start int64) {
	r.mu.Lock()
	r.parts--
	if dropped {
		r.ahead = min(r.ahead, start)
	}
	r.mu.Unlock()
}

// readAhead queues the window a read of n bytes at off calls for, if
// any, and returns how far the read may fill a miss (see advance).
func (h *File) readAhead(off, n, size int64) (fill int64) {
	e := h.e
	if e.raMax <= 0 {
		return off + n
	}
	start, end, part, parts, fill := h.ra.advance(off, n, size, e.raMax)
	for i := range parts {
		ps, pe := windowPartAt(start, end, part, i)
		select {
		case e.raQueue <- raJob{h: h, off: ps, end: pe}:
		default:
			h.ra.done(true, ps)
		}
	}
	return fill
}

// readAheadFill is readAhead's fill for a read of n bytes at off of a
// file of size bytes, without recording the read (readahead.fill).
func (h *File) readAheadFill(off, n, size int64) int64 {
	if h.e.raMax <= 0 {
		return off + n
	}
	return h.ra.fill(off, n, size, h.e.raMax)
}

// readaheadWorker reads queued windows until Close begins or ctx, the
// background work's, ends.
func (e *Engine) readaheadWorker(ctx context.Context) {
	for {
		select {
		case <-e.closingCh:
			return
		case <-ctx.Done():
			return
		case j := <-e.raQueue:
			e.readWindow(j)
		}
	}
}

// readWindow reads one window, unless Close began or the handle was
// closed or its file removed (the cache would keep a removed file's
// blocks until evicted).
func (e *Engine) readWindow(j raJob) {
	read := false
	defer func() { j.h.ra.done(!read, j.off) }()
	if e.enter() != nil {
		return
	}
	defer e.leave()
	e.raActive.Add(1)
	defer e.raActive.Add(-1)
	cf, err := e.cacheFile(j.h.f)
	if err != nil || j.h.closed.Load() {
		return // removed
	}
	read = true
	// An error is the reader's to find (its own read of those blocks);
	// Prefetch never waits, so it needs no cancellation.
	_ = e.cache.Prefetch(context.Background(), cf, j.off, j.end-j.off, e)
}
