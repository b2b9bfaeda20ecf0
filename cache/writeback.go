package cache

import (
	"context"
	"fmt"
	"math"
	"slices"
)

// Extent is a run of contiguous dirty blocks of one folio, under
// writeback from BeginWriteback until EndWriteback.
type Extent struct {
	Off      int64  // file offset
	Data     []byte // arena memory: stable until EndWriteback
	BufIndex uint16 // registered buffer (index into Regions) holding Data
	folio    *folio
	gen      uint64 // the BeginWriteback that took it (Cache.wbGen)
}

// BeginWriteback takes dirty data of one file, in offset order from where
// the file's last call ran out of budget round to it, as runs of
// contiguous dirty blocks not already under writeback, at most maxBytes in
// all (maxBytes <= 0: no limit), marks them under writeback and appends
// them to dst. Each extent lies within one folio; file-contiguous extents
// are meant to be merged into one I/O by the caller. The data stays dirty
// (and counted in DirtyBytes) until EndWriteback, and writes to it wait.
// Every extent returned must be passed to EndWriteback exactly once.
// Truncate and Forget do not wait for extents in flight: an extent whose
// bytes were cut off meanwhile still ends normally, so the engine must not
// map bytes at or past the file's size as it stands at completion.
func (c *Cache) BeginWriteback(file uint64, maxBytes int64, dst []Extent) []Extent {
	fs := c.file(file)
	if fs == nil {
		return dst
	}
	if maxBytes <= 0 {
		maxBytes = math.MaxInt64
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.dead || fs.dirtyBytes.Load() == 0 {
		return dst
	}
	// Taken with the file's lock held, before any block is: a writer
	// that read wbGen before this knows the extents began after it
	// started waiting (stuckSince).
	gen := c.wbGen.Add(1)
	keys := fs.keys[:0]
	for k := range fs.chunks {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	fs.keys = keys
	if len(keys) == 0 {
		return dst
	}
	// Start where the last call stopped and go once round: a scan from
	// the file's start passed, at every chain, every folio the earlier
	// chains had taken or found clean (random 4 KiB writes over a file
	// larger than the cache: BeginWriteback was a fifth of writeback's
	// CPU, the folio descriptors' cache misses most of it).
	from, taken0 := fs.wbNext, len(dst)
	start, _ := slices.BinarySearch(keys, from>>chunkShift)
	budget := maxBytes >> c.blockShift
	for i := range len(keys) + 1 {
		ck := fs.chunks[keys[(start+i)%len(keys)]]
		for _, f := range ck.folios {
			// The cursor's chunk is visited twice: folios that end past
			// the cursor first, the others last.
			if first, last := i == 0, i == len(keys); first && f.end() <= from || last && f.end() > from {
				continue
			}
			if f.dirtyN.Load() == 0 {
				continue
			}
			dst, budget = c.takeDirty(fs, f, gen, budget, dst)
			if budget == 0 {
				// The next call starts after what this one took last
				// (within f if f holds more).
				if len(dst) > taken0 {
					last := dst[len(dst)-1]
					fs.wbNext = last.Off + int64(len(last.Data))
				}
				return dst
			}
		}
	}
	fs.wbNext = 0
	return dst
}

// takeDirty marks the runs of dirty blocks of f that are not yet under
// writeback, up to budget blocks, and appends them as extents.
func (c *Cache) takeDirty(fs *fileState, f *folio, gen uint64, budget int64, dst []Extent) ([]Extent, int64) {
	n := f.nblocks
	taken := 0
	f.stateMu.Lock()
	for b := 0; b < n && budget > 0; {
		d := nextSet(f.state, n+b, 2*n) - n // next dirty block
		if d == n {
			break
		}
		if bitSet(f.state, 2*n+d) { // already in flight: skip past it
			b = nextClear(f.state, 2*n+d, 3*n) - 2*n
			continue
		}
		e := min(nextClear(f.state, n+d, 2*n)-n, nextSet(f.state, 2*n+d, 3*n)-2*n)
		e = min(e, d+int(min(budget, int64(n))))
		setBits(f.state, 2*n+d, 2*n+e)
		f.wbN.Add(int32(e - d))
		taken += e - d
		budget -= int64(e - d)
		dst = append(dst, Extent{
			Off:      f.off + int64(d)<<c.blockShift,
			Data:     f.mem[d<<c.blockShift : e<<c.blockShift],
			BufIndex: f.bufIndex,
			folio:    f,
			gen:      gen,
		})
		c.counters.wbExtents.Add(1)
		b = e
	}
	f.stateMu.Unlock()
	if taken > 0 {
		fs.wbBlocks.Add(int64(taken))
		c.counters.wbBytes.Add(uint64(taken) << c.blockShift)
	}
	return dst, budget
}

// testHookEndWritebackCounts, if set (by tests only), runs in
// EndWriteback between its updates of the dirty count and of the file's
// blocks in flight.
var testHookEndWritebackCounts func(*fileState)

// EndWriteback ends the writeback of extents from BeginWriteback. With a
// nil err their blocks become clean; with an error they stay dirty, to be
// written again later — never dropped. It takes no file lock, so writers
// waiting on those blocks cannot hold it up. Call it from the flusher, not
// from a uring Completion: it may wait briefly for state locks, and
// Complete must not block.
func (c *Cache) EndWriteback(exts []Extent, err error) {
	var gen uint64 // the latest BeginWriteback of exts
	for i := range exts {
		e := &exts[i]
		f := e.folio
		if f == nil {
			continue // ended already
		}
		e.folio = nil
		gen = max(gen, e.gen)
		n := f.nblocks
		b0 := int(e.Off-f.off) >> c.blockShift
		b1 := b0 + len(e.Data)>>c.blockShift
		f.stateMu.Lock()
		fs := f.owner
		inFlight := countBits(f.state, 2*n+b0, 2*n+b1)
		clearBits(f.state, 2*n+b0, 2*n+b1)
		f.wbN.Add(-int32(inFlight))
		cleaned := 0
		if err == nil {
			cleaned = countBits(f.state, n+b0, n+b1)
			clearBits(f.state, n+b0, n+b1)
			// Blocks Redirty marked while they were in flight stay
			// dirty: the copy this writeback made may be the one lost.
			cleaned -= f.writeAgain(b0, b1)
			f.dirtyN.Add(-int32(cleaned))
		} else {
			// Dirty still: they go out again anyway.
			f.dropAgain(b0, b1)
		}
		free := f.orphan && f.wbN.Load() == 0
		f.stateMu.Unlock()
		// The dirty count first: once the file has no blocks in flight
		// its writeback has ended (WaitWriteback, an fsync), and what it
		// cleaned must be out of the dirty count by then, or admission
		// counts those bytes twice, placed and dirty
		// (TestWritebackEndsAfterItsBlocksAreClean).
		c.subDirty(fs, cleaned)
		if testHookEndWritebackCounts != nil {
			testHookEndWritebackCounts(fs)
		}
		fs.wbBlocks.Add(-int64(inFlight))
		if err != nil {
			c.counters.wbErrors.Add(1)
		}
		if free {
			c.freeFolio(f)
		}
	}
	switch {
	case err != nil:
		c.noteWritebackFailure(err, gen)
	case len(exts) > 0:
		c.endWritebackRun()
	}
	c.events.Signal()
}

// WaitWriteback waits until none of the file's data is under writeback.
func (c *Cache) WaitWriteback(ctx context.Context, file uint64) error {
	for {
		fs := c.file(file)
		if fs == nil || fs.wbBlocks.Load() == 0 {
			return nil
		}
		ch := c.events.Wait()
		if fs.wbBlocks.Load() == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("cache: wait for writeback of file %d: %w", file, ctx.Err())
		}
	}
}

// Truncate drops what the cache holds of the file at and past size: folios
// wholly past it go (dirty or not; those in flight are freed when their
// writeback ends), blocks of the folio that straddles size stop being
// uptodate or dirty, and the rest of the block that holds size is zeroed if
// it is uptodate — waiting, if that block is in flight, for its writeback.
// A block that is not uptodate is left so, never zeroed into uptodate.
func (c *Cache) Truncate(file uint64, size int64) {
	size = max(size, 0)
	fs := c.file(file)
	if fs == nil {
		return
	}
	for {
		fs.mu.Lock()
		if fs.dead {
			fs.mu.Unlock()
			return
		}
		ch := c.truncateLocked(fs, size)
		fs.mu.Unlock()
		if ch == nil {
			return
		}
		<-ch
	}
}

// truncateLocked returns a channel to wait on if the block that holds size
// is in flight. Under fs.mu held for writing.
func (c *Cache) truncateLocked(fs *fileState, size int64) <-chan struct{} {
	fs.gen++
	for key, ck := range fs.chunks {
		if (key+1)<<chunkShift <= size {
			continue
		}
		for i := len(ck.folios) - 1; i >= 0; i-- {
			f := ck.folios[i]
			if f.end() <= size {
				break
			}
			if f.off < size {
				if ch := c.truncateFolio(fs, f, int(size-f.off)); ch != nil {
					return ch
				}
				break
			}
			ck.removeAt(i)
			c.drop(fs, f)
		}
		fs.dropChunkIfEmpty(ck)
	}
	return nil
}

// truncateFolio cuts f at byte rel of it.
func (c *Cache) truncateFolio(fs *fileState, f *folio, rel int) <-chan struct{} {
	n := f.nblocks
	past := (rel + c.blockMask) >> c.blockShift // first block wholly past size
	var ch <-chan struct{}
	if f.wbN.Load() != 0 {
		ch = c.events.Wait()
	}
	f.stateMu.Lock()
	cleared := countBits(f.state, n+past, 2*n)
	clearBits(f.state, n+past, 2*n)
	f.dirtyN.Add(-int32(cleared))
	f.dropAgain(past, n)
	if up := countBits(f.state, past, n); up > 0 {
		clearBits(f.state, past, n)
		f.uptodateN -= up
		f.allUptodate.Store(false)
	}
	partial := rel&c.blockMask != 0
	zero := partial && bitSet(f.state, rel>>c.blockShift)
	inFlight := zero && bitSet(f.state, 2*n+rel>>c.blockShift)
	f.stateMu.Unlock()
	c.subDirty(fs, cleared)
	if cleared > 0 {
		c.endWritebackRun()
	}
	if inFlight {
		c.counters.stableWaits.Add(1)
		return ch
	}
	if zero {
		clear(f.mem[rel : past<<c.blockShift])
	}
	return nil
}

// Forget drops everything the cache holds of a removed file, dirty data
// included. Folios in flight are freed when their writeback ends.
func (c *Cache) Forget(file uint64) {
	sh := c.shard(file)
	sh.mu.Lock()
	fs := sh.m[file]
	delete(sh.m, file)
	sh.mu.Unlock()
	if fs == nil {
		return
	}
	fs.mu.Lock()
	fs.dead = true
	for key, ck := range fs.chunks {
		for _, f := range ck.folios {
			c.drop(fs, f)
		}
		ck.reset()
		delete(fs.chunks, key)
		chunkPool.Put(ck)
	}
	fs.last = nil
	fs.mu.Unlock()
}

// Redirty marks dirty again the blocks of file in [off, end) that the
// cache holds uptodate and clean, so that writeback writes them again:
// the engine's copy of them on the device is gone (a zone gone offline)
// while the cache still holds the file's bytes. Blocks not cached, or
// dirty already and not under writeback, are left as they are. The
// bytes do not change, so no writeback in flight is waited for: a block
// under writeback is marked to go out again after it (its again bit:
// the writeback's end leaves it dirty), since the copy that writeback
// made may be the one lost — the engine maps an append before its
// flush ends the writeback. It returns the bytes it made dirty or
// marked so.
func (c *Cache) Redirty(file uint64, off, end int64) int64 {
	fs := c.file(file)
	if fs == nil || off >= end {
		return 0
	}
	n, kick := 0, false
	fs.mu.Lock()
	if !fs.dead {
		for key := off >> chunkShift; key<<chunkShift < end; key++ {
			ck := fs.chunk(key)
			if ck == nil {
				continue
			}
			for _, f := range ck.folios {
				lo, hi := max(off, f.off), min(end, f.end())
				if lo >= hi {
					continue
				}
				b0, b1 := c.blocks(int(lo-f.off), int(hi-f.off))
				made, again := 0, 0
				f.stateMu.Lock()
				for b := b0; b < b1; b++ {
					switch nb := f.nblocks; {
					case !bitSet(f.state, b):
					case bitSet(f.state, 2*nb+b) && bitSet(f.state, nb+b):
						if !bitSet(f.state, 3*nb+b) {
							setBits(f.state, 3*nb+b, 3*nb+b+1)
							f.againN++
							again++
						}
					default:
						made += f.setDirty(b, b+1)
					}
				}
				f.stateMu.Unlock()
				if made > 0 && c.addDirty(fs, made) {
					kick = true
				}
				n += made + again
			}
		}
	}
	fs.mu.Unlock()
	if kick {
		c.kick()
	}
	return int64(n) << c.blockShift
}
