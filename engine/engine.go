package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/btree"
	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/cache"
	"github.com/zonefold/zonefold/internal/report"
	"github.com/zonefold/zonefold/internal/wake"
	"github.com/zonefold/zonefold/uring"
	"github.com/zonefold/zonefold/writeback"
	"github.com/zonefold/zonefold/zns"
)

// Config configures an engine.
type Config struct {
	// CacheBytes is the size of the folio cache, all of it resident from
	// Open on. Default 256 MiB.
	CacheBytes int64
	// MaxOrder caps folio size: 4 KiB << MaxOrder. Default 9 (2 MiB).
	MaxOrder int
	// DirtyLimit throttles writers above this many dirty bytes.
	// Default half the cache.
	DirtyLimit int64
	// Writeback tunes when data is written back.
	Writeback writeback.Config
	// Policy is the zone placement policy. Default PolicyMRU.
	Policy Policy
	// OpenZones is how many data zones are open for appends at once.
	// 0: as many as the device's limits allow after the metadata and GC
	// zones, and at most 16.
	OpenZones int
	// FinishTail: when a file's last handle closes while its MRU zone
	// has less room left than this, the zone is finished (given up on
	// the device, no padding written) rather than left open for the
	// next file to start in: a tail shared by a file that outlives the
	// first, or dies before it, is what GC has to copy. 0: a quarter of
	// a zone; negative: never. Under mru a file with a write-life hint
	// keeps its tail open for its class's next file (classTailLocked).
	// The rest of the doc is for unhinted files.
	FinishTail int64
	// GC configures the garbage collector.
	GC GCConfig
	// NoReadVerify makes cache fills skip checking data blocks against
	// their checksums: only to measure what the check costs.
	NoReadVerify bool
	// AcceptOfflineZones opens a device where recovery finds a data
	// zone offline that may hold records newer than the checkpoint it
	// starts from, which Open otherwise refuses (ErrZoneOffline): what
	// the zone held is lost. Reads of what the checkpoint maps there
	// fail (fsck names the files), and whatever the records newer than
	// it that lay there wrote is absent: such a range reads as it was
	// at the checkpoint, a file they grew is shorter (creates, removes
	// and renames are the metadata log's and are kept). Recovery's checkpoint records the zone offline, so later
	// Opens need no option. `zonefold serve --accept-offline-zones`.
	AcceptOfflineZones bool
	// AcceptDamagedRecords opens a device where recovery finds, below a
	// data zone's write pointer, a record header newer than the
	// checkpoint that fails its checksum (media damage), which Open
	// otherwise refuses: that record's bytes are lost, and no mapping
	// says whose they were, so some file reads older bytes where they
	// were, or is shorter. Recovery goes on at the next whole record of
	// the zone, so only that record is lost; the error Open would have
	// given is logged, and fsck with the option names where the damage
	// was. Recovery's checkpoint makes the choice durable: later Opens
	// need no option. `zonefold serve --accept-damaged-records`.
	// It also opens an emu device that opened from the older copy of its
	// zone table with data past that table's write pointers
	// (zns.SlotFallback: what a lost newer table may have made durable,
	// which the first write there destroys; see checkSlotFallback).
	AcceptDamagedRecords bool
	// SumCacheBytes is the memory that keeps the block checksums of
	// records read lately, so that reads of them need not read their
	// headers again (88 bytes per 64 KiB of data). Default: 1/64 of
	// CacheBytes, at least 64 KiB and at most maxDefaultSumCache.
	SumCacheBytes int64
	// ReadaheadMax is the largest window a sequential reader's handle
	// reads ahead (see readahead.go), at most a thirty-second of
	// CacheBytes, so that a few streams cannot flush the cache. 0: 8 MiB;
	// negative: no readahead.
	ReadaheadMax int64
}

func (c *Config) fill() {
	if c.CacheBytes <= 0 {
		c.CacheBytes = 256 << 20
	}
	if c.MaxOrder == 0 {
		c.MaxOrder = 9
	}
	if c.MaxOrder < 0 {
		c.MaxOrder = 0
	}
	if c.DirtyLimit <= 0 {
		c.DirtyLimit = c.CacheBytes / 2
	}
	if c.SumCacheBytes <= 0 {
		c.SumCacheBytes = min(max(64<<10, c.CacheBytes/64), maxDefaultSumCache)
	}
	if c.ReadaheadMax == 0 {
		c.ReadaheadMax = defaultReadaheadMax
	}
	if c.ReadaheadMax > 0 {
		c.ReadaheadMax = min(c.ReadaheadMax, ReadaheadCap(c.CacheBytes))
	}
	c.GC.fill()
}

// maxDefaultSumCache bounds the default checksum cache: it is Go memory,
// and a slice the runtime cannot reserve ends the process instead of
// failing (serve --cache 8T, a typo for 8G, crashed the daemon with a
// goroutine dump). 1 GiB covers the sums of 730 GiB of data.
const maxDefaultSumCache = 1 << 30

