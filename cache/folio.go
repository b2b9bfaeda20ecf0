package cache

import (
	"sync"
	"sync/atomic"
)

// folio is the descriptor of one folio. Descriptors are preallocated, one
// per arena page, and a folio uses the one of its first page, so making a
// folio allocates nothing.
type folio struct {
	page     int32 // first arena page; fixed
	order    uint8
	nblocks  int // blocks in the folio
	owner    *fileState
	off      int64  // file offset of the first byte
	mem      []byte // the folio's arena memory
	bufIndex uint16 // registered buffer that holds mem

	// stateMu guards state, uptodateN, againN and orphan, and every
	// change of dirtyN and wbN.
	stateMu sync.Mutex
	// state holds the uptodate bits [0, n), dirty bits [n, 2n),
	// writeback bits [2n, 3n) and again bits [3n, 4n) for n = nblocks,
	// packed as the kernel packs them: so one folio's dirty and uptodate
	// bits share words, and reading either needs the lock while
	// EndWriteback may clear the other. An again bit marks a block under
	// writeback that Redirty asked to be written once more: the
	// writeback's end leaves it dirty instead of clean.
	state     []uint64
	uptodateN int
	againN    int // again bits set
	// orphan: dropped by Truncate or Forget while under writeback; the
	// last EndWriteback frees it.
	orphan bool
	// dirtyN and wbN count dirty and under-writeback blocks. They change
	// under stateMu and are read without it as hints: under the owner's
	// file lock neither can grow, so a zero seen there stays zero.
	dirtyN atomic.Int32
	wbN    atomic.Int32
	// allUptodate is the folio-wide flag (the kernel's PG_uptodate): set
	// under stateMu when every block is uptodate, cleared only under the
	// file lock, so a writer holding the file lock can skip the bitmaps.
	allUptodate atomic.Bool

	// referenced is set on use; eviction gives such a folio a second
	// chance.
	referenced atomic.Bool
	// LRU links by first page, -1 at the ends; under Cache.lruMu.
	lruPrev, lruNext int32
	onLRU            bool
}

func (f *folio) end() int64 { return f.off + int64(len(f.mem)) }

func (f *folio) touch() {
	if !f.referenced.Load() {
		f.referenced.Store(true)
	}
}

// newFolio sets up the folio of order at arena page p for fs at off. The
// caller holds fs.mu for writing and inserts it into the index.
func (c *Cache) newFolio(fs *fileState, p int32, order int, off int64) *folio {
	f := &c.folios[p]
	size := int64(pageSize) << order
	start := int64(p) * pageSize
	f.order = uint8(order)
	f.nblocks = c.bpp << order
	f.owner = fs
	f.off = off
	f.mem = c.arena[start : start+size : start+size]
	f.bufIndex = uint16(start / regionBytes)
	// One state word per page; the four bitmaps of a folio need at most
	// 4*bpp <= 32 bits per page, so they fit in the words of its pages.
	f.state = c.words[p : int(p)+(4*f.nblocks+63)/64]
	clear(f.state)
	f.uptodateN = 0
	f.againN = 0
	f.orphan = false
	f.dirtyN.Store(0)
	f.wbN.Store(0)
	f.allUptodate.Store(false)
	f.referenced.Store(false)
	c.counters.folios[order].Add(1)
	c.counters.created[order].Add(1)
	c.lruAdd(f)
	// A new folio is a new eviction candidate: a reclaim that found
	// nothing to evict while this page sat in a reserve sleeps until
	// told (a read leaves nothing for writeback to end and wake it).
	c.events.Signal()
	return f
}

// freeFolio returns a folio's memory. Nothing references it any more: it
// is out of the index and the LRU, with nothing under writeback.
func (c *Cache) freeFolio(f *folio) {
	if c.poison {
		for i := range f.mem {
			f.mem[i] = 0xA5
		}
	}
	order := int(f.order)
	f.owner = nil
	f.mem = nil
	c.counters.folios[order].Add(-1)
	c.buddy.free(f.page, order)
	c.events.Signal()
}

// setUptodate marks blocks [b0, b1) uptodate. Under f.stateMu.
func (f *folio) setUptodate(b0, b1 int) {
	if f.allUptodate.Load() {
		return
	}
	have := countBits(f.state, b0, b1)
	if have == b1-b0 {
		return
	}
	setBits(f.state, b0, b1)
	f.uptodateN += b1 - b0 - have
	if f.uptodateN == f.nblocks {
		f.allUptodate.Store(true)
	}
}

// setDirty marks blocks [b0, b1) dirty and returns how many were clean.
// Under f.stateMu.
func (f *folio) setDirty(b0, b1 int) int {
	n := f.nblocks
	have := countBits(f.state, n+b0, n+b1)
	if have == b1-b0 {
		return 0
	}
	setBits(f.state, n+b0, n+b1)
	f.dirtyN.Add(int32(b1 - b0 - have))
	return b1 - b0 - have
}

