package cache

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
)

// reserve is a block of memory that reclaim obtained for an access while
// it held no lock; the access uses it for its next new folio if it fits.
type reserve struct {
	page  int32
	order int // -1: none
}

func noReserve() reserve { return reserve{order: -1} }

func (c *Cache) releaseReserve(r *reserve) {
	if r.order >= 0 {
		c.buddy.free(r.page, r.order)
		c.events.Signal()
		r.order = -1
	}
}

// stall says why an access dropped its file lock: to get memory for a
// folio of order, or to wait for writeback to end.
type stall struct {
	order int // >= 0: reclaim memory for a folio of this order
	wait  <-chan struct{}
}

var noStall = stall{order: -1}

// orderFor returns the order of the folio to make at start, a page-aligned
// offset: the largest naturally aligned order, up to maxOrder, that fits
// before limit. This is the order hint.
func orderFor(start, limit int64, maxOrder int) int {
	k := 0
	for k < maxOrder {
		size := int64(pageSize) << (k + 1)
		if start&(size-1) != 0 || start+size > limit {
			break
		}
		k++
	}
	return k
}

func pageUp(off int64) int64 { return (off + pageSize - 1) &^ (pageSize - 1) }

// folioAt returns the folio that covers pos, making one for the access
// [pos, end) if none does: of the hinted order, shrunk to fit the gap
// before the next folio. A nil folio means no memory for that order. Under
// fs.mu held for writing. A folio found (not made) counts as used again.
func (c *Cache) folioAt(fs *fileState, pos, end int64, res *reserve) (*folio, int) {
	ck := fs.chunkFor(pos >> chunkShift)
	i, f := ck.find(pos)
	if f != nil {
		f.touch()
		return f, -1
	}
	start := pos &^ (pageSize - 1)
	order := orderFor(start, min(pageUp(end), ck.nextStart(i)), c.maxOrder)
	var p int32
	got, ok := order, false
	if res.order >= 0 && res.order <= order {
		p, got, ok = res.page, res.order, true
		res.order = -1
	} else {
		p, ok = c.buddy.alloc(order)
	}
	if !ok {
		fs.dropChunkIfEmpty(ck)
		return nil, order
	}
	f = c.newFolio(fs, p, got, start)
	ck.insert(i, f)
	return f, -1
}

// blocks returns the blocks [b0, b1) that bytes [lo, hi) of a folio touch.
func (c *Cache) blocks(lo, hi int) (int, int) {
	return lo >> c.blockShift, (hi + c.blockMask) >> c.blockShift
}

// readBacking fills blocks [b0, b1) of f from b; a nil Backing reads
// zeros. ahead: for readahead (readBackingAt).
func (c *Cache) readBacking(fs *fileState, f *folio, b0, b1 int, b Backing, ahead bool) error {
	p := f.mem[b0<<c.blockShift : b1<<c.blockShift]
	off := f.off + int64(b0)<<c.blockShift
	if b == nil {
		clear(p)
		return nil
	}
	return readBackingAt(b, fs.id, off, p, ahead)
}

// readBackingAt reads p from b at off, saying where a failure was;
// ahead, bytes no reader asked for yet (AheadBacking).
func readBackingAt(b Backing, file uint64, off int64, p []byte, ahead bool) error {
	var err error
	if ab, ok := b.(AheadBacking); ahead && ok {
		err = ab.ReadBackingAhead(file, off, p)
	} else {
		err = b.ReadBacking(file, off, p)
	}
	if err != nil {
		return fmt.Errorf("cache: read file %d at %d (%d bytes): %w", file, off, len(p), err)
	}
	return nil
}

// Write copies p into the file at off and marks it dirty, making folios
// as needed (their order from the write's size and alignment). A partial
// write of a block that is not uptodate first reads that block through b
// (nil: the file has no stored data). It blocks while dirty bytes are over
// the limit, while memory is short and while a block it writes is under
// writeback; it fails only if ctx ends, b fails, off is negative or
// writeback keeps failing while it waits for it (stuckFailures), and
// then returns how many bytes it wrote. The dirty limit is checked as a
// write starts, so one large write can pass it by its own size.
func (c *Cache) Write(ctx context.Context, file File, off int64, p []byte, b Backing) (int, error) {
	return c.WriteThen(ctx, file, off, p, b, nil)
}

// WriteThen is Write that calls then once the last byte is in (never if
// the write fails), in the same hold of the file's lock as the write's
// last piece: no BeginWriteback of the file comes between that piece and
// then. For a write within one folio (a block, say) that is the whole
// write, so what writeback takes of the file either precedes both or
// follows both. then must not call the cache and may take only locks
// below the cache's (the engine's file lock).
func (c *Cache) WriteThen(ctx context.Context, file File, off int64, p []byte, b Backing, then func()) (int, error) {
	if err := checkIO(off, len(p)); err != nil || len(p) == 0 {
		return 0, err
	}
	if err := c.throttle(ctx); err != nil {
		return 0, err
	}
	a := access{fs: file.fs, off: off, end: off + int64(len(p)), p: p, b: b, write: true, then: then}
	return c.run(ctx, &a, off, nil)
}

// WriteProgress is Write that calls progress(n) as the write goes on, n
// the bytes of p in the cache so far (dirty, counted in DirtyBytes):
// without cache locks held, before each wait for memory or writeback and
// before any call for writeback it makes (Config.OnPressure), and once
// more at the end if the last call did not report it all. A caller that
// reserved room for the whole write gives back what progress reports,
// so that the part already in (and later written back) is not counted
// twice while the rest waits for the cache; a write larger than the
// cache can hold at once waits so. progress must not call the cache.
func (c *Cache) WriteProgress(ctx context.Context, file File, off int64, p []byte, b Backing, progress func(n int)) (int, error) {
	if err := checkIO(off, len(p)); err != nil || len(p) == 0 {
		return 0, err
	}
	if err := c.throttle(ctx); err != nil {
		return 0, err
	}
	a := access{fs: file.fs, off: off, end: off + int64(len(p)), p: p, b: b, write: true}
	return c.run(ctx, &a, off, progress)
}