// Engine serves files from one zoned device.
type Engine struct {
	cfg Config
	dev zns.Device
	// sumDev is dev if it takes the records' block checksums with their
	// appends (the emu, which would otherwise compute them again).
	sumDev zns.SumAppender
	// keepsNoData: dev is a null: device (zns.Forgetful), on which GC
	// cannot read back what it would copy (see KeepsNoData).
	keepsNoData bool
	geo         zns.Geometry
	ring        *uring.Ring
	cache       *cache.Cache
	wb          *writeback.Writeback
	sb          Superblock
	log         *slog.Logger

	zones  []*zone // by device zone number; nil for zones the engine does not write data to
	placer placer
	hdrs   *blockPool
	ops    chan *recordOp
	// completed carries finished appends from the reaper to the
	// completer goroutine; it has room for every op, so the reaper never
	// waits on it.
	completed     chan *recordOp
	completerDone chan struct{}
	seq           atomic.Uint64
	// inflight counts appends submitted and not completed; quiesce is
	// held shared while appends are being built, so that a checkpoint
	// can stop them and see a still zone table.
	inflight atomic.Int64
	quiesce  sync.RWMutex
	// failedAppend is set when an append fails and cleared by the next
	// checkpoint. A failed append may have left its header on the
	// device (the host took the header block and refused the data), and
	// any device flush can make it durable; recovery replays a record
	// whose data fails its checksum (bit rot of acknowledged data must
	// read EIO, not older bytes), so the failed record would turn the
	// bytes it overwrote, fsynced before, into EIO. A checkpoint taken
	// after the failure supersedes the record (its number is below the
	// checkpoint's): settleStray writes one before an acknowledged
	// flush, and Close before its own.
	failedAppend atomic.Bool
	// unlogged is set when a change applied in memory was not logged: a
	// truncate cuts the file (size, cache, extent map) before its
	// record is written, and a record that fails leaves the cut in
	// memory with nothing on the device carrying it. An fsync that then
	// found nothing dirty acknowledged a size a crash took back
	// (TestH18aTruncateFailedOnFullLogThenFsyncLosesCut). Until a
	// checkpoint (which snapshots memory) clears it, every flush
	// settles with one first (settleStray), as for a failed append.
	unlogged atomic.Bool
	// unloggedWhat says what unlogged stands for (unloggedTruncate,
	// unloggedPack: each that has no record), so that a settle that
	// fails names each (settleStrayLocked); set with unlogged
	// (setUnlogged), cleared with it.
	unloggedWhat atomic.Uint32
	// owedInCheckpoint is set while a checkpoint runs that took
	// unlogged or offlineOwed (it clears them as it begins and sets
	// them again if it fails): until it ends, a checkpoint is still
	// owed for all anyone without metaLog.mu knows (owesCheckpoint),
	// so that a settle waits for it rather than find nothing owed
	// (TestH42eAckDuringAFailingCheckpointWaitsForIt).
	owedInCheckpoint atomic.Bool
	// offlineOwed is set when the engine finds a data zone the device
	// reports offline (offlineWatcher) and cleared by the next
	// checkpoint, which records the zone full: until one does, a
	// recovery from an older checkpoint cannot rule out records newer
	// than it in the zone and refuses to open (offlineZoneNews). Every
	// acknowledging flush settles with one first (settleStray), as for
	// a failed append, and the watcher takes one at once.
	offlineOwed atomic.Bool
	// offlineLate is set by the completer when it maps a record into a
	// zone the watcher had found offline already (the append landed
	// before the zone went offline, its record after the watcher's list
	// of what files map there): the watcher makes what the found zones
	// hold dirty again once more, that record's data with it.
	offlineLate atomic.Bool
	// offlineKick wakes the offline watcher: a device read or a zone's
	// finish failed, and a zone may have gone offline.
	offlineKick chan struct{}
	// failedMu (leaf) guards failedSeqs: the numbers of the records whose
	// appends failed since the last checkpoint (the completer adds them),
	// and how many of them voidFailedLocked has logged void in the active
	// half (voided; a switch names them all again in the next half).
	failedMu   sync.Mutex
	failedSeqs []uint64
	voided     int
	// admitted is the device bytes reserved by writes admitted and not
	// yet in the cache (see admit).
	admitted atomic.Int64
	// reserved is the free space only files with useReserved may take
	// (SetReserved).
	reserved atomic.Int64
	// retireKick wakes the retirer, which finishes the zones placement
	// gave up (placer.retiring).
	retireKick chan struct{}
	// idle wakes goroutines waiting for in-flight appends, a zone's
	// writers or a zone's readers to drain (see waitUntil).
	idle wake.Wake

	// nsMu guards the namespace (byName, nextID, closed) and orders
	// namespace operations with their log records. byID is written under
	// nsMu and idMu and read under either: paths below the cache (reads
	// through the backing store, writeback, GC) look files up by id under
	// idMu alone, a leaf lock, so that they never wait for a namespace
	// operation (see the lock order in doc.go).
	nsMu   sync.RWMutex
	byName map[string]*file
	// names holds byName's names in order, under nsMu: a listing pages
	// from a name on (ListAfter) in log n plus the page, where sorting
	// every name for each page made paging through n names cost n²
	// (52k files with 255-byte names took 12.5 s to list). setName and
	// delName change both; nil until the first name.
	names *btree.BTreeG[string]
	// nsBytes is what byName's entries take in a checkpoint (nsEntryLen
	// each), under nsMu: creates and renames keep it within the room
	// the worst case of extents leaves in a metadata half (nsRoomFor).
	nsBytes int64
	idMu    sync.RWMutex
	byID    map[uint64]*file
	nextID  uint64
	// active gates the operations callers start (see enter): it counts
	// those running, with closingBit set once Close has begun and
	// abandonBit once it stopped waiting for them, and closingCh is
	// closed when Close begins too, to wake waits that have no context.
	active    atomic.Int64
	closingCh chan struct{}
	// settlers counts the background settlers' goroutines
	// (settleLater): a simulated crash (crashForTest) waits for them
	// before it closes the cache under a try.
	settlers sync.WaitGroup
	// raMax is Config.ReadaheadMax; raQueue the windows waiting for a
	// readahead worker (readahead.go).
	raMax   int64
	raQueue chan raJob
	// raActive counts the readahead windows being read: each is an
	// operation (enter) too, but not a client's, and Close's error
	// counts them apart.
	raActive   atomic.Int64
	closeOnce  sync.Once
	closeErr   error // the first Close's
	meta       *metaLog
	flushes    flushGroup // every device flush but Close's and Format's
	gc         *collector
	stats      counters
	cancel     context.CancelFunc
	readGroups sync.Pool // *uring.Group for batched device reads
	// coldFinish hands the cold-read finisher (coldFinisher) the reads
	// File.StartRead began whose cache file lock the reaper found held:
	// room for one per read scratch, which each holds. coldStop ends
	// the finisher, coldDone says it ended: only a Close that waited for
	// every operation stops it (stopColdFinisher), since a read Close
	// stopped waiting for may still come to it.
	coldFinish chan *coldRead
	coldStop   chan struct{}
	coldDone   chan struct{}
	sums       *sumCache
	// scratch is the waiting reads' (readChecked), coldScratch the cold
	// reads' (StartRead): one pool for both let cold reads waiting in
	// the finisher for a cache file lock hold every scratch while the
	// holder of that lock, filling under it because memory was short,
	// waited for one (TestWaitingReadGetsAScratchWhileColdReadsHoldAll).
	// A waiting read's scratch is held only across device reads, so
	// one always comes back.
	scratch     *scratchPool
	coldScratch *scratchPool

	// readOnly recovery (fsck) changes nothing on the device and keeps
	// what it found for the report.
	readOnly bool
	// salvage (read-only recovery for Salvage only) goes on past what
	// makes Open refuse the device, the newest checkpoint or the log
	// before it damaged, from the best state it can decode, recording
	// each refusal as damage: Salvage then copies only bytes it can
	// verify, so an extent of that older state that a reset since gave
	// to another file is never served.
	salvage   bool
	recovered []event
	// recoveredVoid: the records an opVoid names, which recovery skipped
	// (their appends failed).
	recoveredVoid map[uint64]bool
	// held is, during recovery's replay only, the extents of records
	// without a size that no record of their file has committed yet
	// (replayRecord).
	held    map[uint64][]extent
	ckptSeq uint64 // the checkpoint recovery started from
	ckptTie bool   // both metadata zones hold a checkpoint of that number
	// damage is what recovery found inconsistent and left out (a create
	// reusing a live file's id, a file twice in the checkpoint, a
	// checkpoint extent no record can hold, an operation that does not
	// decode); fsck reports it.
	damage []string
	// deviceNotes are what the device said at Open that loses nothing
	// (checkSlotFallback): fsck notes them.
	deviceNotes []string
	// offlineAccepted is the offline data zones recovery opened past
	// though records newer than its checkpoint may lie there
	// (Config.AcceptOfflineZones): fsck notes them.
	offlineAccepted []int
	// lostRoom is where recovery maps extents whose newer copies were
	// in accepted offline zones (replayOp, opZoneReset): the room each
	// such zone had past its checkpoint, which those copies took.
	// Recovery only.
	lostRoom []lostRoom
	// bg is the background work Close's writeback waits for (writeback,
	// retirer, collector): a pass of it may hold what the closing flush
	// and checkpoint need. raWG is the readahead workers, which hold
	// nothing of that: a window runs as an operation (Close's drain
	// waits for it, and gives up on one stuck in device I/O like any
	// other), and a worker stuck in a device read must not cost the
	// closing flush and checkpoint, as it did when they were bg.
	bg      sync.WaitGroup
	raWG    sync.WaitGroup
	zeroBlk []byte
}

// file is one file's state; mu guards size and the extent map.
type file struct {
	id uint64
	// nm is the file's name: changed by a rename under f.mu, read
	// anywhere (error messages on the ring's reaper, which takes no
	// engine lock), so it is swapped whole, never torn.
	nm atomic.Pointer[string]
	// wmu orders changes of the file's bytes and size: writes within the
	// size share it; a write that extends the file and Truncate hold it
	// exclusively, from the size change until the data is in the cache
	// (or the truncate is logged), so that a truncate never interleaves
	// with a write and a failed write can put the size back exactly.
	wmu sync.RWMutex
	// shrinking is odd while a shrink runs (it adds one as it starts
	// and as it ends): a read that saw it move or odd may have read
	// bytes the shrink cut, and reads again (File.ReadAtContext).
	shrinking atomic.Uint64
	// changes counts writes and truncates that have ended (File.Changes).
	changes atomic.Uint64
	mu      sync.RWMutex
	size    int64
	// growing: an extending write's piece has set size, and its data is
	// not all in the cache yet (File.writePieces, with wmu held
	// exclusive). Meanwhile reads, Size and Stat see shown, the size
	// before the piece (visibleSize): the bytes between read as zeros
	// until the copy lands, and a reader racing an append read those
	// zeros as the file's. Linux moves i_size past a write's bytes
	// once they are in the page cache; Pebble's Checkpoint copies the
	// WAL as it is appended to.
	growing bool
	shown   int64
	// tailPending: a truncate has set size, but the record of its tail's
	// zeros has not completed yet; until it does, a checkpoint of the
	// file carries tailFrom, the size before the truncate (see
	// carriedSize and File.zeroTail). tailSeq is that record's number
	// once it took one (numberRecord); the record's completion clears
	// both. A failed truncate sets tailSeq to tailUndoing while it puts
	// the file back. While tailSeq is set, GC leaves the file's data
	// where it is (tailUnsettled): from the zeros' number until the
	// truncate has flushed them, or put the file back.
	tailPending bool
	tailFrom    int64
	tailSeq     uint64
	// undo is a failed truncate's undo while its commit is owed
	// (File.undoCut, File.settleUndo): from the moment the old size is
	// back until the record that commits it is durable. The undo may
	// fail before that (its own flush fails too) and the commit stays
	// owed past the truncate: the file's next fsync, truncate or
	// Engine.Sync writes it first, or fails.
	undo *undoState
	// tailOld is the tail block's mapping before a truncate wrote its
	// zeros, from zeroTail's start until it returns: a failed truncate
	// maps it again (restoreTail). Its bytes are pinned (counted valid
	// in their zones although the zeros may map over them, so GC walks
	// such a zone and finds them, collector.mappedIn) and GC leaves a
	// zone holding them alone while the tail is unsettled, so they stay
	// where tailOld says (a GC copy made before moves them,
	// relocateTailOld).
	tailOld []extent
	ext     *extentMap
	mru     atomic.Pointer[zone]
	life    atomic.Uint32 // WriteLife hint, for placement
	// useReserved: the file's writes may take the space SetReserved
	// keeps.
	useReserved atomic.Bool
	gone        bool // dropped (removed with no handle open, or at its last close since): its data is garbage
	// cached is the file's state in the cache (cache.File), made by its
	// first access (Engine.cacheFile) under mu while not gone: every
	// access of the file goes through it, and dropFile's Forget leaves
	// it dead, so an access racing the remove cannot cache bytes of the
	// removed file.
	cached atomic.Pointer[cache.File]
	// handles counts open handles: a file none has open is not being
	// written, and placement may give the rest of its MRU zone to another.
	handles atomic.Int32
	// unlinkAtClose: RemoveUnused found the file open; the close that
	// leaves it without handles removes it, unless it was opened or
	// renamed since (openHandle and Rename clear it: the file is the
	// opener's or the renamer's).
	unlinkAtClose atomic.Bool
	// unnamed: removed or renamed over (durably: the namespace no longer
	// has it, and recovery drops it) while handles had it open. As on a
	// kernel file system, those handles keep working, its data stays
	// live, and the close that leaves it without handles drops it
	// (dropUnnamed). Set under nsMu; checkpoints leave it out.
	unnamed atomic.Bool
	// written is the bytes clients wrote to the file since born, the
	// engine's host byte count when it was created (or the engine
	// opened): GC sorts its copies by the file's temperature from them.
	written atomic.Int64
	born    int64
	// createFlush is the ticket (see flushGroup) of the flush that makes
	// the file's create, or the rename that gave it its name, durable,
	// until a create or the rename has seen it succeed (then 0). They
	// wait for it without nsMu, and so does a durable create that finds
	// the file by that name meanwhile (awaitCreate).
	createFlush atomic.Uint64
	// dataFlush is the ticket (see flushGroup) of the flush that covers
	// the file's latest completed append (a record of its data, or a GC
	// copy of it): a flush numbered that or later that succeeded made
	// every record of the file durable. The completer raises it before
	// the append's writeback ends (finishAppend), so an fsync that has
	// waited for the file's writeback sees it (Engine.syncTicket).
	dataFlush atomic.Uint64
}

