// Package cache is zonefold's large-folio write-back cache: every buffered
// byte lives here between a client's write and its writeback.
//
// It owns the cache memory (one mmap'd arena, faulted in when the cache is
// made so that no access pays for first touch, carved by a buddy allocator
// into folios of 4 KiB to 2 MiB and registered with io_uring as fixed
// buffers), the index from (file, offset) to folio, the per-block state of
// each folio, clean-folio eviction, and dirty accounting with throttling.
// It knows files by uint64 ids and nothing of their sizes: the engine
// clamps at EOF and supplies the stored bytes through Backing. Reads,
// writes and readahead go through a File, a file's state got once
// (Cache.File): an access never looks its file up by id, so one that runs
// after Forget cannot make a removed file's state anew. Writeback
// (package writeback) decides when to flush and calls BeginWriteback and
// EndWriteback; the engine decides where the bytes go.
//
// Folios. A folio caches a naturally aligned, power-of-two range of one
// file. Its order comes from the access that creates it — the largest
// naturally aligned order that the write (or read), rounded out to pages,
// covers, capped by Config.MaxOrder: the bcachefs "order hint". Existing
// folios are never merged or split: an access that spans or partly
// overlaps folios of other orders uses each existing folio for the part it
// covers and creates new folios, no larger than the gaps, for the rest, so
// every byte has exactly one home.
//
// Per-block state. Each folio keeps four bitmaps with one bit per block of
// Config.BlockSize bytes — uptodate, dirty, writeback, and again (Redirty
// asked a block under writeback to go out once more: its writeback's end
// leaves it dirty) — in one run of words guarded by the folio's state
// lock (as the kernel's iomap_folio_state does). A write sets uptodate
// and dirty for its blocks in one critical section (the iomap "block
// size < folio size" series).
//
// Invariants:
//
//   - A block's bytes are returned by Read only if it is uptodate, and a
//     block becomes uptodate only when all of its bytes were written by a
//     client or read from Backing. A partial write of a block that is not
//     uptodate reads that block from Backing first; nothing is ever zeroed
//     and marked uptodate on the cache's own authority, so recycled arena
//     memory (another file's data) can never be exposed.
//   - A Read's miss reads Backing without the file's lock, so one file's
//     misses reach the device together; what it read goes into the cache
//     only if no write or truncate of the file came since it started
//     (fileState.gen), else the blocks are read again under the lock: a
//     block never becomes uptodate with bytes older than a change the
//     cache has seen. A miss where no folio is yet, of exactly the folio
//     that would be made there, is read into an arena block of that
//     folio's order, and that block becomes the folio (gapMiss): the
//     folio is indexed only once uptodate, and its bytes are not copied.
//     BeginMiss and FinishMiss are that same whole-folio miss for a
//     caller that does the Backing read itself, under the same rules
//     (gen, fills, the block adopted only if nothing changed).
//   - One read of a run of blocks through Backing at a time: a miss of
//     blocks another access is reading without the lock (fileState.fills)
//     waits for that read and looks again, unless it holds such a read of
//     its own (so no cycle of waits forms); Prefetch skips them.
//   - Accesses short of memory reclaim in turn, first come first served
//     (reclaim): only the first evicts and waits for memory, the others
//     wait for their turn holding no lock and no memory (a reserve is
//     given back before any other wait). A miss reads the device into the
//     block it waited for, without the file's lock, as it would into
//     free memory: a miss waiting for memory holds up no hit or other
//     miss of its file.
//   - Prefetch (readahead) never waits: not for memory that only
//     writeback can free, not for writeback, not for another's read.
//   - dirty ⊆ uptodate. Dirty blocks are never dropped except by Forget and
//     Truncate: a failed writeback leaves them dirty.
//   - Stable pages: the bytes of a block under writeback never change.
//     A write, read-fill or truncate that would change them waits until
//     EndWriteback.
//   - Only clean folios with nothing under writeback are evicted, in LRU
//     order with a second chance for folios used since they were queued.
//   - Writers block (never fail, unless their context ends or writeback
//     keeps failing, see stuckFailures) while dirty bytes are above
//     Config.DirtyLimit, and while no memory can be had;
//     Config.OnPressure asks the writeback layer for help, always called
//     without any cache lock held.
//   - Nothing on the write or read path allocates once a file's folios
//     exist.
//   - Forget is final: the File it drops is dead, and every access through
//     it ends (ErrForgotten) without making state. Only Cache.File makes
//     a file's state, so state for a forgotten id exists only if its
//     caller asked for it again after Forget.
//
// Use. Clients' data goes through Write and Read with the engine's
// Backing (TryRead: a read of cached bytes that never waits, for a
// caller that must not block; BeginMiss and FinishMiss: Read's miss of a
// whole folio split in two, for a caller that submits the device read
// itself and finishes it as the read completes, never waiting for the
// file's lock unless asked to); the engine's readahead brings what a sequential reader will
// want next in with Prefetch.
// The writeback layer picks files with DirtyFiles (oldest first) or
// DirtySince, takes each file's dirty data with BeginWriteback — extents in
// offset order from where the file's last call stopped, round the file
// (the kernel's writeback_index), each with its arena bytes and the
// registered buffer (BufIndex into Regions) that holds them — merges file-contiguous extents
// into appends, and reports each batch with EndWriteback. OnPressure tells
// it when to start; DirtyBytes and BackgroundBytes when to stop. The engine
// calls Truncate and Forget as files shrink or go.
//
// Locks, outermost first: a file's lock (an RWMutex: readers of cached
// data share it; writers, read-fills, BeginWriteback, Truncate, Forget and
// eviction hold it exclusively), then the LRU lock, the dirty-list lock and
// a folio's state lock, then the buddy allocator's lock; a file's fillMu is a
// leaf, and so are the file table's shard locks (File, Forget) and
// thrMu (the throttled writers' queue, taken with no other cache lock held)
// and memMu (reclaim's queue of accesses short of memory, likewise). EndWriteback takes
// only state locks (and wbMu, a leaf, for the run of writeback
// failures), like the kernel's I/O completion, which is why the
// bitmaps need a lock of their own. Eviction runs LRU-first and so only
// try-locks files (but the one whose lock its caller holds for writing:
// reclaim's evictHeld, a whole-folio miss short of a block, gapMiss);
// so do TryRead, BeginMiss and FinishMiss without wait
// (callers that must not block: a connection's reader, the ring's
// reaper), and FinishMiss with wait takes the file's lock holding none. WriteThen's callback runs under the file's lock and
// takes no cache lock (the engine's file lock only).
package cache

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/internal/wake"
)