// access is one Read or Write in progress.
type access struct {
	fs       *fileState
	off, end int64 // p's range in the file
	p        []byte
	b        Backing
	write    bool
	then     func() // WriteThen's, under the file lock once all is written
	pre      preRead
	// prefetch: a Prefetch, which copies nothing out and never waits
	// (see Prefetch).
	prefetch bool
	// fill, if past end, is how far a miss at a whole-folio gap may
	// read (ReadAhead): the folio it makes is sized as if the access
	// ran to fill; only [off, end) is copied out.
	fill int64
}

// fillEnd is where a miss of the access may read up to: fill, or end.
func (a *access) fillEnd() int64 { return max(a.end, a.fill) }

// preRead is a Read's miss read through Backing without the file's lock.
// Reading a miss under the lock held every other read of the file,
// cached or not, for the device's latency: one miss of a file at a time.
// A run of blocks [off, end) that are not uptodate is read into scratch
// memory taken from the arena, as of the file's gen — never into the
// caller's p, which for the daemon is memory the client shares and can
// change while the read runs (what is read goes into the cache for every
// reader of the file, and the Backing checks its checksums there); it
// goes into the cache only if gen
// has not moved since (no write or truncate came in between, which could
// have made it stale) and the run is still missing; otherwise the access
// reads its misses under the lock, as before, from then on. Only missing
// blocks are asked for: Backing cannot give a block the cache holds dirty
// (a null device keeps nothing; an overwrite's old record may be gone).
// An error is the read's: Backing maps only records that landed, so a
// failure without the lock is not a glimpse of a change in progress.
type preRead struct {
	fs       *fileState // gen is this fileState's: a Forget starts a new one
	off, end int64
	gen      uint64
	state    uint8 // preNone, preWant (read it), preHave (scratch holds it), preOff
	// scratch is the arena block (of scratchOrder) the run is read
	// into; it is held exactly while state is preWant or preHave.
	scratch      int32
	scratchOrder int8
}

// scratchMem is the held scratch block's memory for the run.
func (c *Cache) scratchMem(pr *preRead) []byte {
	start := int64(pr.scratch) * pageSize
	return c.arena[start : start+(pr.end-pr.off)]
}

// dropScratch gives the held scratch block back, if any, and ends the
// run's fill: misses waiting for it look again.
func (c *Cache) dropScratch(pr *preRead) {
	if pr.state == preWant || pr.state == preHave {
		pr.fs.removeFill(pr.off, pr.end)
		c.buddy.free(pr.scratch, int(pr.scratchOrder))
		c.events.Signal()
		pr.state = preNone
	}
}

const (
	preNone uint8 = iota
	preWant
	preHave
	preOff // read misses under the lock
)

// run does an access from pos on under the file lock, dropping the lock to
// get memory or wait for writeback, and retrying where it stopped.
// progress, if set, is WriteProgress's: a parameter, not a field of a,
// whose contents leak (a.b), so that a caller's closure need not escape
// to the heap.
func (c *Cache) run(ctx context.Context, a *access, pos int64, progress func(n int)) (int, error) {
	res := noReserve()
	defer c.releaseReserve(&res)
	defer c.dropScratch(&a.pre)
	reported := pos // what progress was told is in
	fs := a.fs
	if fs == nil {
		return 0, errNoFile
	}
	for pos < a.end {
		fs.mu.Lock()
		if fs.dead {
			fs.mu.Unlock()
			return int(pos - a.off), ErrForgotten
		}
		var st stall
		var kick bool
		var err error
		if a.write {
			fs.gen++
			pos, st, kick, err = c.writeLocked(fs, pos, a, &res)
			if err == nil && pos >= a.end && a.then != nil {
				a.then()
			}
		} else {
			pos, st, err = c.readLocked(fs, pos, a, &res)
		}
		fs.mu.Unlock()
		if pr := &a.pre; pr.state == preWant {
			// readLocked stopped at a miss to read it without the lock.
			// A fill past the access (ReadAhead) reads ahead, as
			// Prefetch does: its failure is not the reader's.
			fillPast := a.fill > a.end && pr.end > pageUp(a.end)
			if err := readBackingAt(a.b, fs.id, pr.off, c.scratchMem(pr), fillPast || a.prefetch); err != nil {
				if fillPast {
					// A fill past the access failed: the bytes it was
					// asked for may read, as they would have without
					// it (a readahead's error is the reader's only
					// where it reads): again, without it, and that
					// read's failure alone counts.
					c.dropScratch(pr)
					a.fill = 0
					continue
				}
				return int(pos - a.off), err
			}
			pr.state = preHave
			continue
		}
		if progress != nil && pos > reported {
			reported = pos
			progress(int(pos - a.off))
		}
		if kick {
			c.kick()
		}
		if a.prefetch && err == nil && (st.wait != nil || st.order >= 0) {
			if st.wait != nil || !c.reclaimNow(st.order, &res) {
				return int(pos - a.off), nil
			}
			continue
		}
		if err == nil {
			err = c.unstall(ctx, st, &res)
		}
		if err != nil {
			return int(pos - a.off), err
		}
	}
	return len(a.p), nil
}

// writeLocked writes from pos on, folio by folio, until done or a stall.
// Under fs.mu held for writing.
func (c *Cache) writeLocked(fs *fileState, pos int64, a *access, res *reserve) (int64, stall, bool, error) {
	kick := false
	for pos < a.end {
		f, order := c.folioAt(fs, pos, a.end, res)
		if f == nil {
			return pos, stall{order: order}, kick, nil
		}
		stepEnd := min(a.end, f.end())
		lo, hi := int(pos-f.off), int(stepEnd-f.off)
		b0, b1 := c.blocks(lo, hi)
		if ch := c.underWriteback(f, b0, b1); ch != nil {
			return pos, stall{order: -1, wait: ch}, kick, nil
		}
		if err := c.fillPartialBlocks(fs, f, lo, hi, a.b); err != nil {
			return pos, noStall, kick, err
		}
		copy(f.mem[lo:hi], a.p[pos-a.off:stepEnd-a.off])
		if n := c.markWritten(f, b0, b1); n > 0 && c.addDirty(fs, n) {
			kick = true
		}
		pos = stepEnd
	}
	return pos, noStall, kick, nil
}

