package engine

import (
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"syscall"

	"github.com/zonefold/zonefold/cache"
	"github.com/zonefold/zonefold/uring"
)

// ReadDone is told how a read File.StartRead began ended. It is called
// once, on the ring's reaper, on the engine's cold-read finisher or on
// StartRead's caller itself, and must not block: it hands the result on
// and returns.
type ReadDone interface {
	// ReadDone: again false, the read ended with n bytes read into p
	// (all of p) or with err; again true, nothing was read (p is
	// untouched) and the caller reads with ReadAtContext, which may wait.
	ReadDone(n int, err error, again bool)
}

// coldRead is one read File.StartRead began: a cold miss of a whole
// folio's worth (cache.BeginMiss), its device reads in flight, finished
// as their last completion arrives. It lives in the read scratch it
// holds from start to end (readScratch.cold): as many cold reads run at
// once as checked fills, and none allocates.
type coldRead struct {
	e      *Engine
	h      *File
	miss   cache.Miss
	mem    []byte // the miss's block, the file's bytes at base
	base   int64
	p      []byte
	seq    uint64 // file.shrinking as the read began
	done   ReadDone
	s      *readScratch
	pieces [maxReadPieces]extent
	n, nh  int
	want   int64
	left   atomic.Int32 // completions to come, and StartRead's own hold
	got    atomic.Int64
	errno  atomic.Int32
}

// StartRead begins a read of len(p) bytes at off that the cache does not
// hold, without waiting for anything: the device reads of the miss are
// submitted (under the caller's plug, see PlugReads) and the read is
// finished when they complete, as its last completion arrives on the
// ring's reaper: the blocks are checked, put in the cache and copied
// into p, and done is told. It reports whether it began; if not, it did
// nothing (nothing counted, readahead not told) and the caller reads
// with ReadAtContext. It begins only a read that lies within the file's
// size and is one whole missing folio of the cache's (cache.BeginMiss:
// the common cold read, random or not yet read ahead), that no shrink
// is racing, and for which a read scratch is free; the cache's lock of
// the file and the handle's state are only tried. A read of a
// sequential stream reads the folio it would make if it ran to the next
// part boundary (cache.BeginMissAhead, as ReadAtContext's miss does,
// see readahead.go), so that the stream's next requests hit (the
// request's folio alone if that fill maps more pieces than one read
// takes); if that read fails, done is told to read again (the request
// alone decides the error).
//
// Like every cache fill, the miss is read into the cache's own memory,
// never into p (for the daemon, memory its client shares), and goes into
// the cache only if no write, truncate or removal came meanwhile; if one
// did, or a shrink raced the read, done is told to read again. The
// reaper never waits: a cache file lock it finds held hands the rest of
// the read to the engine's cold-read finisher (coldFinisher), whose wait
// for that lock waits for nothing else (the cache never waits for a fill
// under a file lock).
func (h *File) StartRead(p []byte, off int64, done ReadDone) bool {
	e := h.e
	end := off + int64(len(p))
	if off < 0 || len(p) == 0 || end < off {
		return false
	}
	cf := h.f.cached.Load()
	if cf == nil || e.enter() != nil {
		return false
	}
	if h.check() != nil {
		e.leave()
		return false
	}
	seq := h.f.shrinking.Load()
	size := h.Size()
	if seq%2 != 0 || end > size {
		e.leave()
		return false
	}
	var s *readScratch
	select {
	case s = <-e.coldScratch.free:
	default:
		e.leave()
		return false
	}
	r := &s.cold
	*r = coldRead{e: e, s: s}
	// A miss of a sequential stream fills to the next part boundary, as
	// ReadAtContext's does (readahead.go): the requests that follow hit.
	fill := h.readAheadFill(off, int64(len(p)), size)
	var mem []byte
	ok := false
	for {
		mem, ok = e.cache.BeginMissAhead(*cf, off, len(p), fill, &r.miss)
		if !ok {
			break
		}
		r.base, _ = r.miss.Range()
		n, next, err := e.gatherPieces(h.f, r.base, 0, mem, &r.pieces)
		if err == nil && next < int64(len(mem)) {
			e.unpinPieces(r.pieces[:n]) // more pieces than one batch: Read's way
			err = io.ErrShortBuffer
		}
		r.n = n
		if err == nil {
			break
		}
		ok = false
		ahead := r.miss.Ahead()
		e.cache.AbortMiss(&r.miss)
		if err != io.ErrShortBuffer || !ahead {
			break
		}
		// The fill maps more pieces than one read takes (a fragmented
		// file, a window grown to 2 MiB parts): read the request alone,
		// as before the fill, rather than hand every miss of the stream
		// to a worker (TestH39gColdFillOfAFragmentedFileStillBegins).
		fill = 0
	}
	if !ok {
		*r = coldRead{}
		e.coldScratch.free <- s
		e.leave()
		return false
	}
	r.h, r.mem, r.p, r.seq, r.done = h, mem, p, seq, done
	r.nh = e.planSums(r.s, r.pieces[:r.n])
	r.want = int64(r.nh) * BlockSize
	for _, x := range r.pieces[:r.n] {
		r.want += x.len
	}
	r.left.Store(int32(r.n + r.nh + 1))
	e.stats.coldReads.Add(1)
	// Counted toward the handle's stream as ReadAtContext's read is,
	// before the read can end (after it, the handle may be closed).
	h.readAhead(off, int64(len(p)), size)
	for i := range r.n + r.nh {
		dev, dst := r.at(i)
		if err := e.dev.Read(dev, dst, r); err != nil {
			errno := syscall.EIO
			errors.As(err, &errno)
			r.Complete(uring.Result{Res: -int32(errno)})
		}
	}
	r.Complete(uring.Result{}) // StartRead's hold
	return true
}