// Backing is the stored data of files, as the engine sees it.
type Backing interface {
	// ReadBacking fills p with the file's bytes at off from storage.
	// off, len(p) and p's address are multiples of the block size (a
	// device opened O_DIRECT needs all three).
	// Never-written bytes, and bytes at or past a size the file was
	// truncated to since they were last written, read as zeros; a file
	// storage no longer has (removed) is an error, not zeros. A Read's
	// miss calls it without cache locks (concurrently with other misses
	// of the file, see preRead); a miss whose read raced a change of
	// the file, and a partial write's fill, call it with the file's cache
	// lock held, so it must not call the cache for the same file, nor
	// wait for a lock that is held while the cache is called (the
	// engine's lock order, engine/doc.go, keeps its namespace lock out of
	// ReadBacking for this reason).
	ReadBacking(file uint64, off int64, p []byte) error
}

// AheadBacking is a Backing that can read bytes nobody asked for yet
// without counting a failure as a failed read: readahead's (Prefetch)
// and a fill past an access (ReadAhead's, BeginMissAhead's). Such a
// failure is no reader's: a fill that fails is read again without the
// fill, and only that read's failure is the reader's, counted once (it
// counted twice, fill and read again, for one failed read). The cache
// calls ReadBackingAhead for those reads if b implements it, else
// ReadBacking.
type AheadBacking interface {
	Backing
	// ReadBackingAhead is ReadBacking for bytes read ahead: the same
	// bytes, the same errors, but a failure is not counted (or logged)
	// as a read's.
	ReadBackingAhead(file uint64, off int64, p []byte) error
}