// fillPartialBlocks reads from Backing the blocks that bytes [lo, hi)
// cover only in part and that are not uptodate, so that the write leaves
// them whole.
func (c *Cache) fillPartialBlocks(fs *fileState, f *folio, lo, hi int, b Backing) error {
	headPartial, tailPartial := lo&c.blockMask != 0, hi&c.blockMask != 0
	if f.allUptodate.Load() || !headPartial && !tailPartial {
		return nil
	}
	head, tail := lo>>c.blockShift, (hi-1)>>c.blockShift
	f.stateMu.Lock()
	readHead := headPartial && !bitSet(f.state, head)
	readTail := tailPartial && !bitSet(f.state, tail) && !(readHead && tail == head)
	f.stateMu.Unlock()
	if readHead {
		c.counters.readThroughs.Add(1)
		if err := c.readBacking(fs, f, head, head+1, b, false); err != nil {
			return err
		}
	}
	if readTail {
		c.counters.readThroughs.Add(1)
		return c.readBacking(fs, f, tail, tail+1, b, false)
	}
	return nil
}

// unstall does what a stall asks, with no lock held.
func (c *Cache) unstall(ctx context.Context, st stall, res *reserve) error {
	if st.wait != nil {
		// Memory held while waiting for others is memory they may wait
		// for (reclaim's turn): give it back, and reclaim again after.
		c.releaseReserve(res)
		select {
		case <-st.wait:
			return nil
		case <-ctx.Done():
			// Writeback of the blocks, or another access's read of
			// them (a fill).
			return fmt.Errorf("cache: wait for writeback or a read of the same blocks: %w", ctx.Err())
		}
	}
	if st.order >= 0 {
		return c.reclaim(ctx, st.order, res)
	}
	return nil
}

// Read copies the file's bytes at off into p: from the cache where they are
// uptodate, otherwise through b into the cache (new folios sized like
// writes') and then out. The cache does not know EOF: the caller clamps.
func (c *Cache) Read(ctx context.Context, file File, off int64, p []byte, b Backing) (int, error) {
	return c.ReadAhead(ctx, file, off, p, 0, b)
}

// ReadAhead is Read for a sequential reader: a miss at a place where no
// folio is (the whole folio's worth missing) reads, in one Backing read,
// the folio it would make if the read ran to fill (at most the largest
// folio, naturally aligned, and short of the next folio), rather than
// one sized by p alone, as the kernel's synchronous readahead reads a
// window at a sequential reader's miss, not just the page asked for.
// A sequential reader of small requests then costs one device read per
// folio, not one per request. Only p is copied out; the caller clamps
// fill at EOF, as Prefetch's range. fill at or below off+len(p) is Read.
func (c *Cache) ReadAhead(ctx context.Context, file File, off int64, p []byte, fill int64, b Backing) (int, error) {
	if err := checkIO(off, len(p)); err != nil || len(p) == 0 {
		return 0, err
	}
	a := access{fs: file.fs, off: off, end: off + int64(len(p)), p: p, b: b, fill: fill}
	pos := off
	if fs := file.fs; fs != nil {
		fs.mu.RLock()
		if !fs.dead {
			pos = c.readCached(fs, pos, &a)
		}
		fs.mu.RUnlock()
	}
	if pos == a.end {
		return len(p), nil
	}
	return c.run(ctx, &a, pos, nil)
}

// TryRead copies the file's bytes at off into p only if the cache holds
// every one of them uptodate and it gets every lock it needs at once: it
// never waits (not for the file's lock, a folio's state lock, the device
// or memory), and reports whether it read p whole. If not, it copied
// nothing: the caller reads with Read. Like Read it does not know EOF.
// For a caller that must not block, as a connection's reader taking
// requests.
func (c *Cache) TryRead(file File, off int64, p []byte) bool {
	fs := file.fs
	if fs == nil || len(p) == 0 || checkIO(off, len(p)) != nil {
		return false
	}
	if !fs.mu.TryRLock() {
		return false
	}
	defer fs.mu.RUnlock()
	end := off + int64(len(p))
	if fs.dead || !c.cachedWhole(fs, off, end) {
		return false
	}
	a := access{fs: fs, off: off, end: end, p: p}
	return c.readCached(fs, off, &a) == end
}

// cachedWhole reports whether [off, end) is uptodate in the cache,
// without waiting for a folio's state lock. Under fs.mu held for reading.
func (c *Cache) cachedWhole(fs *fileState, pos, end int64) bool {
	for pos < end {
		ck := fs.chunk(pos >> chunkShift)
		if ck == nil {
			return false
		}
		_, f := ck.find(pos)
		if f == nil {
			return false
		}
		stepEnd := min(end, f.end())
		if !f.allUptodate.Load() {
			if !f.stateMu.TryLock() {
				return false
			}
			b0, b1 := c.blocks(int(pos-f.off), int(stepEnd-f.off))
			whole := nextClear(f.state, b0, b1) == b1
			f.stateMu.Unlock()
			if !whole {
				return false
			}
		}
		pos = stepEnd
	}
	return true
}

