package cache

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// fileShards spreads the file table's lock: lookups of different files
// rarely share a lock word.
const fileShards = 64

type fileShard struct {
	mu sync.RWMutex
	m  map[uint64]*fileState
	_  [40]byte // keep shards on separate cache lines
}

// fileState is one file's part of the cache.
type fileState struct {
	id uint64
	// mu guards chunks, last, dead and keys, and the bytes of the file's
	// folios: shared by readers of cached data, exclusive for changes.
	mu     sync.RWMutex
	chunks map[int64]*chunk
	// last is the chunk a writer used last: sequential writers skip the
	// map. Set only with mu held for writing.
	last *chunk
	dead bool    // forgotten: an access holding it ends (ErrForgotten)
	keys []int64 // BeginWriteback's scratch
	// wbNext is where BeginWriteback's next scan starts (a file offset;
	// under mu held for writing): where the last one ran out of budget,
	// as the kernel's writeback_index. Each call goes once round the file
	// from there, so nothing dirty is missed.
	wbNext int64
	// gen counts changes of the file's bytes in the cache (writes,
	// truncates; under mu held for writing): a miss read through
	// Backing without the lock (preRead) goes into the cache only if
	// gen did not move meanwhile.
	gen uint64

	// fillMu guards fills: the runs of blocks misses are reading through
	// Backing without mu (preRead). A miss of blocks in one of them
	// waits for it rather than read them from the device again, as the
	// kernel's readers wait on a folio locked for read. A leaf lock.
	fillMu sync.Mutex
	fills  []fillRun

	dirtyBytes atomic.Int64
	wbBlocks   atomic.Int64 // blocks under writeback

	// The dirty list, oldest-dirtied first; under Cache.dirtyMu.
	dirtyPrev, dirtyNext *fileState
	inDirty              bool
	dirtySince           time.Time
}

// chunk indexes the folios of one 2 MiB-aligned range of a file. Folios
// never cross chunks; a chunk holds at most 512 of them.
//
// The search reads spans, not the folios: a folio descriptor lives in an
// array of one per arena page (tens of MiB for a large cache), so a
// binary search that loaded each probe's descriptor took a cache miss per
// step — the largest cost of a random small write, more so next to other
// processes (fio) that evict the descriptors. spans packs each folio's
// page range within the chunk into 4 bytes, so the whole search stays in
// a few cache lines of one small array and one descriptor is loaded.
type chunk struct {
	key    int64    // file offset >> chunkShift
	folios []*folio // sorted by offset, non-overlapping
	spans  []uint32 // spans[i] is folios[i]'s page range: see span
}

// span packs the pages [p0, p1) of a chunk (0 <= p0 < p1 <= 512): p1 in
// the high half, so that spans sort by end as folios sort by offset.
func span(p0, p1 int) uint32 { return uint32(p1)<<16 | uint32(p0) }

// spanOf is f's span within its chunk.
func spanOf(f *folio) uint32 {
	p0 := int(f.off&(chunkSize-1)) >> pageShift
	return span(p0, p0+1<<f.order)
}

var chunkPool = sync.Pool{New: func() any { return new(chunk) }}