// Config configures a cache.
type Config struct {
	// Bytes is the arena size; it is rounded down to 4 KiB. All of it is
	// resident from New on.
	Bytes int64
	// MaxOrder caps the order hint: folios are at most 4 KiB << MaxOrder
	// (0..9). 0 makes every folio 4 KiB, the baseline without large folios.
	MaxOrder int
	// DirtyLimit: writers block above this many dirty bytes until
	// writeback brings them down. Default Bytes/2.
	DirtyLimit int64
	// BackgroundDirty is where OnPressure is called as dirty bytes rise
	// past it. Default DirtyLimit/2.
	BackgroundDirty int64
	// BlockSize is the granularity of the per-block state: 512, 1024,
	// 2048 or 4096 (the default).
	BlockSize int
	// OnPressure is called, without blocking and without cache locks
	// held, when dirty bytes rise past BackgroundDirty and whenever a
	// writer is about to wait for dirty bytes to fall or for memory. The
	// writeback layer kicks its flusher, which should flush something
	// even below the background threshold when memory is short.
	OnPressure func()
}

// ErrRange is returned for a negative offset or an offset+length overflow.
var ErrRange = errors.New("cache: offset out of range")

// errNoFile is an access through the zero File.
var errNoFile = errors.New("cache: an access through the zero File (not from Cache.File)")

// ErrForgotten ends an access through a File that Forget dropped (the
// file was removed), before it or while it ran: going on would cache the
// removed file's bytes, holding memory that no Forget would ever free.
var ErrForgotten = fmt.Errorf("cache: the file was removed during the access: %w", iofs.ErrNotExist)

// Cache is the write-back cache. All methods are safe for concurrent use.
type Cache struct {
	cfg Config
	// splitStateLock sets uptodate and dirty in two critical sections
	// instead of one: the baseline of the state-lock benchmark, set only
	// through internal/cachehook.
	splitStateLock bool
	// memWaitHook, if set, is called as an access is about to wait for
	// memory, with no cache lock held (internal/cachehook, for tests).
	memWaitHook func()
	maxOrder    int
	evictBatch  int   // pages reclaim frees at least
	limit       int64 // DirtyLimit
	background  int64 // BackgroundDirty
	blockShift  uint
	blockMask   int
	bpp         int // blocks per page

	arena   []byte
	regions [][]byte
	buddy   *buddy
	folios  []folio  // by first arena page; only heads are live
	words   []uint64 // folio state: one word per arena page, see folio.state

	shards [fileShards]fileShard

	lruMu            sync.Mutex
	lruHead, lruTail int32
	lruLen           int

	dirtyMu              sync.Mutex
	dirtyHead, dirtyTail *fileState
	dirty                atomic.Int64 // dirty bytes
	dirtyFiles           atomic.Int64 // files on the dirty list
	events               wake.Wake    // memory freed, a folio made (evictable), writeback ended
	// throttled queues the writers waiting in throttle, first come
	// first served (see throttle); throttledN is its length, read
	// without thrMu by throttle's fast path. thrMu is a leaf.
	thrMu      sync.Mutex
	throttled  []*throttleWaiter
	throttledN atomic.Int64
	// memQ queues the accesses waiting in reclaim, first come first
	// served (see reclaim); memWaitN is its length, read without memMu
	// by reclaim's fast path. memMu is a leaf.
	memMu    sync.Mutex
	memQ     []*memWaiter
	memWaitN atomic.Int64
	// memSleeping counts the reclaims asleep until writeback makes a
	// folio clean (nothing free, nothing clean): ShortOfMemory.
	memSleeping atomic.Int64
	// shut is closed by Shut, with shutErr set first: waits for memory
	// and for dirty data to drain return shutErr from then on.
	shut     chan struct{}
	shutOnce sync.Once
	shutErr  error
	counters counters
	poison   bool // tests: fill freed folios so stale bytes show
	// The run of writeback failures (see stuckSince), under wbMu (a
	// leaf): wbFailing is how many EndWritebacks in a row failed (read
	// without the lock too), wbFailSince when the first of them did and
	// wbLastFail the latest (unix ns), wbLastErr the latest error.
	// wbGen counts BeginWriteback calls: each extent carries the count
	// its call took (Extent.gen), and wbFailGen is the largest of those
	// among the run's failures (read without the lock too), so a waiter
	// can tell writeback that began after it started waiting from older
	// writeback. now is the clock (unix ns; tests may replace it before
	// the cache is used).
	wbMu        sync.Mutex
	wbFailing   atomic.Int64
	wbFailSince int64
	wbLastFail  int64
	wbLastErr   error
	wbGen       atomic.Uint64
	wbFailGen   atomic.Uint64
	now         func() int64
}