// carriedSize is the size a GC record or a checkpoint of the file
// carries (f.mu held): the size, except while a truncate's tail is
// pending, whose zeros are not on the device yet. Carrying the new size
// then, with the zeros lost to a crash, would bring the file back cut
// over the block's old bytes, which a later grow would show.
func (f *file) carriedSize() int64 {
	if f.tailPending {
		return f.tailFrom
	}
	return f.size
}

// pinTail keeps the mapping of f's block at blk (f.mu held exclusive) as
// tailOld, counted valid in its zones until unpinTail.
func (e *Engine) pinTail(f *file, blk int64) {
	f.tailOld = f.tailOld[:0]
	f.ext.lookup(blk, BlockSize, func(x extent) {
		f.tailOld = append(f.tailOld, x)
		e.pinned(x, x.len)
	})
}

// unpinTail drops tailOld (f.mu held exclusive): what no map holds of
// it is garbage from now on.
func (e *Engine) unpinTail(f *file) {
	for _, x := range f.tailOld {
		e.pinned(x, -x.len)
	}
	f.tailOld = nil
}

// restoreTail maps the tail block at blk as tailOld says again (f.mu
// held exclusive), over whatever record of the truncate's zeros maps it.
func (e *Engine) restoreTail(f *file, blk int64) {
	if f.gone {
		return // removed: nothing to put back (and nothing pinned)
	}
	f.ext.punch(blk, blk+BlockSize, e.unmapped)
	for _, x := range f.tailOld {
		f.ext.t.ReplaceOrInsert(x)
		e.pinned(x, x.len)
	}
}

// relocateTailOld follows a GC copy of tailOld's bytes (f.mu held
// exclusive): moved is where the GC record put file bytes of its version.
// A copy numbered before the truncate may complete after its zeros,
// which the map then holds instead, and GC resets the zone the old
// bytes were in all the same.
func (e *Engine) relocateTailOld(f *file, moved extent) {
	for i, o := range f.tailOld {
		if o.ver != moved.ver || o.off < moved.off || o.end() > moved.end() {
			continue
		}
		e.pinned(o, -o.len)
		o.dev, o.hdr = moved.dev+(o.off-moved.off), moved.hdr
		f.tailOld[i] = o
		e.pinned(o, o.len)
	}
}

// pinned adds n to the valid bytes of x's zone.
func (e *Engine) pinned(x extent, n int64) {
	if z := e.zoneAt(x.dev); z != nil {
		z.valid.Add(n)
	}
}

// tailUndoing is tailSeq while a failed truncate puts the file back
// (File.zeroTail): no record takes that number.
const tailUndoing = ^uint64(0)

// tailUnsettled reports (f.mu held) whether a truncate's zeros' record
// took its number and the truncate has not yet flushed it, or a failed
// truncate is putting the file back: GC must not relocate the file's
// data then (see collector.appendFile), nor reset a zone that holds the
// tail block's old bytes (file.tailOld, Engine.mappedIn). A GC record numbered after the zeros' carries
// their size whatever it says: with the new size, GC's flush (which
// cannot cover a record not yet submitted, or in flight) could make it
// durable without the zeros, and a crash brought the file back cut over
// the block's old bytes; with the old size, replayed after the zeros'
// record, which cuts the extents past the block, it would bring back the
// old size with holes. Checkpoints never see the first state: they
// quiesce appends and wait for those in flight. So does a failed
// truncate's undo that owes its commit (file.undo): a GC record carries a
// size and would commit the undo's records in recovery before they are
// durable, and what the undo's records replaced (undoState.replaced)
// stays where it is until the commit is.
func (f *file) tailUnsettled() bool { return f.tailSeq != 0 || f.undo != nil }

// numberRecord gives a data record of f its sequence number and the size
// it carries, in one hold of f.mu: a GC record, which numbers itself
// under f.mu too, carries the size as of its place in that order. The
// first record numbered after a truncate set its tail pending is the
// tail's zeros (the truncate holds wmu and wrote the file's dirty data
// back first): its number is kept in tailSeq, and until the truncate
// has flushed it or put the file back, GC leaves the file alone; once it
// completes (mapRecord), checkpoints carry the new size.
func (e *Engine) numberRecord(f *file) (uint64, uint64) {
	f.mu.RLock()
	if !f.tailPending || f.tailSeq != 0 {
		seq, size := e.seq.Add(1), f.recordSize()
		f.mu.RUnlock()
		return seq, size
	}
	f.mu.RUnlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	seq := e.seq.Add(1)
	if f.tailPending && f.tailSeq == 0 {
		f.tailSeq = seq
	}
	return seq, f.recordSize()
}

// recordSize is the size a data record of f carries (f.mu held): the
// size, or SizeUnknown while a failed truncate's undo owes its commit
// and has not started writing it (undoState). Recovery holds the extents
// of a record without a size back until a later record of the file
// carries one (Engine.replayRecord), so a crash before the commit keeps
// none of them, whatever part of them a flush made durable.
func (f *file) recordSize() uint64 {
	if u := f.undo; u != nil && !u.commit {
		return SizeUnknown
	}
	return uint64(f.size)
}

// undoState is what a failed truncate's undo owes until its commit is
// durable (file.undo, f.mu).
type undoState struct {
	// size, end and old are the failed truncate's: its size, the end of
	// the block that holds it, the size it put back.
	size, end, old int64
	// scanned: the mapped ranges of [end, old) were made dirty again,
	// but for failedPieces, the pieces that failed (a read or an admission):
	// the next try rewrites those only. Each try's copies of the rest
	// would otherwise pile up, and after a few flaky tries fill the
	// device (TestUndoOwedRetriesDoNotFillDevice).
	scanned      bool
	failedPieces [][2]int64
	// commit: the rewrite is durable (written back and flushed) and the
	// file's records carry its size again; the first durable one of
	// them commits the rewrite in recovery.
	commit bool
	// replaced is what the file's records without a size mapped over:
	// a crash before the commit maps it again. It stays counted valid
	// in its zones (GC neither resets nor relocates them, see
	// tailUnsettled) until the state ends (endUndo). Those records are
	// the undo's own rewrites, which replace extents of records
	// numbered before the state began: a client write settles the
	// commit first (WriteAtContext), and GC leaves the file alone. (A
	// copy numbered since, replaced by a later record without a size,
	// as a piece rewritten again after a partial failure, is kept too:
	// garbage in fact, counted valid until the state ends.)
	replaced []extent
	// keep is mapRecord's unmapped for a record without a size.
	keep func(extent)
	// settling: a goroutine settles the commit in the background
	// (Engine.settleLater); kick ends its wait before its next try, and
	// tries counts the tries it ended (a writer short of space waits
	// for the next, waitSettled).
	settling bool
	kick     chan struct{}
	tries    int
}