// find returns the index of the first folio that ends after pos, and that
// folio if it covers pos.
func (ck *chunk) find(pos int64) (int, *folio) {
	// Folios start and end on pages: one ends after pos if it ends after
	// pos's page, and covers pos if it starts at or before that page.
	p := uint32(pos&(chunkSize-1)) >> pageShift
	lo, hi := 0, len(ck.spans)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if ck.spans[m]>>16 <= p {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(ck.spans) && ck.spans[lo]&0xffff <= p {
		return lo, ck.folios[lo]
	}
	return lo, nil
}

// nextStart is where the folio at index i starts, or the chunk's end.
func (ck *chunk) nextStart(i int) int64 {
	if i < len(ck.spans) {
		return ck.key<<chunkShift + int64(ck.spans[i]&0xffff)<<pageShift
	}
	return (ck.key + 1) << chunkShift
}

func (ck *chunk) insert(i int, f *folio) {
	ck.folios = slices.Insert(ck.folios, i, f)
	ck.spans = slices.Insert(ck.spans, i, spanOf(f))
}

func (ck *chunk) removeAt(i int) {
	ck.folios = slices.Delete(ck.folios, i, i+1) // clears the freed tail slot
	ck.spans = slices.Delete(ck.spans, i, i+1)
}

// reset empties the chunk, keeping its storage.
func (ck *chunk) reset() {
	clear(ck.folios)
	ck.folios = ck.folios[:0]
	ck.spans = ck.spans[:0]
}

// chunk returns the chunk with key, or nil. Under fs.mu.
func (fs *fileState) chunk(key int64) *chunk {
	if fs.last != nil && fs.last.key == key {
		return fs.last
	}
	return fs.chunks[key]
}

// chunkFor returns the chunk with key, making it if need be. Under fs.mu
// held for writing.
func (fs *fileState) chunkFor(key int64) *chunk {
	ck := fs.chunk(key)
	if ck == nil {
		ck = chunkPool.Get().(*chunk)
		ck.key = key
		fs.chunks[key] = ck
	}
	fs.last = ck
	return ck
}

// dropChunkIfEmpty recycles an empty chunk. Under fs.mu held for writing.
func (fs *fileState) dropChunkIfEmpty(ck *chunk) {
	if len(ck.folios) > 0 {
		return
	}
	delete(fs.chunks, ck.key)
	if fs.last == ck {
		fs.last = nil
	}
	chunkPool.Put(ck)
}

// unindex takes f out of its file's index. Under fs.mu held for writing.
func (fs *fileState) unindex(f *folio) {
	ck := fs.chunk(f.off >> chunkShift)
	i, g := ck.find(f.off)
	if g != f {
		panic("cache: folio missing from its file's index") // an internal invariant, not input
	}
	ck.removeAt(i)
	fs.dropChunkIfEmpty(ck)
}

func (c *Cache) shard(id uint64) *fileShard {
	return &c.shards[(id*0x9E3779B97F4A7C15)>>58]
}

// file returns the file's state, or nil if the cache has none.
func (c *Cache) file(id uint64) *fileState {
	sh := c.shard(id)
	sh.mu.RLock()
	fs := sh.m[id]
	sh.mu.RUnlock()
	return fs
}

// File is a file's state in the cache, as the accesses of the file hold
// it: Read, Write and Prefetch go through it and never look the file up by
// id. Forget makes it dead for good: an access through it then ends with
// ErrForgotten and leaves nothing cached, so an access racing the file's
// removal cannot make the removed file's state anew. The zero File is no
// file (its accesses fail).
type File struct{ fs *fileState }

// File returns the file's state in the cache, making it if need be. A
// caller that Forgets files gets a file's File once, ordered with the
// file's removal (under the lock that marks it removed), and keeps it: a
// File got after the file's Forget is a new, live state for a removed
// file, which only another Forget would free.
func (c *Cache) File(id uint64) File { return File{c.fileOrNew(id)} }

// ID is the file's id (0 for the zero File).
func (f File) ID() uint64 {
	if f.fs == nil {
		return 0
	}
	return f.fs.id
}

// fileOrNew returns the file's state, making it if need be.
func (c *Cache) fileOrNew(id uint64) *fileState {
	if fs := c.file(id); fs != nil {
		return fs
	}
	sh := c.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	fs := sh.m[id]
	if fs == nil {
		fs = &fileState{id: id, chunks: make(map[int64]*chunk)}
		sh.m[id] = fs
	}
	return fs
}

// addDirty accounts n newly dirty blocks of fs and reports whether dirty
// bytes just rose past the background threshold.
func (c *Cache) addDirty(fs *fileState, n int) bool {
	bytes := int64(n) << c.blockShift
	if fs.dirtyBytes.Add(bytes) == bytes {
		c.dirtyListUpdate(fs)
	}
	after := c.dirty.Add(bytes)
	return after >= c.background && after-bytes < c.background
}

// subDirty accounts n dirty blocks of fs that became clean or were dropped.
func (c *Cache) subDirty(fs *fileState, n int) {
	if n == 0 {
		return
	}
	bytes := int64(n) << c.blockShift
	if fs.dirtyBytes.Add(-bytes) == 0 {
		c.dirtyListUpdate(fs)
	}
	c.dirty.Add(-bytes)
}

// dirtyListUpdate puts fs on or takes it off the dirty list to match its
// dirty bytes. Deciding under the lock from the current count makes racing
// updates settle on the right answer, whichever runs last.
func (c *Cache) dirtyListUpdate(fs *fileState) {
	c.dirtyMu.Lock()
	defer c.dirtyMu.Unlock()
	dirty := fs.dirtyBytes.Load() > 0
	switch {
	case dirty && !fs.inDirty:
		fs.dirtySince = time.Now()
		fs.dirtyPrev, fs.dirtyNext = c.dirtyTail, nil
		if c.dirtyTail != nil {
			c.dirtyTail.dirtyNext = fs
		} else {
			c.dirtyHead = fs
		}
		c.dirtyTail = fs
		fs.inDirty = true
		c.dirtyFiles.Add(1)
	case !dirty && fs.inDirty:
		if fs.dirtyPrev != nil {
			fs.dirtyPrev.dirtyNext = fs.dirtyNext
		} else {
			c.dirtyHead = fs.dirtyNext
		}
		if fs.dirtyNext != nil {
			fs.dirtyNext.dirtyPrev = fs.dirtyPrev
		} else {
			c.dirtyTail = fs.dirtyPrev
		}
		fs.dirtyPrev, fs.dirtyNext = nil, nil
		fs.inDirty = false
		c.dirtyFiles.Add(-1)
	}
}

// DirtyFiles appends the ids of files with dirty data to dst, oldest
// dirtied first (a file's age counts from when it went from clean to
// dirty), for expiry-driven writeback.
func (c *Cache) DirtyFiles(dst []uint64) []uint64 {
	c.dirtyMu.Lock()
	defer c.dirtyMu.Unlock()
	for fs := c.dirtyHead; fs != nil; fs = fs.dirtyNext {
		dst = append(dst, fs.id)
	}
	return dst
}

// DirtySince returns when the file last went from clean to dirty, and
// false if it has no dirty data.
func (c *Cache) DirtySince(file uint64) (time.Time, bool) {
	fs := c.file(file)
	if fs == nil {
		return time.Time{}, false
	}
	c.dirtyMu.Lock()
	defer c.dirtyMu.Unlock()
	return fs.dirtySince, fs.inDirty
}

// DirtyIdle returns the file's dirty bytes not under writeback: what a
// BeginWriteback of it would take, without a budget. Two counters read
// apart: a hint (writeback's fill), not exact while writeback ends.
func (c *Cache) DirtyIdle(file uint64) int64 {
	fs := c.file(file)
	if fs == nil {
		return 0
	}
	return fs.dirtyBytes.Load() - fs.wbBlocks.Load()<<c.blockShift
}

// fillRun is a file range [off, end) being read through Backing.
type fillRun struct{ off, end int64 }

func (fs *fileState) addFill(off, end int64) {
	fs.fillMu.Lock()
	fs.fills = append(fs.fills, fillRun{off, end})
	fs.fillMu.Unlock()
}

func (fs *fileState) removeFill(off, end int64) {
	fs.fillMu.Lock()
	for i, r := range fs.fills {
		if r.off == off && r.end == end {
			last := len(fs.fills) - 1
			fs.fills[i] = fs.fills[last]
			fs.fills = fs.fills[:last]
			break
		}
	}
	fs.fillMu.Unlock()
}

// filling reports whether some of [off, end) is being read through
// Backing.
func (fs *fileState) filling(off, end int64) bool {
	fs.fillMu.Lock()
	defer fs.fillMu.Unlock()
	for _, r := range fs.fills {
		if r.off < end && off < r.end {
			return true
		}
	}
	return false
}