// Writeback that keeps failing ends the waits that only it could end.
// Failed writeback leaves data dirty (it is never dropped), so a device
// that fails every write (or has no room left) never brings dirty bytes
// down or makes a folio clean: a throttled writer, or a writer or reader
// waiting for memory with nothing clean to evict, would wait for as long
// as the device fails. Once writeback has failed stuckFailures times in a
// row, over at least stuckAfter, with no success between, none more
// than stuckAfter after the one before, and no dirty data dropped since
// (Forget, Truncate: the data that failed may be gone), those waits
// fail with the latest writeback error instead — but only once
// writeback begun after the wait began (the one its kick asked for) has
// failed too (stuckSince): a writer
// that gave up without asking would leave a device that works again
// unnoticed until the flusher's next tick, and would be refused on the
// strength of old failures. Both bounds, because one failed append (a
// zone lost to a write error) fails every flush in flight to it at once
// and the retries succeed.
const (
	stuckFailures = 16
	stuckAfter    = time.Second
)

// stuckSince returns the writeback error that ends a wait for writeback
// to clean data (see stuckFailures), or nil: writeback that began after
// the wait did (its BeginWriteback took a generation above since, the
// wbGen the waiter read as it started waiting) has failed, in a run of
// failures that was failing long and is now long enough. Failures of
// writeback begun earlier do not count for the waiter: they may be of
// I/O submitted before the device healed, still ending after it (a
// zone's appends in flight when one failed), and a writer that started
// after the heal was refused on their strength with writeback already
// succeeding again (TestH42iOldWritebackFailureDoesNotRefuseNewWaiter).
func (c *Cache) stuckSince(since uint64) error {
	if c.wbFailGen.Load() <= since {
		return nil
	}
	c.wbMu.Lock()
	defer c.wbMu.Unlock()
	n := c.wbFailing.Load()
	if c.wbFailGen.Load() <= since || n < stuckFailures || time.Duration(c.wbLastFail-c.wbFailSince) < stuckAfter {
		return nil
	}
	return fmt.Errorf("writeback keeps failing: %w", c.wbLastErr)
}

// noteWritebackFailure counts a failed EndWriteback, of writeback begun
// at generations up to gen, in the run of failures. One that comes more
// than stuckAfter after the run's last failure starts a new run:
// nothing was failing in between.
func (c *Cache) noteWritebackFailure(err error, gen uint64) {
	c.wbMu.Lock()
	now := c.now()
	if c.wbFailing.Load() == 0 || time.Duration(now-c.wbLastFail) > stuckAfter {
		c.wbFailing.Store(0)
		c.wbFailGen.Store(0)
		c.wbFailSince = now
	}
	c.wbFailing.Add(1)
	if gen > c.wbFailGen.Load() {
		c.wbFailGen.Store(gen)
	}
	c.wbLastFail, c.wbLastErr = now, err
	c.wbMu.Unlock()
}

// endWritebackRun ends the run of writeback failures: writeback
// succeeded, or dirty data was dropped (Forget, Truncate), perhaps the
// data that failed, which nothing will retry.
func (c *Cache) endWritebackRun() {
	if c.wbFailing.Load() == 0 {
		return
	}
	c.wbMu.Lock()
	c.wbFailing.Store(0)
	c.wbFailGen.Store(0)
	c.wbMu.Unlock()
}