// newUndoState is the state of a failed truncate to size (in the
// block that ends at end) of a file of old bytes, from now on.
func (e *Engine) newUndoState(size, end, old int64) *undoState {
	u := &undoState{size: size, end: end, old: old, kick: make(chan struct{}, 1)}
	u.keep = func(x extent) { u.replaced = append(u.replaced, x) }
	return u
}

// endUndo drops f's undo state (f.mu held exclusive): what it kept
// counted valid is garbage from now on.
func (e *Engine) endUndo(f *file) {
	if f.undo == nil {
		return
	}
	for _, x := range f.undo.replaced {
		e.unmapped(x)
	}
	f.undo = nil
}

// Open opens a formatted device and recovers its files.
func Open(devName string, cfg Config) (*Engine, error) {
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		return nil, err
	}
	e, err := OpenDevice(dev, cfg)
	if err != nil {
		dev.Close()
		return nil, err
	}
	return e, nil
}

// OpenDevice is Open on a device the caller opened; the engine owns it
// from then on and closes it with Close.
func OpenDevice(dev zns.Device, cfg Config) (*Engine, error) {
	return openDevice(dev, cfg, nil)
}

// CheckConfig refuses what opening dev with cfg would refuse of cfg and
// of dev's geometry, writing nothing: a geometry zonefold cannot use, more
// open zones than the device allows beside what zonefold keeps, a cache
// above the memory the machine has (cache.CheckSize). With format, dev is
// taken as Format would leave it; without, as formatted already (an
// unformatted one is ErrNotFormatted). A caller about to change the
// device before it opens the engine checks first: serve --format --force
// erased the device, then failed on a --cache or --open-zones typo.
func CheckConfig(dev zns.Device, cfg Config, format *FormatOptions) error {
	_, _, _, err := checkConfig(dev, cfg, format)
	return err
}

// checkConfig is CheckConfig, which also returns the data zones as dev
// reports them, GC's configuration as the engine would run it (its
// reserve grown for its streams) and the data zones open at once (the
// placer's budget).
func checkConfig(dev zns.Device, cfg Config, format *FormatOptions) ([]zns.Zone, GCConfig, int, error) {
	cfg.fill()
	geo := dev.Geometry()
	if err := checkGeometry(geo); err != nil {
		return nil, GCConfig{}, 0, err
	}
	var sb Superblock
	var err error
	if format != nil {
		sb, err = planFormat(dev, *format)
	} else {
		sb, err = readSuperblock(dev)
	}
	if err != nil {
		return nil, GCConfig{}, 0, err
	}
	if err := sb.checkGeometry(geo); err != nil {
		return nil, GCConfig{}, 0, err
	}
	report := make([]zns.Zone, geo.Zones)
	n, err := dev.Report(0, report)
	if err != nil {
		return nil, GCConfig{}, 0, fmt.Errorf("engine: report zones: %w", err)
	}
	var data []zns.Zone
	for i, z := range report[:n] {
		if sb.holdsData(i, z) {
			data = append(data, z)
		}
	}
	budget, _, err := planOpenZones(&cfg, geo, len(data))
	if err != nil {
		return nil, GCConfig{}, 0, err
	}
	if err := cache.CheckSize(cfg.CacheBytes); err != nil {
		return nil, GCConfig{}, 0, fmt.Errorf("engine: %w", err)
	}
	return data, cfg.GC, budget, nil
}

// FreshRoom is what Capacity and Available say of dev once FormatAndOpen
// has formatted it and opened an engine on it with cfg, worked out from
// its zone report without writing anything: the bytes its data zones
// hold, and the room file data can take outside GC's reserve (nothing
// valid, dirty or admitted yet, no zone taken offline). It refuses what
// CheckConfig refuses with format. A caller that refuses a workload the
// device cannot hold does it before the format erases the device (with
// FreshLayout, which also counts what the engine writes beside the
// files' data).
func FreshRoom(dev zns.Device, cfg Config) (capacity, room int64, err error) {
	l, err := FreshLayout(dev, cfg)
	return l.Capacity, l.Room, err
}

// Layout is how the engine lays files' data out in a device's data zones,
// as its admission (roomFor) counts it: what a workload's files take of
// the room there beside their data.
type Layout struct {
	// Capacity and Room are FreshRoom's: the bytes of the data zones,
	// and those outside GC's reserve, which file data and the records
	// that carry it take.
	Capacity, Room int64
	// perHeader is the data blocks one record header carries at most:
	// a record carries up to maxRecordData and up to MaxRecordExtents
	// of the cache's extents, each a block or more.
	perHeader int64
	zoneCap   int64 // a data zone's bytes: a record never spans two
	pads      int64 // the zones that may each end in a pad block while open (placer.pads)
}

// FreshLayout is the Layout of dev once FormatAndOpen has formatted it
// with cfg, worked out without writing anything (see FreshRoom).
func FreshLayout(dev zns.Device, cfg Config) (Layout, error) {
	data, gc, budget, err := checkConfig(dev, cfg, &FormatOptions{Force: true})
	if err != nil {
		return Layout{}, err
	}
	l := Layout{perHeader: perHeader(dev.Geometry()), zoneCap: max(data[0].Cap, BlockSize),
		pads: placerPads(budget, len(data), gc.Reserve)}
	for _, z := range data {
		l.Capacity += z.Cap
	}
	// As usableBytes counts GC's reserve: zones of the first data
	// zone's capacity (placer.zoneCap).
	l.Room = max(0, l.Capacity-int64(gc.Reserve)*l.zoneCap)
	return l, nil
}

// Need is the room files files holding data bytes between them (whole
// blocks) take as admission counts it: their data; a record header
// (a block) for each file, for each further record's worth of data
// (perHeader blocks) and for each zone the data splits across; and a
// pad block for each zone that may be open, which admission keeps free.
// A workload whose files need more than Room is refused a write before
// its end (ENOSPC), even where their data alone fits.
func (l Layout) Need(files, data int64) int64 {
	headers := files + data/BlockSize/l.perHeader + data/l.zoneCap + l.pads
	return data + headers*BlockSize
}

// perHeader is Layout.perHeader for a device of geometry geo.
func perHeader(geo zns.Geometry) int64 {
	return max(1, min(maxRecordData(geo)/BlockSize, MaxRecordExtents))
}

// KeepsNoData says whether the engine runs on a device that keeps no
// data (null:): GC cannot read back the record headers of the zones it
// would reclaim, so the device's capacity is one fill, and overwrites
// that need GC to free a partly live zone fail with ENOSPC (ErrNoSpace,
// saying so: errNoDataKept).
func (e *Engine) KeepsNoData() bool { return e.keepsNoData }

// errNoDataKept is why a write on a device that keeps no data is
// refused for space (KeepsNoData).
var errNoDataKept = errors.New("the null: device keeps no data, so GC cannot read back the zones it would reclaim: its capacity is one fill (serve a device that stores data, e.g. emu:, to overwrite past that)")

// FormatAndOpen formats dev (erasing it) and opens an empty engine on it
// without reading anything back: the one way to run the engine on a
// storage-less null: device, whose reads return zeros.
func FormatAndOpen(dev zns.Device, cfg Config) (*Engine, error) {
	sb, err := Format(dev, FormatOptions{Force: true})
	if err != nil {
		return nil, err
	}
	return openDevice(dev, cfg, &sb)
}