// readCached copies out what the cache holds uptodate from pos on and
// returns where it stopped. Under fs.mu held for reading.
func (c *Cache) readCached(fs *fileState, pos int64, a *access) int64 {
	for pos < a.end {
		ck := fs.chunk(pos >> chunkShift)
		if ck == nil {
			return pos
		}
		_, f := ck.find(pos)
		if f == nil {
			return pos
		}
		stepEnd := min(a.end, f.end())
		lo, hi := int(pos-f.off), int(stepEnd-f.off)
		if !f.allUptodate.Load() {
			b0, b1 := c.blocks(lo, hi)
			f.stateMu.Lock()
			whole := nextClear(f.state, b0, b1) == b1
			f.stateMu.Unlock()
			if !whole {
				return pos
			}
		}
		copy(a.p[pos-a.off:stepEnd-a.off], f.mem[lo:hi])
		f.touch()
		c.counters.hits.Add(1)
		pos = stepEnd
	}
	return pos
}

// readLocked reads through b what is missing, folio by folio, and copies
// out. Under fs.mu held for writing.
func (c *Cache) readLocked(fs *fileState, pos int64, a *access, res *reserve) (int64, stall, error) {
	for pos < a.end {
		f, missed := (*folio)(nil), false
		if a.b != nil && (a.pre.state == preNone || a.pre.state == preHave) {
			var next int64
			var st stall
			var act gapAct
			f, next, st, act = c.gapMiss(fs, pos, a, res)
			switch act {
			case gapRead, gapWait:
				return pos, st, nil
			case gapSkip:
				pos = next
				continue
			case gapAdopted:
				missed = true
			}
			// gapFound: f is the folio at pos, found (and touched) as
			// folioAt would, which need not look again.
		}
		if f == nil {
			var order int
			f, order = c.folioAt(fs, pos, a.end, res)
			if f == nil {
				return pos, stall{order: order}, nil
			}
		}
		stepEnd := min(a.end, f.end())
		lo, hi := int(pos-f.off), int(stepEnd-f.off)
		b0, b1 := c.blocks(lo, hi)
		for !f.allUptodate.Load() {
			// Runs of blocks that are not uptodate; the file lock keeps
			// them so while Backing fills them.
			f.stateMu.Lock()
			r0 := nextClear(f.state, b0, b1)
			r1 := nextSet(f.state, r0, b1)
			f.stateMu.Unlock()
			if r0 == b1 {
				break
			}
			if ch := c.underWriteback(f, r0, r1); ch != nil {
				return pos, stall{order: -1, wait: ch}, nil
			}
			runOff, runEnd := f.off+int64(r0)<<c.blockShift, f.off+int64(r1)<<c.blockShift
			pr := &a.pre
			if pr.state == preHave && !(pr.fs == fs && pr.gen == fs.gen && pr.off == runOff && pr.end == runEnd) {
				// The file changed (or the run did) while it was read:
				// read under the lock from here on, so a file that
				// keeps changing cannot starve this read.
				c.dropScratch(pr)
				pr.state = preOff
			}
			if pr.state != preHave && a.b != nil {
				// Holding no fill of its own (so no cycle of waits), a
				// miss of blocks another access is reading waits for
				// that read; readahead leaves them to it. Only then the
				// wake-up channel (arming it costs a channel at the next
				// Signal), and a second look: a fill it still sees ends
				// (removeFill, then Signal) after the channel was taken.
				if fs.filling(runOff, runEnd) {
					if a.prefetch {
						break
					}
					if ch := c.events.Wait(); fs.filling(runOff, runEnd) {
						c.counters.fillWaits.Add(1)
						return pos, stall{order: -1, wait: ch}, nil
					}
				}
			}
			if pr.state == preHave {
				copy(f.mem[r0<<c.blockShift:r1<<c.blockShift], c.scratchMem(pr))
				c.dropScratch(pr)
			} else if pr.state != preNone || a.b == nil || !c.takeScratch(pr, fs, runOff, runEnd, res) {
				// No scratch to spare (memory is short): read into the
				// folio under the lock.
				if err := c.readBacking(fs, f, r0, r1, a.b, a.prefetch); err != nil {
					return pos, noStall, err
				}
			} else {
				// Read the run without the lock; come back to put it in.
				return pos, noStall, nil
			}
			f.stateMu.Lock()
			f.setUptodate(r0, r1)
			f.stateMu.Unlock()
			if a.prefetch {
				c.counters.prefetched.Add(uint64(runEnd - runOff))
			}
			missed = true
		}
		if a.prefetch {
			pos = stepEnd
			continue
		}
		if missed {
			c.counters.misses.Add(1)
		} else {
			c.counters.hits.Add(1)
		}
		copy(a.p[pos-a.off:stepEnd-a.off], f.mem[lo:hi])
		pos = stepEnd
	}
	return pos, noStall, nil
}

// gapAct is what gapMiss did.
type gapAct uint8

const (
	gapNone    gapAct = iota // no whole-folio gap at pos: the usual way
	gapFound                 // a folio is at pos (returned, touched): the usual way with it
	gapAdopted               // the folio returned was made of the read's block
	gapRead                  // read the run without the lock, then come back
	gapWait                  // wait (st) for another access's read of the run
	gapSkip                  // Prefetch: another access reads the run; go on at next
)