// New maps the arena and returns an empty cache.
func New(cfg Config) (*Cache, error) {
	if cfg.BlockSize == 0 {
		cfg.BlockSize = 4096
	}
	shift := -1
	for s := 9; s <= pageShift; s++ {
		if cfg.BlockSize == 1<<s {
			shift = s
		}
	}
	if shift < 0 {
		return nil, fmt.Errorf("cache: block size %d: want 512, 1024, 2048 or 4096", cfg.BlockSize)
	}
	if cfg.MaxOrder < 0 || cfg.MaxOrder > MaxOrder {
		return nil, fmt.Errorf("cache: max order %d: want 0..%d", cfg.MaxOrder, MaxOrder)
	}
	if err := CheckSize(cfg.Bytes); err != nil {
		return nil, err
	}
	bytes := cfg.Bytes &^ (pageSize - 1)
	if cfg.DirtyLimit <= 0 {
		cfg.DirtyLimit = bytes / 2
	}
	if cfg.BackgroundDirty <= 0 || cfg.BackgroundDirty > cfg.DirtyLimit {
		cfg.BackgroundDirty = cfg.DirtyLimit / 2
	}
	mem, err := mapArena(bytes)
	if err != nil {
		return nil, err
	}
	npages := int32(bytes / pageSize)
	c := &Cache{
		cfg:        cfg,
		maxOrder:   cfg.MaxOrder,
		evictBatch: int(min(max(int64(npages)/64, 1), evictBatch)),
		limit:      cfg.DirtyLimit,
		background: cfg.BackgroundDirty,
		blockShift: uint(shift),
		blockMask:  cfg.BlockSize - 1,
		bpp:        pageSize / cfg.BlockSize,
		arena:      mem,
		shut:       make(chan struct{}),
		now:        func() int64 { return time.Now().UnixNano() },
		buddy:      newBuddy(npages),
		folios:     make([]folio, npages),
		words:      make([]uint64, npages),
		lruHead:    -1,
		lruTail:    -1,
	}
	for off := int64(0); off < bytes; off += regionBytes {
		c.regions = append(c.regions, mem[off:min(off+regionBytes, bytes)])
	}
	for i := range c.folios {
		c.folios[i].page = int32(i)
	}
	// Fault the state words in too, as the arena and the descriptors
	// are: left to first touch, each 4 KiB of them faulted in under the
	// first miss that made a folio in its 2 MiB of arena (in a VM, 1-2 us
	// per new folio in a cold-read profile of a fresh daemon).
	for i := 0; i < len(c.words); i += pageSize / 8 {
		c.words[i] = 0
	}
	for i := range c.shards {
		c.shards[i].m = make(map[uint64]*fileState)
	}
	return c, nil
}

// Close unmaps the arena. The cache must be idle: no call in progress, no
// writeback in flight, and its regions unregistered from every ring.
func (c *Cache) Close() error {
	if c.arena == nil {
		return nil
	}
	err := unix.Munmap(c.arena)
	c.arena, c.regions = nil, nil
	if err != nil {
		return fmt.Errorf("cache: unmap arena: %w", err)
	}
	return nil
}

// Regions returns the arena as buffers to register with
// uring.Ring.RegisterBuffers, in order: Extent.BufIndex indexes this slice.
func (c *Cache) Regions() [][]byte { return c.regions }

// BlockSize is the per-block state granularity; writeback extents are
// multiples of it.
func (c *Cache) BlockSize() int { return c.cfg.BlockSize }

// DirtyBytes is the number of dirty bytes (blocks × block size), those
// under writeback included.
func (c *Cache) DirtyBytes() int64 { return c.dirty.Load() }

// Throttling says whether a write that starts now waits for dirty bytes
// to fall (or fails, if writeback keeps failing).
func (c *Cache) Throttling() bool { return c.dirty.Load() > c.limit || c.throttledN.Load() > 0 }

// DirtyFileCount is the number of files with dirty data: the engine
// counts a record header for each when it admits writes.
func (c *Cache) DirtyFileCount() int64 { return c.dirtyFiles.Load() }

// ShortOfMemory reports whether an access is waiting for memory that
// only writeback can give: nothing is free and every folio is dirty,
// under writeback or in use. The flusher then writes back even below
// the background threshold and before expiry (Config.OnPressure): dirty
// data far below the threshold can be spread over every folio (random
// small writes into a large file's folios), and waiting for its expiry
// held every miss for seconds.
func (c *Cache) ShortOfMemory() bool { return c.memSleeping.Load() > 0 }

// BackgroundBytes is the dirty level above which writeback should run.
func (c *Cache) BackgroundBytes() int64 { return c.background }