func openDevice(dev zns.Device, cfg Config, fresh *Superblock) (*Engine, error) {
	cfg.fill()
	sumDev, _ := dev.(zns.SumAppender)
	e := &Engine{cfg: cfg, dev: dev, sumDev: sumDev, geo: dev.Geometry(), ring: dev.Ring(), log: slog.Default(),
		byName: map[string]*file{}, byID: map[uint64]*file{}, nextID: 1, retireKick: make(chan struct{}, 1), offlineKick: make(chan struct{}, 1),
		closingCh: make(chan struct{}), raMax: cfg.ReadaheadMax, raQueue: make(chan raJob, readaheadQueue)}
	e.readGroups.New = func() any { return new(uring.Group) }
	e.coldFinish = make(chan *coldRead, readScratches)
	if f, ok := dev.(zns.Forgetful); ok && f.KeepsNoData() {
		e.keepsNoData = true
	}
	if err := e.checkDevice(); err != nil {
		return nil, err
	}
	if e.cfg.FinishTail == 0 {
		e.cfg.FinishTail = e.geo.ZoneCap / 4
	}
	var sb Superblock
	var err error
	if fresh != nil {
		sb = *fresh
	} else if sb, err = readSuperblock(dev); err != nil {
		return nil, err
	}
	if err := sb.checkGeometry(e.geo); err != nil {
		return nil, err
	}
	e.sb = sb
	if e.hdrs, err = newBlockPool(e.ring, 2*int(nslots(e.ring))); err != nil {
		return nil, err
	}
	e.ops = make(chan *recordOp, e.hdrs.size())
	for _, op := range newRecordOps(e, e.hdrs.size()) {
		e.ops <- op
	}
	e.completed = make(chan *recordOp, e.hdrs.size())
	e.completerDone = make(chan struct{})
	go e.completer()
	e.zeroBlk = e.hdrs.zero
	if e.scratch, err = newScratchPool(readScratches); err != nil {
		e.hdrs.close()
		return nil, err
	}
	if e.coldScratch, err = newScratchPool(readScratches); err != nil {
		e.scratch.close()
		e.hdrs.close()
		return nil, err
	}
	// The collector exists before placement does: placement kicks it
	// (placer.lowFree), recovery's placement too; it runs from below.
	e.gc = newCollector(e)
	if err := e.setupZones(); err != nil {
		e.stopCompleter()
		e.hdrs.close()
		e.scratch.close()
		e.coldScratch.close()
		return nil, err
	}
	e.cache, err = cache.New(cache.Config{
		Bytes:      cfg.CacheBytes,
		MaxOrder:   max(cfg.MaxOrder, 0),
		DirtyLimit: cfg.DirtyLimit,
		BlockSize:  BlockSize,
		OnPressure: func() {
			if testHookPressure != nil {
				testHookPressure(e)
			}
			e.wb.Kick()
		},
	})
	if err != nil {
		e.stopCompleter()
		e.hdrs.close()
		e.scratch.close()
		e.coldScratch.close()
		return nil, fmt.Errorf("engine: cache: %w", err)
	}
	// After the cache's arena, whose size the cache checks and maps
	// (an error, not a crash, when the machine cannot give it).
	e.sums = newSumCache(cfg.SumCacheBytes)
	e.wb = writeback.New(cfg.Writeback, e.cache, e, e.ring)
	if fresh != nil {
		err = e.startFresh()
	} else {
		err = e.recover()
	}
	e.placer.recount()
	if err != nil {
		e.waitUntil(func() bool { return e.inflight.Load() == 0 })
		e.stopCompleter()
		e.cache.Close()
		e.hdrs.close()
		e.scratch.close()
		e.coldScratch.close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	// The retirer outlives the flusher and the collector: a GC pass that
	// runs on after the cancel (Close waits for it) and has an append
	// fail waits for that zone to drain, which only the retirer ends.
	// Stopped with them, it left such a pass waiting until Close gave
	// up on it, skipping the device flush and the closing checkpoint.
	var others sync.WaitGroup
	others.Go(func() { e.wb.Run(ctx) })
	others.Go(func() { e.gc.run(ctx) })
	others.Go(func() { e.offlineWatcher(ctx) })
	othersDone := make(chan struct{})
	e.bg.Go(func() { others.Wait(); close(othersDone) })
	e.bg.Go(func() { e.retirer(othersDone) })
	e.coldStop, e.coldDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(e.coldDone)
		e.coldFinisher(e.coldStop)
	}()
	if e.raMax > 0 {
		for range readaheadWorkers {
			e.raWG.Go(func() { e.readaheadWorker(ctx) })
		}
	}
	return e, nil
}

// checkDevice refuses geometries the engine cannot use.
func (e *Engine) checkDevice() error { return checkGeometry(e.geo) }

// checkGeometry refuses a device whose geometry zonefold cannot use.
func checkGeometry(g zns.Geometry) error {
	if g.BlockSize > BlockSize || BlockSize%g.BlockSize != 0 {
		return fmt.Errorf("engine: device block size %d: zonefold needs one that divides %d", g.BlockSize, BlockSize)
	}
	if g.ZoneCap%BlockSize != 0 || g.ZoneCap < 4*BlockSize {
		return fmt.Errorf("engine: zone capacity %d: need a multiple of %d, at least %d", g.ZoneCap, BlockSize, 4*BlockSize)
	}
	if g.MaxAppend < minRecord {
		return fmt.Errorf("engine: max append %d bytes is below a record (%d)", g.MaxAppend, minRecord)
	}
	return nil
}

func nslots(r *uring.Ring) int { return r.Slots() }

// readScratches is how many checked cache fills run at once. Since a
// file's misses no longer wait for each other (cache.preRead), a client
// at iodepth 32 keeps that many in flight: 16 left half of fio's cold 4k
// random reads waiting for a scratch (block profile: 85 s of waits in a
// 10 s run). Each is 128 KiB of address space, touched only by header
// reads.
const readScratches = 128

// setupZones reads the zone report and builds the placer: the metadata
// zones are set aside, every other sequential zone holds data.
func (e *Engine) setupZones() error {
	report := make([]zns.Zone, e.geo.Zones)
	n, err := e.dev.Report(0, report)
	if err != nil {
		return fmt.Errorf("engine: report zones: %w", err)
	}
	report = report[:n]
	e.zones = make([]*zone, e.geo.Zones)
	var data []*zone
	for i, rz := range report {
		if !e.sb.holdsData(i, rz) {
			continue
		}
		z := &zone{idx: i, start: rz.Start, cap: rz.Cap}
		z.alloc.Store(rz.WP - rz.Start)
		switch {
		case rz.Cond == zns.CondReadOnly || rz.Cond == zns.CondOffline:
			z.state.Store(zoneFull)
		case rz.WP >= rz.Start+rz.Cap || rz.Cond == zns.CondFull:
			z.alloc.Store(rz.Cap)
			z.state.Store(zoneFull)
		case rz.WP == rz.Start:
			z.state.Store(zoneFree)
		default:
			// Partly written: recovery finishes it (its tail cannot be
			// trusted to be in order with new appends after a crash).
			z.state.Store(zoneFull)
		}
		e.zones[i] = z
		data = append(data, z)
	}
	budget, streams, err := planOpenZones(&e.cfg, e.geo, len(data))
	if err != nil {
		return err
	}
	e.placer = placer{policy: e.cfg.Policy, zones: data, budget: budget, gcStreams: streams, gcReserve: e.cfg.GC.Reserve,
		flush: func() { _ = e.ring.Flush() }, idle: &e.idle, lowWater: e.cfg.GC.Low, lowFree: e.kickGC}
	for _, z := range data {
		if z.state.Load() == zoneFree {
			e.placer.free = append(e.placer.free, z)
		}
	}
	return nil
}

// planOpenZones works out, from cfg, the device's limits and its number
// of data zones, how many data zones may be open at once (the placer's
// budget) and how many streams GC writes, and sets cfg.GC for them. It
// refuses a device or a cfg.OpenZones that leaves no room, and GC
// watermarks the caller set above the data zones (a ConfigError, as is
// too large a cfg.OpenZones). No I/O: it
// also checks a configuration before anything is written (CheckConfig).
func planOpenZones(cfg *Config, geo zns.Geometry, dataZones int) (budget, streams int, err error) {
	if dataZones < 2+cfg.GC.Reserve {
		return 0, 0, fmt.Errorf("engine: %d data zones; zonefold needs at least %d", dataZones, 2+cfg.GC.Reserve)
	}
	// Watermarks the caller set above the data zones can never be met:
	// free zones never exceed them, so GC would run from the first write
	// on, or never stop. They were taken silently. fill's own are not
	// checked (its high watermark may pass a tiny device's data zones,
	// and means "until no victim is left" there).
	for _, w := range []struct {
		name      string
		v         int
		defaulted bool
	}{{"GC.Low", cfg.GC.Low, cfg.GC.defaulted.low}, {"GC.High", cfg.GC.High, cfg.GC.defaulted.high}} {
		if !w.defaulted && w.v > dataZones {
			return 0, 0, &ConfigError{Setting: w.name, Value: w.v, Max: dataZones,
				Why: fmt.Sprintf("the device has %d data zones (free zones never exceed them)", dataZones)}
		}
	}
	budget = cfg.OpenZones
	limit := deviceOpenLimit(geo)
	streams = gcStreams(cfg.GC.Streams, budget, limit)
	if streams > 1 && (dataZones < 2+cfg.GC.Reserve+streams-1 ||
		cfg.GC.Streams == 0 && dataZones < minZonesForGCStreams) {
		// Too few zones for a second stream's reserve, or (where the
		// streams were left to the engine) so few that the zone it adds
		// to the reserve is a large share of the device.
		streams = 1
	}
	cfg.GC.forStreams(streams)
	// Besides data zones, a zone per GC stream and one metadata zone may
	// be open: a checkpoint finishes the old metadata zone before it
	// writes the next (checkpointLocked), so two are never active at once.
	kept := metaZonesKept + streams
	if limit > 0 && limit-kept < 1 {
		return 0, 0, fmt.Errorf("engine: device allows %d open zones; zonefold needs at least %d", limit, kept+1)
	}
	if budget <= 0 {
		budget = 16
		if limit > 0 {
			budget = min(budget, limit-kept)
		}
	}
	if limit > 0 && budget > limit-kept {
		return 0, 0, &ConfigError{Setting: "OpenZones", Value: budget, Max: limit - kept,
			Why: fmt.Sprintf("the device allows %d open zones, and zonefold keeps %d for GC's %s and metadata", limit, kept, report.Plural(streams, "stream"))}
	}
	return budget, streams, nil
}