// gapMiss handles a read at pos where no folio is yet and the folio that
// folioAt would make there is one run of missing blocks the access
// covers whole: the common cold read (the kernel's readahead adds a
// folio to the page cache and reads into it; here the folio is made
// once the read is in, since an indexed folio that is not uptodate
// would have to be locked against every other access meanwhile). The
// run is read without the file's lock into an arena block of the
// folio's order (takeScratch), and that block becomes the folio when the
// access comes back with it and nothing changed meanwhile (gen, and the
// gap still the folio's): no folio is made before the read and no
// 2^order pages are copied after it. A folio at pos is returned, touched
// (gapFound), so that the usual way need not look it up again; anything
// else — a run the access covers only in part, no free block, a change
// since the read began — takes the usual way (gapNone), where a scratch
// block held is dropped (preOff) if it does not fit. Under fs.mu held for writing,
// with a.b set and a.pre not preWant or preOff.
func (c *Cache) gapMiss(fs *fileState, pos int64, a *access, res *reserve) (*folio, int64, stall, gapAct) {
	for evicted := false; ; evicted = true {
		key := pos >> chunkShift
		ck := fs.chunk(key)
		limit := (key + 1) << chunkShift
		i := 0
		if ck != nil {
			var f *folio
			if i, f = ck.find(pos); f != nil {
				f.touch()
				return f, 0, noStall, gapFound
			}
			limit = ck.nextStart(i)
		}
		start := pos &^ (pageSize - 1)
		fill := a.fillEnd()
		order := orderFor(start, min(pageUp(fill), limit), c.maxOrder)
		end := start + int64(pageSize)<<order
		if b0, b1 := c.blocks(int(pos-start), int(min(fill, end)-start)); b0 != 0 || b1 != c.bpp<<order {
			return nil, 0, noStall, gapNone
		}
		pr := &a.pre
		if pr.state == preHave {
			if pr.fs != fs || pr.gen != fs.gen || pr.off != start || pr.end != end {
				c.dropScratch(pr)
				pr.state = preOff
				return nil, 0, noStall, gapNone
			}
			// The block holds the run as of now: it becomes the folio.
			fs.removeFill(pr.off, pr.end)
			pr.state = preNone
			if ck == nil {
				ck = fs.chunkFor(key)
			}
			f := c.newFolio(fs, pr.scratch, order, start)
			ck.insert(i, f)
			f.stateMu.Lock()
			f.setUptodate(0, f.nblocks)
			f.stateMu.Unlock()
			if a.prefetch {
				c.counters.prefetched.Add(uint64(end - start))
			}
			return f, 0, noStall, gapAdopted
		}
		// As readLocked: wait for another access's read of the run (or, for
		// readahead, leave it to it), arming the channel only then.
		if fs.filling(start, end) {
			if a.prefetch {
				return nil, min(end, a.end), noStall, gapSkip
			}
			if ch := c.events.Wait(); fs.filling(start, end) {
				c.counters.fillWaits.Add(1)
				return nil, 0, stall{order: -1, wait: ch}, gapWait
			}
		}
		if c.takeScratch(pr, fs, start, end, res) {
			return nil, 0, noStall, gapRead
		}
		if evicted {
			return nil, 0, noStall, gapNone
		}
		// No block free: evict clean folios, the file's own under the lock
		// held (others' only tried: this waits for nothing), and look again
		// (the index may have changed). Handing the miss to the usual way
		// instead cost it the lock three times more, each behind every
		// access queued for it: reclaim's, its reserve's, the fill's
		// (TestBeginMissInAFullCacheEvictsUnderItsLock).
		if freed, _, _ := c.evict(max(1<<order, c.evictBatch), fs); freed == 0 {
			return nil, 0, noStall, gapNone
		}
	}
}

// Prefetch brings the file's bytes in [off, off+n) that the cache does
// not hold into it through b, as Read would, and copies them nowhere:
// readahead. A guess must cost its caller nothing but the reads, so it
// never waits: it stops where Read would wait for memory (nothing free or
// clean to evict) or for writeback, and skips the runs another access is
// reading. It fails only with b's error. The caller clamps at EOF.
func (c *Cache) Prefetch(ctx context.Context, file File, off, n int64, b Backing) error {
	if off < 0 || n < 0 || off+n < off {
		return fmt.Errorf("%w: prefetch at %d, length %d", ErrRange, off, n)
	}
	if n == 0 {
		return nil
	}
	a := access{fs: file.fs, off: off, end: off + n, b: b, prefetch: true}
	_, err := c.run(ctx, &a, off, nil)
	return err
}

// reclaimNow is reclaim for Prefetch, which never waits: a block of
// order, or a smaller one, from free memory or from clean folios one
// eviction pass frees. It reports whether res holds one.
func (c *Cache) reclaimNow(order int, res *reserve) bool {
	c.releaseReserve(res)
	if p, ok := c.buddy.alloc(order); ok {
		*res = reserve{page: p, order: order}
		return true
	}
	c.evict(max(1<<order, c.evictBatch), nil)
	if p, ok := c.buddy.alloc(order); ok {
		*res = reserve{page: p, order: order}
		return true
	}
	return c.allocBelow(order, res)
}

// throttle blocks while dirty bytes are over the limit, unless writeback
// keeps failing (stuck). Throttled writers go on in the order they came
// (throttleWaiter): only the first of them waits for dirty bytes to
// fall, the others for their turn, and a writer that comes while any
// wait waits behind them even if dirty bytes are under the limit just
// then. Every waiter used to wait for dirty bytes to fall, and a writer
// that came back from its last write found them under the limit before
// the woken waiters ran: on bench gc's uniform workload (64 writers, a
// 4 MiB cache near a full device, where dirty data drains only as GC
// frees zones) the two busiest writers did all the writes of every
// 5 ms, and files went unwritten for hundreds of milliseconds while one
// was overwritten again and again (TestThrottleServesWritersInTurn).
func (c *Cache) throttle(ctx context.Context) error {
	if c.dirty.Load() <= c.limit && c.throttledN.Load() == 0 {
		return nil
	}
	c.counters.throttles.Add(1)
	// Writeback that begins and fails from here on, while this writer
	// waits its turn, ends its wait (see stuckSince): the first waiter
	// kicked it for all of them.
	joined := c.wbGen.Load()
	w := c.throttleJoin()
	defer c.throttleLeave(w)
	if err := c.waitFor(ctx, w.turn, &c.counters.throttledNs); err != nil {
		return fmt.Errorf("cache: write throttled at %d dirty bytes: %w", c.dirty.Load(), err)
	}
	if err := c.stuckSince(joined); err != nil {
		return fmt.Errorf("cache: write throttled at %d dirty bytes: %w", c.dirty.Load(), err)
	}
	for {
		if err := c.shutDown(); err != nil {
			return fmt.Errorf("cache: write throttled at %d dirty bytes: %w", c.dirty.Load(), err)
		}
		ch := c.events.Wait()
		if c.dirty.Load() <= c.limit {
			return nil
		}
		since := c.wbGen.Load()
		c.kick()
		if err := c.waitFor(ctx, ch, &c.counters.throttledNs); err != nil {
			return fmt.Errorf("cache: write throttled at %d dirty bytes: %w", c.dirty.Load(), err)
		}
		if err := c.stuckSince(since); err != nil {
			return fmt.Errorf("cache: write throttled at %d dirty bytes: %w", c.dirty.Load(), err)
		}
	}
}