// dropAgain clears the again bits of blocks [b0, b1) (their writeback
// failed, or they are cut). Under f.stateMu.
func (f *folio) dropAgain(b0, b1 int) {
	if f.againN == 0 {
		return
	}
	n := f.nblocks
	f.againN -= countBits(f.state, 3*n+b0, 3*n+b1)
	clearBits(f.state, 3*n+b0, 3*n+b1)
}

// writeAgain makes the blocks of [b0, b1) whose again bit is set
// (Redirty, while they were under writeback) dirty again and clears
// those bits, for EndWriteback, which has just cleared the range's dirty
// bits. It returns how many it made dirty. Under f.stateMu.
func (f *folio) writeAgain(b0, b1 int) int {
	if f.againN == 0 {
		return 0
	}
	n := f.nblocks
	made := 0
	for b := nextSet(f.state, 3*n+b0, 3*n+b1); b < 3*n+b1; {
		e := nextClear(f.state, b, 3*n+b1)
		setBits(f.state, b-2*n, e-2*n)
		clearBits(f.state, b, e)
		made += e - b
		b = nextSet(f.state, e, 3*n+b1)
	}
	f.againN -= made
	return made
}

// markWritten records a client write of blocks [b0, b1): uptodate and
// dirty together in one critical section, or — the benchmark baseline —
// in two. It returns how many blocks became dirty.
func (c *Cache) markWritten(f *folio, b0, b1 int) int {
	if c.splitStateLock {
		f.stateMu.Lock()
		f.setUptodate(b0, b1)
		f.stateMu.Unlock()
		f.stateMu.Lock()
		n := f.setDirty(b0, b1)
		f.stateMu.Unlock()
		return n
	}
	f.stateMu.Lock()
	f.setUptodate(b0, b1)
	n := f.setDirty(b0, b1)
	f.stateMu.Unlock()
	return n
}

// underWriteback reports whether any of blocks [b0, b1) is under
// writeback, returning the channel to wait on if so.
func (c *Cache) underWriteback(f *folio, b0, b1 int) <-chan struct{} {
	if f.wbN.Load() == 0 {
		return nil
	}
	ch := c.events.Wait()
	n := f.nblocks
	f.stateMu.Lock()
	busy := nextSet(f.state, 2*n+b0, 2*n+b1) < 2*n+b1
	f.stateMu.Unlock()
	if !busy {
		return nil
	}
	c.counters.stableWaits.Add(1)
	return ch
}

// drop takes a folio out of use for Truncate and Forget: its dirty and
// uptodate state goes, and its memory is freed now or, if part of it is
// in flight, by the last EndWriteback. The caller holds fs.mu for writing
// and has taken f out of the index.
func (c *Cache) drop(fs *fileState, f *folio) {
	c.lruRemove(f)
	n := f.nblocks
	f.stateMu.Lock()
	cleared := int(f.dirtyN.Load())
	clearBits(f.state, 0, 2*n)
	clearBits(f.state, 3*n, 4*n)
	f.againN = 0
	f.dirtyN.Store(0)
	f.uptodateN = 0
	f.allUptodate.Store(false)
	f.orphan = f.wbN.Load() > 0
	orphan := f.orphan
	f.stateMu.Unlock()
	c.subDirty(fs, cleared)
	if cleared > 0 {
		c.endWritebackRun()
	}
	if !orphan {
		c.freeFolio(f)
	}
}

// lruAdd queues f at the LRU's young end.
func (c *Cache) lruAdd(f *folio) {
	c.lruMu.Lock()
	c.lruLinkLocked(f)
	c.lruMu.Unlock()
}

func (c *Cache) lruRemove(f *folio) {
	c.lruMu.Lock()
	c.lruUnlinkLocked(f)
	c.lruMu.Unlock()
}

func (c *Cache) lruLength() int {
	c.lruMu.Lock()
	defer c.lruMu.Unlock()
	return c.lruLen
}

func (c *Cache) lruLinkLocked(f *folio) {
	c.lruLen++
	f.lruPrev, f.lruNext = c.lruTail, -1
	if c.lruTail >= 0 {
		c.folios[c.lruTail].lruNext = f.page
	} else {
		c.lruHead = f.page
	}
	c.lruTail = f.page
	f.onLRU = true
}

func (c *Cache) lruUnlinkLocked(f *folio) {
	if !f.onLRU {
		return
	}
	c.lruLen--
	if f.lruPrev >= 0 {
		c.folios[f.lruPrev].lruNext = f.lruNext
	} else {
		c.lruHead = f.lruNext
	}
	if f.lruNext >= 0 {
		c.folios[f.lruNext].lruPrev = f.lruPrev
	} else {
		c.lruTail = f.lruPrev
	}
	f.onLRU = false
}