// ConfigError is a Config setting the device cannot take: more open
// zones than it allows beside the ones zonefold keeps, a GC watermark
// above its data zones. It is the caller's choice, not the device's
// fault, so a command line reports it as a bad flag value. Setting names
// the Config field ("OpenZones", "GC.Low", "GC.High"), Value is what was
// asked, Max the most the device takes and Why what bounds it.
type ConfigError struct {
	Setting    string
	Value, Max int
	Why        string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("engine: %s %d: %s; want at most %d", e.Setting, e.Value, e.Why, e.Max)
}

// deviceOpenLimit is the tighter of the open and active limits, 0 if none.
func deviceOpenLimit(g zns.Geometry) int {
	switch {
	case g.MaxOpen > 0 && g.MaxActive > 0:
		return min(g.MaxOpen, g.MaxActive)
	case g.MaxOpen > 0:
		return g.MaxOpen
	default:
		return g.MaxActive
	}
}

// fileByID is the live file with id, or nil. It takes only idMu.
func (e *Engine) fileByID(id uint64) *file {
	e.idMu.RLock()
	f := e.byID[id]
	e.idMu.RUnlock()
	return f
}

// zoneAt is the data zone holding device offset off, or nil.
func (e *Engine) zoneAt(off int64) *zone {
	i := off / e.geo.ZoneSize
	if i < 0 || int(i) >= len(e.zones) {
		return nil
	}
	return e.zones[i]
}

// ErrClosed is the error, wrapped, of an operation started on an engine
// Close has begun to close, and of one Close woke from a wait (for dirty
// data to drain, for memory, for a truncate's window) it would otherwise
// have kept waiting in after the writeback it waited for stopped.
var ErrClosed = fmt.Errorf("engine: closed: %w", fs.ErrClosed)

// closingBit is set in Engine.active once Close has begun; abandonBit
// once Close stopped waiting for the operations still running (its
// context ended first) and went on to write back and checkpoint without
// them: what they do from then on nothing writes back, so an operation
// whose success would rest on that (a write into the cache, a deferred
// create or remove) fails with ErrClosed instead (leaveAcked).
// activeCount masks the count of running operations.
const (
	closingBit  = int64(1) << 62
	abandonBit  = int64(1) << 61
	activeCount = abandonBit - 1
)

// enter admits an operation a caller starts (open, create, read, write,
// fsync, truncate, rename, remove, Sync): ErrClosed once Close has
// begun. Each one admitted calls leave when it returns, so that Close
// can wait for them before it closes the cache and the device under
// them. Two atomic adds: the read and write paths must not allocate.
func (e *Engine) enter() error {
	if e.active.Add(1)&closingBit != 0 {
		e.leave()
		return ErrClosed
	}
	return nil
}

// leave ends an operation enter admitted; the last one to end while
// Close waits wakes it. It reports whether Close had stopped waiting for
// it (abandonBit) when it ended.
func (e *Engine) leave() bool {
	v := e.active.Add(-1)
	if v&closingBit != 0 && v&activeCount == 0 {
		e.idle.Signal()
	}
	return v&abandonBit != 0
}

// leaveAcked is leave for an operation whose success leaves something
// only writeback or a later device flush makes durable (a write into
// the cache, a create with ODeferSync, RemoveDeferred): if Close had
// stopped waiting for it, *err, if nil, becomes ErrClosed, and the
// operation acknowledges nothing. Close sets abandonBit before it writes
// back (one atomic read-modify-write each, on the same word): so either
// this leave came first, and Close's writeback, after it, covers what
// the operation left in the cache, or the operation fails. Reports
// whether it failed the operation.
func (e *Engine) leaveAcked(what string, err *error) bool {
	if !e.leave() || *err != nil {
		return false
	}
	*err = fmt.Errorf("engine: %s ended after Close stopped waiting for it; nothing writes it back: %w", what, ErrClosed)
	return true
}

// isClosing reports whether Close has begun.
func (e *Engine) isClosing() bool { return e.active.Load()&closingBit != 0 }

// closeDrainWait bounds how long Close waits for the operations running
// when it began (see CloseContext). Close first wakes every wait that
// depends on writeback it is about to stop, so what remains ends with
// device I/O already submitted: this only keeps a device that stopped
// completing I/O from holding Close for ever.
const closeDrainWait = time.Minute

// Close is CloseContext bounded by closeDrainWait (then its writeback
// and checkpoint by closeAbandonWait more: with the default dirty limit
// a healthy device writes back well within that).
func (e *Engine) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), closeDrainWait)
	defer cancel()
	return e.CloseContext(ctx)
}

// CloseContext flushes everything, writes a checkpoint and releases the
// device. If dirty data cannot be written back, it flushes what was,
// writes no checkpoint (recovery replays the log) and returns a
// lostAtClose error: that data, never fsynced, is lost.
//
// It may run while operations do. From its start every new operation
// fails with ErrClosed, and so does every one waiting for dirty data to
// drain, for cache memory, for admission or for a truncate's window;
// then it waits for those still running (writing back, in device I/O)
// to end, until ctx is done. What they made durable stays durable, and
// data they left in the cache is written back with the rest. If ctx ends
// first, it writes back and checkpoints all the same but leaves the
// cache's memory and the device open (a running operation may still use
// them) and says so in its error, which wraps ctx's and says whether all
// acknowledged data is durable. An operation it stopped waiting for
// acknowledges nothing that writeback would have to make durable: a
// write, a create with ODeferSync or a RemoveDeferred that ends after
// that fails with ErrClosed (see leaveAcked); fsync, Sync and durable
// namespace operations make their own effect durable and report it.
// A background GC pass that does not stop within closeAbandonWait (a
// device that stopped answering its I/O) is given up on the same way:
// Close returns an error that says acknowledged data may not be durable
// and leaves the cache and device open.
//
// Once ctx is done, Close waits at most closeAbandonWait more for its
// writeback, device flush and checkpoint, running operations or not (a
// device that stops answering); if they do not end in time, they go on
// in the background, the cache and the device stay open, and the error
// (wrapping ctx's) says acknowledged data since the last fsync may not
// be durable.
//
// Its checkpoint comes after all data is written back and flushed: if
// it fails, the error says all data is durable (the next Open replays the
// log); the other metadata half refusing its reset while the active one
// has room is only logged (see closeCheckpoint).
//
// Only the first call closes; every call returns its result, once it
// has one (a Close concurrent with another waits for it).
func (e *Engine) CloseContext(ctx context.Context) error {
	e.closeOnce.Do(func() { e.closeErr = e.close(ctx) })
	return e.closeErr
}

func (e *Engine) close(ctx context.Context) error {
	// The closing bit first, under no lock: an operation may hold nsMu
	// or collector.mu across device I/O (a durable remove's flush, a
	// writer's GC pass), and one that never ends must not keep Close
	// from refusing new operations or from returning.
	e.active.Or(closingBit)
	close(e.closingCh)
	e.cache.Shut(ErrClosed)
	running, drainErr := e.drain(ctx)
	if drainErr != nil {
		// From here on, an operation still running acknowledges
		// nothing that needs the writeback below (leaveAcked).
		e.active.Or(abandonBit)
		return e.closeAbandoned(ctx, running, drainErr) // ctx is done
	}
	errs, ended := e.settleBounded(ctx, false)
	if !ended && len(errs) > 0 {
		// A background pass outlasted the settle in device I/O and
		// still uses the cache and the device: errs says so.
		return errors.Join(errs...)
	}
	if !ended {
		// The settle goroutine still uses the cache and the device.
		return fmt.Errorf("engine: close: writeback, device flush and checkpoint did not end %v after Close's context did (a device that stops answering): acknowledged data since the last fsync may not be durable (recovery replays the log); cache and device left open until the process exits: %w",
			closeAbandonWait, ctx.Err())
	}
	// Every window ended with the drain; the workers stop at closingCh.
	e.raWG.Wait()
	// Every cold read ended with the drain too.
	e.stopColdFinisher()
	e.cache.Close()
	if err := e.dev.Close(); err != nil {
		errs = append(errs, err)
	}
	// The device is closed: no completion can arrive any more.
	e.stopCompleter()
	e.hdrs.close()
	e.scratch.close()
	e.coldScratch.close()
	return errors.Join(errs...)
}