// Stats are cumulative counters and current levels of a cache.
type Stats struct {
	ArenaBytes  int64 `json:"arena_bytes"`
	CachedBytes int64 `json:"cached_bytes"` // arena bytes held by folios
	DirtyBytes  int64 `json:"dirty_bytes"`
	// Folios is the live folios of each order; FoliosCreated counts every
	// folio ever made, by order.
	Folios        [MaxOrder + 1]int64  `json:"folios"`
	FoliosCreated [MaxOrder + 1]uint64 `json:"folios_created"`
	// Hits and Misses count folio visits by Read: served from the cache,
	// or needing Backing. ReadThroughs counts Backing reads of partly
	// written blocks by Write.
	Hits         uint64 `json:"hits"`
	Misses       uint64 `json:"misses"`
	ReadThroughs uint64 `json:"read_throughs"`
	Evictions    uint64 `json:"evictions"`
	EvictedBytes uint64 `json:"evicted_bytes"`
	// Throttles counts writers that waited for dirty bytes to fall;
	// AllocWaits those that waited for memory; StableWaits those that
	// waited for a block under writeback.
	Throttles        uint64        `json:"throttles"`
	AllocWaits       uint64        `json:"alloc_waits"`
	StableWaits      uint64        `json:"stable_waits"`
	ThrottledTime    time.Duration `json:"throttled_ns"`
	AllocWaitTime    time.Duration `json:"alloc_wait_ns"`
	WritebackExtents uint64        `json:"writeback_extents"` // begun
	WritebackBytes   uint64        `json:"writeback_bytes"`
	WritebackErrors  uint64        `json:"writeback_errors"` // extents ended with an error
	Pressure         uint64        `json:"pressure"`         // OnPressure calls
	// FillWaits counts misses that waited for another access's read of
	// their blocks; PrefetchedBytes what Prefetch read in.
	FillWaits       uint64 `json:"fill_waits"`
	PrefetchedBytes uint64 `json:"prefetched_bytes"`
}

type counters struct {
	folios                             [MaxOrder + 1]atomic.Int64
	created                            [MaxOrder + 1]atomic.Uint64
	hits, misses, readThroughs         atomic.Uint64
	evictions, evictedBytes            atomic.Uint64
	throttles, allocWaits, stableWaits atomic.Uint64
	throttledNs, allocWaitNs           atomic.Int64
	wbExtents, wbBytes, wbErrors       atomic.Uint64
	pressure                           atomic.Uint64
	fillWaits, prefetched              atomic.Uint64
}

// Stats returns a snapshot of the counters.
func (c *Cache) Stats() Stats {
	k := &c.counters
	s := Stats{
		ArenaBytes:       int64(len(c.folios)) * pageSize,
		DirtyBytes:       c.dirty.Load(),
		Hits:             k.hits.Load(),
		Misses:           k.misses.Load(),
		ReadThroughs:     k.readThroughs.Load(),
		Evictions:        k.evictions.Load(),
		EvictedBytes:     k.evictedBytes.Load(),
		Throttles:        k.throttles.Load(),
		AllocWaits:       k.allocWaits.Load(),
		StableWaits:      k.stableWaits.Load(),
		ThrottledTime:    time.Duration(k.throttledNs.Load()),
		AllocWaitTime:    time.Duration(k.allocWaitNs.Load()),
		WritebackExtents: k.wbExtents.Load(),
		WritebackBytes:   k.wbBytes.Load(),
		WritebackErrors:  k.wbErrors.Load(),
		Pressure:         k.pressure.Load(),
		FillWaits:        k.fillWaits.Load(),
		PrefetchedBytes:  k.prefetched.Load(),
	}
	s.CachedBytes = s.ArenaBytes - c.buddy.free64()*pageSize
	for i := range s.Folios {
		s.Folios[i] = k.folios[i].Load()
		s.FoliosCreated[i] = k.created[i].Load()
	}
	return s
}

// kick calls OnPressure. Callers hold no cache lock.
func (c *Cache) kick() {
	c.counters.pressure.Add(1)
	if c.cfg.OnPressure != nil {
		c.cfg.OnPressure()
	}
}

func checkIO(off int64, n int) error {
	if off < 0 || off+int64(n) < off {
		return fmt.Errorf("%w: offset %d, length %d", ErrRange, off, n)
	}
	return nil
}

// waitFor blocks on ch, ctx or Shut and adds the time spent to *ns.
func (c *Cache) waitFor(ctx context.Context, ch <-chan struct{}, ns *atomic.Int64) error {
	start := time.Now()
	defer func() { ns.Add(int64(time.Since(start))) }()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.shut:
		return c.shutErr
	}
}

// Shut ends, with cause, every wait of a write for dirty data to drain
// (throttling) and of a write or read for memory (reclaim), now and from
// now on: the caller is shutting down and stops the writeback those waits
// depend on. Waits for writeback already in flight (stable pages,
// WaitWriteback) are not ended: in-flight I/O completes by itself. Only
// the first call's cause counts.
func (c *Cache) Shut(cause error) {
	c.shutOnce.Do(func() {
		c.shutErr = cause
		close(c.shut)
	})
}

// shutDown is Shut's cause once Shut was called, else nil.
func (c *Cache) shutDown() error {
	select {
	case <-c.shut:
		return c.shutErr
	default:
		return nil
	}
}