// at is the device range and memory of the read's i-th device read: the
// pieces, then the headers whose sums the sum cache lacks.
func (r *coldRead) at(i int) (int64, []byte) {
	if i < r.n {
		x := r.pieces[i]
		return x.dev, r.mem[x.off-r.base : x.off-r.base+x.len]
	}
	j := i - r.n
	return r.s.hdrAt[j], r.s.mem[j*BlockSize : (j+1)*BlockSize]
}

// Complete implements uring.Completion: the last one finishes the read.
func (r *coldRead) Complete(res uring.Result) {
	if res.Res < 0 {
		r.errno.CompareAndSwap(0, -res.Res)
	} else {
		r.got.Add(int64(res.Res))
	}
	if r.left.Add(-1) == 0 {
		r.check()
	}
}

// check ends the read's device part: unpins its zones, checks its blocks
// and goes on to put them in the cache.
func (r *coldRead) check() {
	e := r.e
	e.unpinPieces(r.pieces[:r.n])
	e.stats.devRead.Add(r.want) // the pieces' and the headers' bytes
	e.stats.sumReads.Add(int64(r.nh))
	var err error
	switch errno := syscall.Errno(r.errno.Load()); {
	case errno != 0:
		err = &uring.OpError{Op: "read", Errno: errno}
	case r.got.Load() != r.want:
		err = fmt.Errorf("short device read: %d of %d bytes: %w", r.got.Load(), r.want, io.ErrUnexpectedEOF)
	}
	// A miss filled past the request (BeginMissAhead) read ahead: its
	// failure is no reader's, and is neither counted nor reported; the
	// caller reads again with ReadAtContext, whose read of the request
	// alone decides, and counts, once (ReadBackingAhead). So does a
	// device failure of the request alone: the block layer fails every
	// read it merged with one of a bad block (a readahead worker's of
	// the next window, say), and ReadAtContext's read is read again
	// piece by piece and block by block before it fails (readPieces),
	// so that only a block that fails alone is EIO to the reader.
	ahead := r.miss.Ahead()
	again := ahead
	if err != nil {
		e.kickOffline() // the zone may have gone offline
		again = true
	} else if !e.cfg.NoReadVerify {
		err = e.checkSums(r.s, r.nh, r.h.f.id, r.pieces[:r.n], r.mem, r.base, ahead)
	}
	if err != nil {
		e.cache.AbortMiss(&r.miss)
		if again {
			e.stats.coldAgain.Add(1)
			r.end(0, nil, true)
			return
		}
		r.end(0, fmt.Errorf("engine: read %q at %d: %w", r.h.f.name(), r.base, err), false)
		return
	}
	r.adopt(false)
}

// adopt puts the read's block in the cache and copies it out; with wait
// false (on the reaper) only if the cache's lock of the file is free at
// once, else the finisher does it.
func (r *coldRead) adopt(wait bool) {
	e := r.e
	done, busy := e.cache.FinishMiss(&r.miss, r.p, wait)
	switch {
	case busy:
		e.stats.coldLate.Add(1)
		e.coldFinish <- r // room for every cold read: one per read scratch
	case !done || r.h.f.shrinking.Load() != r.seq:
		// Changed meanwhile, or a shrink raced it (see ReadAtContext):
		// read again, the way that copes with both.
		e.stats.coldAgain.Add(1)
		r.end(0, nil, true)
	default:
		e.stats.hostRead.Add(int64(len(r.p)))
		r.end(len(r.p), nil, false)
	}
}

// end tells the read's caller and gives the read back.
func (r *coldRead) end(n int, err error, again bool) {
	e, done, s := r.e, r.done, r.s
	*r = coldRead{}
	e.coldScratch.free <- s
	e.leave()
	done.ReadDone(n, err, again)
}

// coldFinisher finishes the cold reads whose cache file lock the reaper
// found held, until stop is closed: by a Close that waited for every
// operation (stopColdFinisher), so no read can come to it after. A Close
// that stopped waiting for running operations (a device slow to answer)
// leaves it running, as it leaves the cache and the device open: a cold
// read still in the device then may complete later and come here, and
// was left in the queue for ever when the finisher stopped with the
// background work Close cancels, its ReadDone never told (the daemon's
// client never answered, its connection never ended:
// TestH32bColdReadLateAfterAbandonedCloseEnds).
func (e *Engine) coldFinisher(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case r := <-e.coldFinish:
			r.adopt(true)
		}
	}
}

// stopColdFinisher stops the cold-read finisher and waits for it to end;
// only once no cold read is running or can begin.
func (e *Engine) stopColdFinisher() {
	close(e.coldStop)
	<-e.coldDone
}

// PlugReads and UnplugReads bracket a batch of StartRead calls so that
// their device reads enter the kernel together, in one io_uring_enter.
// The caller must not wait for anything in between.
func (e *Engine) PlugReads() { e.ring.Plug() }

// UnplugReads ends PlugReads' batch: its reads are entered (or left to
// an entry in progress, see uring's package doc).
func (e *Engine) UnplugReads() {
	_ = e.ring.Unplug()
	_ = e.ring.Flush()
}