// settleForClose writes everything back, stops the background work,
// settles GC, flushes the device and, if all of that worked,
// checkpoints. With operations still running (abandoned), it takes
// nsMu for the checkpoint: the snapshot must not see a namespace change
// half made. stuck says a background goroutine (a GC pass in device
// I/O) did not stop within closeAbandonWait: it then does no more (GC's
// settling and the checkpoint would wait behind that pass) and the
// cache and device must stay open.
func (e *Engine) settleForClose(abandoned bool) (errs []error, stuck bool) {
	e.forgetUnnamed()
	if err := e.wb.SyncAll(context.Background()); err != nil {
		errs = append(errs, newLostAtClose(err))
	}
	e.cancel()
	if !e.waitBackground(closeAbandonWait) {
		return append(errs, fmt.Errorf("engine: close: background work (a GC pass) still in device I/O after %v (a device that stops answering): no device flush or checkpoint: acknowledged data since the last fsync may not be durable (recovery replays the log); cache and device left open until the process exits", closeAbandonWait)), true
	}
	if err := e.gc.settleAll(); err != nil {
		errs = append(errs, err)
	}
	// A failed append's record (Engine.failedAppend) is superseded
	// before the flush that would make it durable: the closing
	// checkpoint, which would do it too, is skipped when writeback
	// failed. If it cannot be, no flush: unsynced data lost beats
	// fsynced data turned to EIO.
	// Operations held for a pack (metaLog.pend) land before the
	// flush, as before any acknowledging flush: a Close that returns
	// nil acknowledges the deferred creates and removes.
	if err := e.landPending(); err != nil {
		errs = append(errs, fmt.Errorf("engine: close: deferred namespace operations may not be durable: %w", err))
	}
	var settleErr error
	if e.failedAppend.Load() {
		settleErr = e.settleStray()
	}
	if settleErr != nil {
		errs = append(errs, fmt.Errorf("engine: close: no device flush: %w", settleErr))
	} else if err := e.dev.Flush(); err != nil {
		errs = append(errs, fmt.Errorf("engine: close: flush device: data written since the last fsync may not be durable: %w", err))
	}
	if len(errs) == 0 {
		if abandoned {
			e.nsMu.Lock()
			defer e.nsMu.Unlock()
		}
		if err := e.closeCheckpoint(); err != nil {
			errs = append(errs, err)
		}
	}
	return errs, false
}

// closeCheckpoint writes Close's checkpoint, once everything is written
// back and flushed: all data is durable whatever it does, and it only
// spares the next Open replaying the log. So a failure says so, with the
// metadata half's state, rather than read as a failed close of the data.
// The other half refusing its reset (a zone gone read-only) while the
// active one has room left is no failure at all: the log stays open there
// and the next Open goes on in it, as recover does after the same
// refusal; it is logged. A full active half makes the next Open fail its
// own checkpoint, which Close reports (ErrMetaLog).
func (e *Engine) closeCheckpoint() error {
	err := e.checkpoint()
	if err == nil {
		return nil
	}
	m := e.meta
	m.mu.Lock()
	if errors.Is(err, errNextHalfReset) && m.stray.Load() {
		// A failed operation's record may stand, durable (the flush
		// above), in the active half: supersede it there, or the next
		// Open replays an operation that failed.
		if serr := e.supersedeStrayInHalf(); serr != nil {
			err = fmt.Errorf("%w; a failed operation's record may be in metadata half %d, and no checkpoint there supersedes it: %w", err, m.active, serr)
		}
	}
	half, wp, stray := m.active, m.wp, m.stray.Load()
	m.mu.Unlock()
	if errors.Is(err, errNextHalfReset) && wp < e.sb.metaHalfCap() && !stray {
		slog.Warn("engine: close: no closing checkpoint, the other metadata half refuses its reset; all data is durable and the next open replays the log in the active half",
			"half", half, "log_bytes", wp, "half_bytes", e.sb.metaHalfCap(), "err", err)
		return nil
	}
	return fmt.Errorf("engine: close: all data is durable, but no closing checkpoint (metadata half %d, log at %d of %d bytes; the next open replays the log): %w: %w",
		half, wp, e.sb.metaHalfCap(), ErrMetaLog, err)
}

// testHookPressure, if set (by tests only), runs as the cache calls for
// writeback (Config.OnPressure): a writer's dirty data rose past the
// background level, or it is about to wait for memory or writeback.
var testHookPressure func(*Engine)