// throttleWaiter is a writer in throttle's queue: turn is closed when it
// is first.
type throttleWaiter struct {
	turn chan struct{}
}

// throttleJoin queues a writer at the end of the throttled writers.
func (c *Cache) throttleJoin() *throttleWaiter {
	w := &throttleWaiter{turn: make(chan struct{})}
	c.thrMu.Lock()
	defer c.thrMu.Unlock()
	c.throttled = append(c.throttled, w)
	if len(c.throttled) == 1 {
		close(w.turn)
	}
	c.throttledN.Store(int64(len(c.throttled)))
	return w
}

// throttleLeave takes w out of the queue, passed or given up (its
// context ended, the cache shut, writeback stuck), and gives the next
// writer its turn if w was first.
func (c *Cache) throttleLeave(w *throttleWaiter) {
	c.thrMu.Lock()
	defer c.thrMu.Unlock()
	i := slices.Index(c.throttled, w)
	c.throttled = slices.Delete(c.throttled, i, i+1)
	if i == 0 && len(c.throttled) > 0 {
		close(c.throttled[0].turn)
	}
	c.throttledN.Store(int64(len(c.throttled)))
}

// evictScan bounds one eviction pass over the LRU.
const evictScan = 256

// evictBatch is the fewest pages reclaim frees at once (the kernel's
// SWAP_CLUSTER_MAX), so that small folios do not pay a reclaim pass each;
// small arenas free less, to keep what they can.
const evictBatch = 32

// reclaim gets a block for a folio of order into res: from free memory,
// by evicting clean folios, by settling for a smaller order once eviction
// has freed enough without making a block of this order, or by waiting for
// writeback to make folios clean. With no lock held.
//
// Accesses short of memory reclaim in turn, first come first served
// (memJoin): only the first evicts and waits for memory, the others wait
// for their turn, holding nothing. Each used to reclaim at once: at fio
// randread iodepth 1024 on one file larger than a 16 MiB cache
// (testdata/fio/randread-cases.py q1024) hundreds of misses waited for
// memory together, every free woke them all, and each queued for the
// file's lock to evict under it (evictHeld) — 2,759 s of the 5,118 s
// its goroutines spent blocked in 6 s (zonefold --blockprofile), ahead
// of the hits and misses queued for the same lock. What the turn gets
// is the miss's scratch block, read into without the file's lock
// (takeScratch).
func (c *Cache) reclaim(ctx context.Context, order int, res *reserve) error {
	c.releaseReserve(res)
	if c.memWaitN.Load() == 0 {
		if p, ok := c.buddy.alloc(order); ok {
			*res = reserve{page: p, order: order}
			return nil
		}
	}
	w := c.memJoin()
	defer c.memLeave(w)
	select {
	case <-w.turn:
	default:
		c.memWaitHookCall()
		if err := c.waitFor(ctx, w.turn, &c.counters.allocWaitNs); err != nil {
			return fmt.Errorf("cache: wait for a turn at memory: %w", err)
		}
	}
	return c.reclaimTurn(ctx, order, res)
}

// memWaiter is an access in reclaim's queue: turn gets one token when it
// is first. Waiters are reused (memWaiters), so that an access short of
// memory allocates nothing.
type memWaiter struct {
	turn chan struct{}
}

var memWaiters = sync.Pool{New: func() any { return &memWaiter{turn: make(chan struct{}, 1)} }}

// memJoin queues an access at the end of reclaim's queue.
func (c *Cache) memJoin() *memWaiter {
	w := memWaiters.Get().(*memWaiter)
	c.memMu.Lock()
	defer c.memMu.Unlock()
	c.memQ = append(c.memQ, w)
	if len(c.memQ) == 1 {
		w.turn <- struct{}{}
	}
	c.memWaitN.Store(int64(len(c.memQ)))
	return w
}

// memLeave takes w out of reclaim's queue, served or given up (its
// context ended, the cache shut), and gives the next its turn if w was
// first.
func (c *Cache) memLeave(w *memWaiter) {
	c.memMu.Lock()
	i := slices.Index(c.memQ, w)
	c.memQ = slices.Delete(c.memQ, i, i+1)
	if i == 0 && len(c.memQ) > 0 {
		c.memQ[0].turn <- struct{}{}
	}
	c.memWaitN.Store(int64(len(c.memQ)))
	c.memMu.Unlock()
	select {
	case <-w.turn: // given its turn as it gave up
	default:
	}
	memWaiters.Put(w)
}

// memWaitHookCall tells the test hook, if any, that an access is about
// to wait for memory.
func (c *Cache) memWaitHookCall() {
	if c.memWaitHook != nil {
		c.memWaitHook()
	}
}

