package engine

import (
	"context"
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
// as the read saw it. One window per handle is queued or read at a time,
// in up to readaheadWorkers parts that workers read side by side: read
// by one worker, folio by folio, a window had one device read in flight,
// where the kernel submits a whole window's reads at once.
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
// (splitWindow) that it counts in flight: the caller queues each or
// gives it back with done.
func (r *readahead) advance(off, n, size, maxWindow int64) (start, end, part int64, parts int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	readEnd := off + n
	slack := max(r.window, 16*n) // how far out of order a stream's reads arrive
	inStream := r.window > 0 && off >= r.next-slack && off <= r.next+slack
	if !inStream && off != r.next && off != 0 {
		r.window, r.next, r.ahead = 0, readEnd, 0
		return 0, 0, 0, 0
	}
	r.next = max(r.next, readEnd)
	if r.window == 0 {
		r.window = min(max(4*n, readaheadMin), maxWindow)
		r.ahead = r.next
	}
	if r.parts > 0 {
		return 0, 0, 0, 0
	}
	// A reader that overtook the windows reads for itself; the next
	// window starts past it.
	r.ahead = max(r.ahead, r.next)
	if r.ahead-r.next >= r.window/2 {
		return 0, 0, 0, 0
	}
	start, end = r.ahead, min(r.ahead+r.window, size)
	if start >= end {
		return 0, 0, 0, 0
	}
	part, parts = splitWindow(start, end)
	r.ahead, r.parts = end, parts
	r.window = min(2*r.window, maxWindow)
	return start, end, part, parts
}

// splitWindow cuts the window [start, end) into parts of part bytes for
// the workers (the last one shorter): at most readaheadWorkers, none
// under readaheadMin, whole blocks between them.
func splitWindow(start, end int64) (part int64, parts int) {
	part = max(readaheadMin, (end-start+readaheadWorkers-1)/readaheadWorkers)
	part = (part + BlockSize - 1) &^ (BlockSize - 1)
	return part, int((end - start + part - 1) / part)
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

// readAhead queues the window a read of n bytes at off calls for, if any.
func (h *File) readAhead(off, n, size int64) {
	e := h.e
	if e.raMax <= 0 {
		return
	}
	start, end, part, parts := h.ra.advance(off, n, size, e.raMax)
	for i := range parts {
		ps, pe := start, end
		if i > 0 {
			ps = (start + int64(i)*part) &^ (BlockSize - 1)
		}
		if i < parts-1 {
			pe = (start + int64(i+1)*part) &^ (BlockSize - 1)
		}
		select {
		case e.raQueue <- raJob{h: h, off: ps, end: pe}:
		default:
			h.ra.done(true, ps)
		}
	}
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