// waitBackground waits for the background goroutines (writeback,
// retirer, collector), whose context is canceled, to end, for up to
// wait; it reports whether they did. They stop between passes, so only
// one stuck in device I/O that never completes outlasts it.
func (e *Engine) waitBackground(wait time.Duration) bool {
	done := make(chan struct{})
	go func() {
		e.bg.Wait()
		close(done)
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// closeAbandonWait bounds Close's writeback and checkpoint once it has
// stopped waiting for running operations (its context done). They
// usually take no longer than the device I/O they do, but each may wait
// behind an operation still running: for nsMu an operation holds
// across its record's write (a checkpoint, device I/O), for collector.mu
// a writer's GC pass holds across device I/O, for a group flush an fsync
// or a durable operation (create, remove, rename, truncate) runs. An operation that never
// ends (a device that stopped answering) would hold Close for ever.
const closeAbandonWait = 5 * time.Second

// closeAbandoned is the rest of Close once it stopped waiting for
// running operations (ctx is done): it writes back and checkpoints all the same, for
// at most closeAbandonWait, and leaves the cache's memory and the device
// open (a running operation may still use them; process exit releases
// them). If the writeback and checkpoint do not end in time they go on
// in the background, and the error says that acknowledged data since the
// last fsync may not be durable.
func (e *Engine) closeAbandoned(ctx context.Context, running int64, cause error) error {
	errs, ended := e.settleBounded(ctx, true)
	if ended {
		return errors.Join(append(errs, abandoned(e.operations(running), len(errs) == 0, cause))...)
	}
	if len(errs) > 0 { // a background pass stuck: errs says so
		return errors.Join(append(errs, abandoned(e.operations(running), false, cause))...)
	}
	return fmt.Errorf("engine: close: stopped waiting for %s still running, then for %v for the writeback and checkpoint, which wait behind them (a device that stops answering): acknowledged data since the last fsync may not be durable (recovery replays the log); cache and device left open until the process exits: %w",
		e.operations(running), closeAbandonWait, cause)
}

// settleBounded runs settleForClose in a goroutine and waits for it
// until ctx is done, then for at most closeAbandonWait more: a device
// that stops answering holds the writeback or the flush for ever, with
// or without an operation running. ended is false if it gave up; the
// goroutine then goes on and still uses the cache and the device, so
// the caller must leave both open.
//
// This bound and settleForClose's own (waitBackground) are not one: this
// one starts only once ctx is done (Close's is a minute), while a
// background GC pass stuck in device I/O must end Close within
// closeAbandonWait whatever ctx says, and skip GC's settling and the
// checkpoint, which would wait behind that pass
// (TestCloseReturnsWithABackgroundGCPassStuckInTheDevice). Dropping the
// inner bound would hold such a Close for ctx's whole time.
func (e *Engine) settleBounded(ctx context.Context, abandoned bool) (errs []error, ended bool) {
	done := make(chan settled, 1)
	go func() {
		errs, stuck := e.settleForClose(abandoned)
		done <- settled{errs, stuck}
	}()
	select {
	case s := <-done:
		return s.errs, !s.stuck
	case <-ctx.Done():
	}
	t := time.NewTimer(closeAbandonWait)
	defer t.Stop()
	select {
	case s := <-done:
		return s.errs, !s.stuck
	case <-t.C:
		return nil, false
	}
}

// settled is what settleForClose returned: stuck, a background pass
// outlasted it in device I/O, so the cache and device stay open.
type settled struct {
	errs  []error
	stuck bool
}

// lostAtClose is Close's error when writeback fails for dirty data (the
// device fails appends, or has no room for data admitted before it lost
// zones): that data was never fsynced and is lost, everything fsynced is
// on the device. Its text is one short line, naming how many files and
// the first one's error; errors.Is and errors.As see every file's.
type lostAtClose struct {
	files int
	first error
	all   error
}

func newLostAtClose(err error) error {
	l := &lostAtClose{files: 1, first: err, all: err}
	if u, ok := err.(interface{ Unwrap() []error }); ok && len(u.Unwrap()) > 0 {
		l.files, l.first = len(u.Unwrap()), u.Unwrap()[0]
	}
	return l
}

func (l *lostAtClose) Error() string {
	files := "1 file"
	if l.files != 1 {
		files = fmt.Sprintf("%d files", l.files)
	}
	return fmt.Sprintf("engine: close: data never fsynced of %s was not written back and is lost (fsynced data is safe): %v", files, l.first)
}

func (l *lostAtClose) Unwrap() error { return l.all }

// waitUntil blocks until cond holds. cond reads counters that fall as
// appends complete and reads finish (in-flight appends, a zone's writers
// or readers), each of which signals idle when it reaches zero. What it
// waits for may be queued under someone's plug, so it submits what the
// ring holds before it blocks.
func (e *Engine) waitUntil(cond func() bool) {
	for !cond() {
		ch := e.idle.Wait()
		if cond() {
			return
		}
		_ = e.ring.Flush()
		<-ch
	}
}

// Sync writes back every file and flushes the device.
func (e *Engine) Sync(ctx context.Context) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.leave()
	// A failed truncate's undo that owes its commit writes it first
	// (File.settleUndo): a flush without it would make the undo's
	// records durable for recovery to drop, and the sync succeed. One
	// that fails is reported; the other files are written back and
	// flushed all the same (the failed one's held records, durable,
	// are dropped by recovery without the commit: its file comes back
	// as it was before the truncate, or cut, as before the sync).
	var errs []error
	for _, f := range e.owedFiles() {
		// Leaving each file's writeback error for its fsync, as
		// SyncAll does.
		if err := (&File{e: e, f: f}).settleOwed(ctx, false); err != nil {
			errs = append(errs, fmt.Errorf("engine: sync %q: %w", f.name(), err))
		}
	}
	if err := e.wb.SyncAll(ctx); err != nil {
		errs = append(errs, err)
	} else if err := e.flushAcked(ctx, 0); err != nil {
		errs = append(errs, fmt.Errorf("engine: sync: %w", err))
	}
	return errors.Join(errs...)
}

// DropCache writes every file back (Sync) and then evicts every clean
// folio, returning the bytes evicted: what `echo 3 >
// /proc/sys/vm/drop_caches` does for a kernel file system, so that the
// reads after it come from the device. For benchmarks that time device
// reads (bench run's read modes): the files they lay out first stay in
// the cache otherwise, and the reads time the cache. Folios that
// readers or writers running beside it bring in stay; it takes no lock
// of its own (Sync's, then the cache's, one at a time).
func (e *Engine) DropCache(ctx context.Context) (int64, error) {
	if err := e.Sync(ctx); err != nil {
		return 0, err
	}
	if err := e.enter(); err != nil {
		return 0, err
	}
	defer e.leave()
	return e.cache.EvictClean(math.MaxInt64), nil
}

// forgetUnnamed drops what the cache and writeback hold of the files
// removed (or renamed over) while open, for Close: nothing of them
// survives the restart (their removal was logged), so writing their
// dirty data back would cost the device the bytes and, on a device that
// refuses them, report acknowledged data lost for files nobody can name.
// idMu is a leaf: the files are listed under it, then forgotten without
// a lock (forgetCached must not hold nsMu).
func (e *Engine) forgetUnnamed() {
	for _, f := range e.unnamedList() {
		e.forgetCached(f)
	}
}

// unnamedList lists the files unnamed while open, under idMu (a leaf:
// the caller looks at each without it).
func (e *Engine) unnamedList() []*file {
	var unnamed []*file
	e.idMu.RLock()
	for _, f := range e.byID {
		if f.unnamed.Load() {
			unnamed = append(unnamed, f)
		}
	}
	e.idMu.RUnlock()
	return unnamed
}

// owedFiles lists the files whose failed truncate's undo owes its commit.
// idMu is a leaf: the files are listed under it, then asked each under
// its file.mu alone.
func (e *Engine) owedFiles() []*file {
	e.idMu.RLock()
	files := make([]*file, 0, len(e.byID))
	for _, f := range e.byID {
		files = append(files, f)
	}
	e.idMu.RUnlock()
	owed := files[:0]
	for _, f := range files {
		if f.undoOwed() {
			owed = append(owed, f)
		}
	}
	return owed
}

// name is f's name as of the last rename.
func (f *file) name() string { return *f.nm.Load() }

// setName changes f's name; a rename holds f.mu as it does.
func (f *file) setName(name string) { f.nm.Store(&name) }

// Geometry is the device's geometry.
func (e *Engine) Geometry() zns.Geometry { return e.geo }

// GCConfig is the garbage collector's configuration as the engine runs
// it: defaults filled in, the streams chosen, the reserve and watermarks
// grown for them.
func (e *Engine) GCConfig() GCConfig {
	c := e.cfg.GC
	c.Streams = e.placer.gcStreams
	return c
}

// OpenBudget is the data zones placement keeps open for appends at
// once (Config.OpenZones, or the engine's choice): beside them, GC keeps
// a zone per stream (GCConfig.Streams).
func (e *Engine) OpenBudget() int { return e.placer.budget }

// Capacity is the bytes the data zones hold.
func (e *Engine) Capacity() int64 {
	var n int64
	for _, z := range e.placer.zones {
		n += z.cap
	}
	return n
}

// Superblock is the device's superblock.
func (e *Engine) Superblock() Superblock { return e.sb }

// drain waits, Close having begun, until no operation enter admitted is
// running, or ctx is done (an error that says how many still are).
func (e *Engine) drain(ctx context.Context) (int64, error) {
	for {
		ch := e.idle.Wait()
		n := e.active.Load() & activeCount
		if n == 0 {
			return 0, nil
		}
		_ = e.ring.Flush() // what they wait for may be queued under a plug
		select {
		case <-ch:
		case <-ctx.Done():
			return n, ctx.Err()
		}
	}
}

// abandoned is Close's error when it stopped waiting for running
// operations (drain's error cause). durable says whether everything
// acknowledged was written back, flushed and checkpointed all the same
// (if not, the errors joined to this one say what was lost).
func abandoned(ops string, durable bool, cause error) error {
	state := "all acknowledged data is durable"
	if !durable {
		state = "see the other errors for data not made durable"
	}
	return fmt.Errorf("engine: close: stopped waiting for %s still running: a write or deferred namespace change among them fails with ErrClosed (nothing writes it back); %s; cache and device left open: %w",
		ops, state, cause)
}

// operations says what the n operations Close stopped waiting for are:
// "1 operation", "n operations", with the readahead windows among them
// apart ("1 operation and 3 readahead windows"): a window is background
// work for a reader, and counted as a request it made a daemon's exit
// line report requests nobody sent.
func (e *Engine) operations(n int64) string {
	windows := min(max(e.raActive.Load(), 0), n)
	ops := report.Plural(n-windows, "operation")
	switch {
	case windows == 0:
		return ops
	case n == windows:
		return report.Plural(windows, "readahead window")
	}
	return ops + " and " + report.Plural(windows, "readahead window")
}

// blockPool is a fixed set of BlockSize buffers in page-aligned memory
// outside the Go heap (O_DIRECT needs the alignment), for record headers.
type blockPool struct {
	mem  []byte
	free chan int
	ring *uring.Ring
	zero []byte // one zero block, never handed out
}

func newBlockPool(r *uring.Ring, n int) (*blockPool, error) {
	mem, err := unix.Mmap(-1, 0, (n+1)*BlockSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("engine: map header blocks: %w", err)
	}
	p := &blockPool{mem: mem, free: make(chan int, n), ring: r, zero: mem[n*BlockSize:]}
	for i := range n {
		p.free <- i
	}
	return p, nil
}

func (p *blockPool) size() int { return cap(p.free) }

// get takes a block, flushing the ring before it waits so that the
// appends holding blocks can complete.
func (p *blockPool) get() (int, []byte) {
	var i int
	select {
	case i = <-p.free:
	default:
		_ = p.ring.Flush()
		i = <-p.free
	}
	return i, p.mem[i*BlockSize : (i+1)*BlockSize]
}

func (p *blockPool) put(i int) { p.free <- i }

func (p *blockPool) close() { _ = unix.Munmap(p.mem) }

// counters are the engine's cumulative stats.
type counters struct {
	hostWritten, hostRead          atomic.Int64
	devData, devHeaders, devPad    atomic.Int64
	devRead                        atomic.Int64
	appends, appendErrs, readErrs  atomic.Int64
	readRetries                    atomic.Int64
	csumErrs, sumReads             atomic.Int64
	coldReads, coldLate, coldAgain atomic.Int64
	gcRead, gcWritten, gcResets    atomic.Int64
	gcSealed, gcCopied, gcFailed   atomic.Int64
	gcVictimsFailed                atomic.Int64
	gcVictimsChanged               atomic.Int64
	finishErrs                     atomic.Int64
	gcNanos, gcRuns, gcActive      atomic.Int64
	metaWritten, checkpoints       atomic.Int64
	// ckptWritten is the part of metaWritten that checkpoints wrote;
	// metaOps the bytes of the log's operation records, by kind.
	ckptWritten          atomic.Int64
	metaOps              [opVoid + 1]atomic.Int64
	gcHeaders, split     atomic.Int64
	writeNanos, writeOps atomic.Int64
	throttleNanos        atomic.Int64
	startTime            time.Time
}