// reclaimTurn is reclaim once it is the access's turn.
func (c *Cache) reclaimTurn(ctx context.Context, order int, res *reserve) error {
	evicted, scanned := 0, 0
	for {
		if p, ok := c.buddy.alloc(order); ok {
			*res = reserve{page: p, order: order}
			return nil
		}
		batch := max(1<<order, c.evictBatch)
		if evicted < 2*batch {
			freed, seen, busy := c.evict(batch, nil)
			if freed == 0 && busy != nil {
				// Clean folios exist but their file is locked: wait
				// for a turn at its lock and evict under it.
				freed, seen, _ = c.evictHeld(batch, busy)
			}
			evicted += freed
			scanned += seen
			if freed > 0 {
				continue
			}
			if busy != nil {
				// What the file held was evicted by others meanwhile,
				// or no longer clean; look again rather than sleep.
				runtime.Gosched()
				if err := ctx.Err(); err != nil {
					return fmt.Errorf("cache: wait for memory: %w", err)
				}
				continue
			}
			if scanned < c.lruLength() {
				continue // dirty folios went to the young end: look further
			}
		}
		if c.allocBelow(order, res) {
			return nil
		}
		// Nothing free, nothing clean: writeback must make folios clean.
		ch := c.events.Wait()
		if c.allocBelow(order+1, res) {
			return nil
		}
		// The whole LRU, not one pass of evictScan: a folio made clean
		// before the Wait above (its signal missed) or one a hit had
		// referenced may lie past the first evictScan, and nothing
		// may ever signal again (TestReclaimFindsCleanFolioPastTheFirstScan).
		freed, busy := c.evictSweep()
		if freed == 0 && busy != nil {
			freed, _, _ = c.evictHeld(batch, busy)
		}
		if freed > 0 {
			evicted, scanned = 0, 0
			continue
		}
		if busy != nil {
			// A clean folio whose file was locked (a cache hit holds it
			// for reading): its unlock wakes no one, so sleeping here
			// could be for ever. Try again, as above.
			runtime.Gosched()
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("cache: wait for memory: %w", err)
			}
			continue
		}
		c.counters.allocWaits.Add(1)
		c.memWaitHookCall()
		since := c.wbGen.Load()
		// Counted before the kick, so that the flusher it wakes sees
		// that memory is short (ShortOfMemory).
		c.memSleeping.Add(1)
		c.kick()
		err := c.waitFor(ctx, ch, &c.counters.allocWaitNs)
		c.memSleeping.Add(-1)
		if err != nil {
			return fmt.Errorf("cache: wait for memory: %w", err)
		}
		if err := c.stuckSince(since); err != nil {
			return fmt.Errorf("cache: wait for memory: %w", err)
		}
		evicted, scanned = 0, 0
	}
}

// evictSweep runs eviction passes over the LRU until one frees a folio,
// finds a clean folio's file locked (busy: that file), or has looked at
// every folio twice: once to clear a hit's reference, once more to find
// it unreferenced. It is reclaim's last look before it sleeps.
func (c *Cache) evictSweep() (freed int, busy *fileState) {
	for scanned := 0; scanned < 2*c.lruLength(); {
		freed, seen, busy := c.evict(1, nil)
		if freed > 0 || busy != nil || seen == 0 {
			return freed, busy
		}
		scanned += seen
	}
	return 0, nil
}

// evictHeld is evict with fs's lock taken, waiting for it: for reclaim,
// holding no lock, once an eviction pass found clean folios only under
// fs's lock and could not try-lock it. Where many accesses of one file
// queue for its lock, a try-lock loses every time (a sync.Mutex hands
// itself to its waiters in turn once one has waited long), so every
// access short of memory spun in eviction passes: 1024 reads of 64 KiB
// in flight on one file in a 16 MiB cache went at 18-450 a second, and
// held up every other client of the file. Waiting in the queue gets a
// turn.
func (c *Cache) evictHeld(wantPages int, fs *fileState) (freed, scanned int, busy *fileState) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return c.evict(wantPages, fs)
}

// allocBelow takes the largest free block of an order below order.
func (c *Cache) allocBelow(order int, res *reserve) bool {
	for k := order - 1; k >= 0; k-- {
		if p, ok := c.buddy.alloc(k); ok {
			*res = reserve{page: p, order: k}
			return true
		}
	}
	return false
}

// evict frees clean, idle folios from the LRU's old end until wantPages
// pages are free or a pass of at most evictScan folios ends; folios it
// passes over go to the young end. held, if set, is a file whose lock
// the caller holds exclusively: its folios need no try-lock. It returns
// the pages freed, the folios looked at, and the first file whose clean
// folios were skipped because it was locked (nil: none).
func (c *Cache) evict(wantPages int, held *fileState) (freed, scanned int, busy *fileState) {
	var victims [32]*folio
	n := 0
	c.lruMu.Lock()
	for ; scanned < evictScan && freed < wantPages && n < len(victims) && c.lruHead >= 0; scanned++ {
		f := &c.folios[c.lruHead]
		c.lruUnlinkLocked(f)
		if f.referenced.Load() {
			f.referenced.Store(false)
			c.lruLinkLocked(f)
			continue
		}
		if f.dirtyN.Load() != 0 || f.wbN.Load() != 0 {
			c.lruLinkLocked(f)
			continue
		}
		fs := f.owner
		// The LRU lock is inside file locks: only try.
		if fs != held && !fs.mu.TryLock() {
			if busy == nil {
				busy = fs
			}
			c.lruLinkLocked(f)
			continue
		}
		// Under the file lock a clean folio stays clean: only writers
		// dirty, and BeginWriteback needs the file lock too. The state
		// lock orders this after the last EndWriteback's use of f.
		f.stateMu.Lock()
		idle := f.dirtyN.Load() == 0 && f.wbN.Load() == 0
		f.stateMu.Unlock()
		if !idle {
			if fs != held {
				fs.mu.Unlock()
			}
			c.lruLinkLocked(f)
			continue
		}
		fs.unindex(f)
		if fs != held {
			fs.mu.Unlock()
		}
		victims[n] = f
		n++
		freed += 1 << f.order
	}
	c.lruMu.Unlock()
	for _, f := range victims[:n] {
		c.counters.evictions.Add(1)
		c.counters.evictedBytes.Add(uint64(len(f.mem)))
		c.freeFolio(f)
	}
	return freed, scanned, busy
}

// EvictClean evicts clean folios, oldest first, until at least bytes are
// freed or none is left to evict, and returns the bytes freed. The cache
// evicts by itself when it needs memory; this is for callers that want
// memory back (and for tests).
func (c *Cache) EvictClean(bytes int64) int64 {
	var total int64
	scanned, busyPasses := 0, 0
	for total < bytes && busyPasses < 1000 {
		want := int(min((bytes-total)/pageSize+1, math.MaxInt32))
		freed, seen, busy := c.evict(want, nil)
		total += int64(freed) * pageSize
		scanned += seen
		switch {
		case freed > 0:
			scanned, busyPasses = 0, 0
		case busy != nil:
			busyPasses++
			runtime.Gosched() // a file is locked for a moment
		case scanned >= c.lruLength():
			return total
		}
	}
	return total
}

// takeScratch takes an arena block for reading the run [off, end) of fs
// without the lock, as of fs's gen, and registers the run as a fill; it
// reports whether it did. The block is res's if it is of the run's order
// (res may be nil): the memory an access waited for in reclaim, which
// would otherwise become the folio at once and leave no block to read
// into without the lock (TestMissThatWaitedForMemoryReadsWithoutTheFileLock);
// else one memory can spare without reclaim.
func (c *Cache) takeScratch(pr *preRead, fs *fileState, off, end int64, res *reserve) bool {
	order := 0
	for int64(pageSize)<<order < end-off {
		order++
	}
	var p int32
	ok := false
	if res != nil && res.order == order {
		p, ok = res.page, true
		res.order = -1
	} else {
		p, ok = c.buddy.alloc(order)
	}
	if !ok {
		return false
	}
	*pr = preRead{fs: fs, off: off, end: end, gen: fs.gen, state: preWant, scratch: p, scratchOrder: int8(order)}
	fs.addFill(off, end)
	return true
}

// Miss is a cold read begun with BeginMiss: a whole folio's worth of
// missing blocks, read without the file's lock into an arena block of
// that folio's order, which FinishMiss makes the folio. It is Read's
// gapMiss split in two, for a caller that submits the device read itself
// and finishes it when the read completes (the engine's File.StartRead)
// rather than waiting for it. Keep it in memory that lives as long as
// the read (it holds the block until FinishMiss or AbortMiss).
type Miss struct {
	a access
}

// Range is the folio's range of the file, which the read must fill:
// Mem's bytes are the file's bytes at Range's start.
func (m *Miss) Range() (off, end int64) { return m.a.pre.off, m.a.pre.end }

// Ahead reports whether the miss reads pages past the request
// (BeginMissAhead's fill): a failure of its read is then no reader's
// (the caller reads the request again without the fill, and counts
// only that read's failure).
func (m *Miss) Ahead() bool { return m.a.pre.end > pageUp(m.a.end) }

// BeginMiss begins a read of the file's bytes [off, off+n) if they are
// one whole missing folio's worth, that is, if no folio is at off, the
// folio a read there would make ends where the read does (in blocks),
// no other access is reading those blocks, and an arena block can be
// had free or by evicting clean folios (the file's own, under its lock,
// and others' whose lock is free); it never waits (the file's lock is
// only tried).
// It reports whether it began, and returns the block's memory, which
// the caller fills with the file's bytes of m.Range (through its
// Backing, without any cache lock held), then calls FinishMiss, or
// AbortMiss if the read failed. Until then the range counts as being
// read (fileState.fills): another miss of it waits for this one, and
// readahead skips it.
func (c *Cache) BeginMiss(file File, off int64, n int, m *Miss) ([]byte, bool) {
	return c.BeginMissAhead(file, off, n, 0, m)
}

// BeginMissAhead is BeginMiss for a sequential reader, as ReadAhead is
// Read: the folio is sized as if the read ran to fill (the caller clamps
// fill at EOF), so that one device read fills the cache to fill and the
// reads that follow hit; only [off, off+n) is copied out. Whether the
// miss reads past the request is Miss.Ahead. fill at or below off+n is
// BeginMiss.
func (c *Cache) BeginMissAhead(file File, off int64, n int, fill int64, m *Miss) ([]byte, bool) {
	fs := file.fs
	if fs == nil || n <= 0 || checkIO(off, n) != nil || !fs.mu.TryLock() {
		return nil, false
	}
	defer fs.mu.Unlock()
	if fs.dead {
		return nil, false
	}
	// As readahead's (prefetch), so that a run another access reads is
	// skipped, not waited for: gapMiss then arms no wake-up channel.
	m.a = access{fs: fs, off: off, end: off + int64(n), prefetch: true, fill: fill}
	_, _, _, act := c.gapMiss(fs, off, &m.a, nil)
	m.a.prefetch = false
	if act != gapRead {
		return nil, false
	}
	if m.a.pre.end < m.a.end {
		// The folio ends before the read does: Read's way.
		c.dropScratch(&m.a.pre)
		return nil, false
	}
	return c.scratchMem(&m.a.pre), true
}

// FinishMiss ends a miss whose block the caller filled: if nothing
// changed the file's range since BeginMiss (no write or truncate, no
// Forget, no folio made there), the block becomes the folio, uptodate,
// and the read's bytes are copied into p (len(p) is BeginMiss's n); it
// reports whether it did. If not, the block is given back and p is
// untouched: the caller reads with Read. With wait false the file's lock
// is only tried, and a lock held reports false with the miss still
// held (busy true): the caller finishes it later with wait true, which
// waits for the lock (never for anything else). The miss is ended
// whenever busy is false.
func (c *Cache) FinishMiss(m *Miss, p []byte, wait bool) (done, busy bool) {
	a := &m.a
	fs := a.fs
	if wait {
		fs.mu.Lock()
	} else if !fs.mu.TryLock() {
		return false, true
	}
	defer c.dropScratch(&a.pre)
	defer fs.mu.Unlock()
	if fs.dead {
		return false, false
	}
	a.pre.state = preHave
	f, _, _, act := c.gapMiss(fs, a.pre.off, a, nil)
	if act != gapAdopted {
		return false, false
	}
	c.counters.misses.Add(1)
	copy(p, f.mem[a.off-f.off:a.end-f.off])
	return true, false
}

// AbortMiss ends a miss whose read failed: the block is given back.
func (c *Cache) AbortMiss(m *Miss) { c.dropScratch(&m.a.pre) }
