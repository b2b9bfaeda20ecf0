package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/uring"
	"github.com/zonefold/zonefold/zns"
)

// metaLog appends namespace operations and checkpoints to the active
// metadata zone and switches zones with a fresh checkpoint when it fills.
// Callers hold the engine's nsMu (shared or exclusive) so that a
// checkpoint sees a still namespace.
type metaLog struct {
	e      *Engine
	mu     sync.Mutex
	active int   // index into the superblock's MetaZones
	wp     int64 // next free byte in the active zone, from its start
	block  []byte
	w      *uring.Waiter
	// needFlush is the ticket (see flushGroup) of the latest operation
	// logged without a device flush: a flush numbered that or later
	// makes every such operation durable (see appendOp).
	needFlush atomic.Uint64
	// switchFails counts the half switches for operations (switchForOp)
	// that failed in a row (their checkpoint, or the record after it),
	// until a record lands (opLanded); from the second on, no operation tries one
	// before switchRetryAt, and each fails at once with switchErr, the
	// last failure's (see switchBackoff). Under mu.
	switchFails   int
	switchRetryAt time.Time
	switchErr     error
	// stray is set (under mu) while the active half's log may hold,
	// past its checkpoint, the record of an operation that failed
	// (ErrMetaLog): its write failed, and the device may have written
	// it all the same. Any device flush can make it durable, and
	// recovery would then replay an operation its caller was told did
	// not happen. A checkpoint in the other half supersedes it and
	// clears stray, or one after it in the active half's own log when
	// the other refuses its reset (supersedeStrayInHalf); until one
	// does, nothing is acknowledged as durable (settleStray).
	stray atomic.Bool
	// strayFrom is, while stray is set, where in the active half the
	// first failed record since the log was last known whole begins:
	// recovery reads nothing at or past the first record it cannot
	// read, so a log that ends there holds no failed record recovery
	// replays (supersedeStrayInHalf). Under mu.
	strayFrom int64
	// nextVoidsEnd, when not zero, is where the log of the half that is
	// not active ends after what a switch that failed wrote there: the
	// opVoids (writeCheckpoint, or recovery found them), and its
	// checkpoint if that landed whole (its flush failed). From that
	// switch's data flush on, the voids are the only durable ones of
	// the records they name, and resetting the half erased them until
	// they were written again (TestVoidRetryKeepsDurableVoids). The next
	// switch appends after them instead, where the device's write
	// pointer is there too (nothing of a failed write landed).
	// nextVoided is how many of Engine.failedSeqs they name. Under mu;
	// a checkpoint that lands clears both.
	nextVoidsEnd int64
	nextVoided   int
	// pend are operations logged (numbered, and applied by their
	// callers before they release nsMu) whose record is not written
	// yet, in number order: on a device of format superPackVersion,
	// a deferred create or remove (ODeferSync, RemoveDeferred, the
	// remove at a last close; never a rename) is held here (writeOp,
	// pack) and
	// packed with the ones logged after it into one record (metaPack),
	// written when an operation that is not held is logged, when the
	// next one no longer fits one block, or by the first flushAcked
	// (every acknowledging flush, which lands them first: landPending).
	// A checkpoint that lands holds them (they are applied: every
	// checkpoint runs under nsMu, which their callers hold exclusive
	// from their number to their apply) and drops them. A write of
	// them that fails leaves them applied with no record
	// (Engine.unlogged). pendLen is their pack's payload bytes. Under
	// mu; pending mirrors len(pend) != 0 for readers without it.
	pend    []nsOp
	pendLen int
	pending atomic.Bool
}

// pendTicket is the ticket writeOp returns for an operation it holds
// (metaLog.pend): no flush covers it until it lands. flushAcked lands
// what is held, and takes the flush that covers it instead
// (Engine.ticketAfterLanding).
const pendTicket = uint64(1) << 63

// dropPending forgets the held operations (a checkpoint holds them, or
// a write of them failed). m.mu held.
func (m *metaLog) dropPending() {
	m.pend, m.pendLen = m.pend[:0], 0
	m.pending.Store(false)
}

// markStray records that the active half may hold a failed record at
// m.wp, before m.wp is given up. m.mu is held.
func (m *metaLog) markStray() {
	if !m.stray.Load() {
		m.strayFrom = m.wp
	}
	m.stray.Store(true)
}

// Backoff of metadata half switches after failed ones: a dead metadata
// log (neither half takes writes) made every namespace operation pay a
// whole checkpoint (every append stopped, a device flush, a reset) to
// learn it again. The first failure is retried at once by the next
// operation (a single transient fault costs one operation); from the
// second failure in a row the wait starts at switchBackoffMin and doubles
// up to switchBackoffMax. Variables for tests only, which make the wait
// longer than any test so that no clock decides what they see.
var (
	switchBackoffMin = 50 * time.Millisecond
	switchBackoffMax = 5 * time.Second
)

// switchBackoff is the wait before the next switch after fails failed
// ones in a row.
func switchBackoff(fails int) time.Duration {
	if fails < 2 {
		return 0
	}
	return min(switchBackoffMin<<min(fails-2, 16), switchBackoffMax)
}

func newMetaLog(e *Engine) (*metaLog, error) {
	blk, err := unix.Mmap(-1, 0, BlockSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("engine: map metadata block: %w", err)
	}
	return &metaLog{e: e, block: blk, w: uring.NewWaiter()}, nil
}

func (m *metaLog) close() { _ = unix.Munmap(m.block) }

// logOp makes op durable in the metadata log before it returns. op.seq,
// if zero, is assigned here, after any zone switch, so that a checkpoint
// never claims an operation it does not contain.
func (e *Engine) logOp(op nsOp) error { return e.appendOp(op, true, nil) }

// appendOp writes op's record to the metadata log (logOpRecord) and, if
// flush, flushes the device. Without flush the record has landed when
// appendOp returns but is durable only from the device's next flush,
// which covers every write completed before it: any logOp, a file's
// Sync, SyncNamespace, GC's logged reset (so no zone is reset while a
// deferred remove that made its data garbage could still be lost). The
// caller holds nsMu across it, so across the flush: a durable remove,
// rename or truncate calls logOpRecord under nsMu and awaitOp after
// releasing it instead, so that such operations share flushes.
func (e *Engine) appendOp(op nsOp, flush bool, apply func()) error {
	t, err := e.logOpRecord(op, flush, false, apply)
	if err != nil || !flush {
		return err
	}
	if e.owesCheckpoint() {
		// An append failed since the settle (writeback runs beside
		// namespace operations): the flush would make its record
		// durable with no checkpoint after it
		// (TestH17cAppendFailingDuringDurableOpRecordIsSettled). The
		// operation is applied now, so the checkpoint holds it, and
		// its flush (quiesced, after it voids the failed records)
		// makes the operation's record durable too. nsMu is held:
		// settleStray would take it again.
		e.meta.mu.Lock()
		err := e.settleStrayLocked()
		e.meta.mu.Unlock()
		if err != nil {
			return fmt.Errorf("engine: log operation (applied, not durable): %w", err)
		}
	}
	if err := e.flushes.flushFor(context.Background(), e.dev, t); err != nil {
		return fmt.Errorf("engine: log operation: flush: %w", err)
	}
	return nil
}

// logOpRecord writes op's record to the metadata log and returns the
// ticket of the flush that makes it durable (awaitOp). The caller holds
// nsMu (shared or exclusive).
//
// apply, if set, applies the operation to memory once its record is
// written and before it is made durable (the caller holds nsMu, so no
// one sees it before the record has landed): a checkpoint that settles
// a failed append after the record then holds the operation. If making
// it durable fails, the operation stays applied, as a kernel file
// system's unlink or rename stays when its directory's fsync fails, and
// the error says so.
//
// The record's flush (awaitOp) needs no lock: the next operation's
// record follows this one in the log whatever the flush does, and a
// device flush covers every write completed before it, so the flush of
// any operation that saw this one applied (logged after it), or of an
// fsync that started after it landed, makes this one durable too, and a
// recovery replays the log's records in order up to the first it cannot
// read: never a later operation without this one. So durable operations
// that arrive while a flush runs share the next one (group commit)
// instead of each waiting, under nsMu, for the one before it.
//
// With pack, on a device of format superPackVersion, the record may be
// held (metaLog.pend) and written with the operations logged after it,
// in one record: the ticket is then pendTicket, which awaitOp and
// flushAcked take as the flush after the record lands (they land it).
// Only an operation applied before its caller releases nsMu, held
// exclusive, is held (the deferred creates and removes pass pack; a
// rename never does): a checkpoint, under nsMu, then finds it applied
// and holds it.
func (e *Engine) logOpRecord(op nsOp, flush, pack bool, apply func()) (uint64, error) {
	if flush && e.failedAppend.Load() {
		// The flush would make a failed append's record durable: the
		// checkpoint that supersedes it comes first (settleStray; the
		// caller holds nsMu), so that the operation's record follows
		// it. A checkpoint after the record must hold the operation,
		// applied by then (below): one numbered above the record
		// without it in its snapshot made recovery, which takes the
		// checkpoint and skips what it numbers below, undo an
		// acknowledged remove or rename
		// (TestH17bDurableOpAfterFailedAppendSurvivesPowerCut).
		e.meta.mu.Lock()
		err := e.settleStrayLocked()
		e.meta.mu.Unlock()
		if err != nil {
			return 0, fmt.Errorf("engine: log operation: %w", err)
		}
	}
	t, err := e.writeOp(op, pack)
	if err != nil {
		return 0, err
	}
	if apply != nil {
		apply()
	}
	return t, nil
}

// awaitOp makes durable an operation whose record logOpRecord wrote
// (ticket t), as an fsync does (flushAcked): the checkpoint the log owes
// first (an append or an operation that failed since the record was
// written, say: writeback runs beside namespace operations, and the
// flush would make its record durable with no checkpoint after it,
// TestH17cAppendFailingDuringDurableOpRecordIsSettled; the operation is
// applied, so the checkpoint holds it, and its flush makes the
// operation's record durable too), then a flush numbered t or later,
// then the settle again: an operation that failed between the two left
// a record that flush made durable, which must not undo this ack
// (TestFailedOpBetweenSettleAndFlushNeverUndoesTheAck). The caller holds
// no engine lock but wmu.
func (e *Engine) awaitOp(t uint64) error {
	if err := e.flushAcked(context.Background(), t); err != nil {
		return fmt.Errorf("engine: log operation (applied, not durable): %w", err)
	}
	return nil
}

// metaShrinkRoom is the log a create or rename leaves free after it in
// the active metadata half, for operations that shrink the namespace.
const metaShrinkRoom = 16 * BlockSize

// ErrMetaLog is what a namespace operation returns when its record can
// be written in neither metadata half: the one it was meant for failed
// the write and the switch to the other (a checkpoint there) failed too,
// or the record failed there as well. Nothing of the operation is
// applied, and a later operation tries the switch again (after a
// backoff once switches failed twice in a row: see switchBackoff).
// Its record may be on the device all the same (a write that failed
// may have landed): a crash before anything else is acknowledged may
// find the operation done, as one in flight at a crash, but the next
// fsync, Engine.Sync, SyncNamespace or namespace operation first
// writes the checkpoint in the other half that supersedes the record,
// or fails with ErrMetaLog too (settleStray), so the record can never
// undo what is acknowledged after the failure. A deferred create or
// remove whose record is held for a pack (metaLog.pend) has been
// answered when its record is written: if that write fails, it stays
// applied with no record (Engine.unlogged), and the next acknowledging
// flush writes the checkpoint that holds it, or fails with ErrMetaLog.
var ErrMetaLog = fmt.Errorf("engine: the metadata log takes no writes: %w", syscall.EIO)

// writeOp writes op's record and returns the ticket of the flush that
// makes it durable (see flushGroup), which SyncNamespace waits for too.
//
// A failed write of the record ends the active half's log: the device
// may have written all, some or none of it (a failed write on a real
// zoned device can move the write pointer; a zone gone read-only takes
// nothing), so no offset there is known to be where the next record
// goes. The log switches to the other half with a checkpoint, as when a
// half fills, and the operation is logged there once more under a number
// taken after the checkpoint's. Recovery cannot take the failed record:
// once the checkpoint is durable it reads operations only from the
// checkpoint's half, and before that the old half's log ends at a torn
// record or holds an operation whose caller was never answered (an
// operation in flight at a crash). An operation its caller numbered
// (op.seq set) is never renumbered; a switch before it fails it instead,
// since the checkpoint would number above it and recovery would skip it.
func (e *Engine) writeOp(op nsOp, pack bool) (uint64, error) {
	m := e.meta
	m.mu.Lock()
	defer m.mu.Unlock()
	payload := encodeOp(op)
	n := metaRecordLen(len(payload))
	var room int64
	if op.kind == opCreate || op.kind == opRename {
		// Operations that can grow the namespace leave room behind
		// them for ones that shrink it or free data space (removes,
		// truncates, GC's resets): a namespace too large for its
		// metadata half can always be cut back.
		room += metaShrinkRoom
	}
	numbered := op.seq != 0
	room += metaVoidRoom
	packs := e.sb.Version >= superPackVersion && !numbered
	if packs && pack && 4+packOpHdr+len(payload) <= maxPackLen {
		return e.holdOp(op, len(payload), room)
	}
	// With operations held, this one's record carries them (a pack),
	// if they fit one block together; else they are written first.
	if len(m.pend) > 0 && (!packs || 4+m.pendLen+packOpHdr+len(payload) > maxPackLen) {
		if err := e.landPendingLocked(); err != nil {
			return 0, err
		}
	}
	if len(m.pend) > 0 {
		n = BlockSize
	}
	if m.wp+n+room > e.sb.metaHalfCap() {
		// A switch's checkpoint holds the held operations too.
		if err := e.switchForOp(numbered, n+room, nil); err != nil {
			return 0, err
		}
		if len(m.pend) == 0 {
			n = metaRecordLen(len(payload))
		}
	}
	if !numbered {
		op.seq = e.seq.Add(1)
	}
	ops := append(m.pend, op)
	err := e.writeOpsRecord(ops, n)
	if err == nil {
		return e.opsLanded(ops, n), nil
	}
	if len(m.pend) > 0 {
		// The held operations are applied; their record failed. The
		// checkpoint below holds them, or, if it fails, the next one
		// (unlogged: every acknowledging flush settles it first).
		e.setUnlogged(unloggedPack)
		m.dropPending()
	}
	n = metaRecordLen(len(payload))
	// Until a checkpoint in the other half succeeds (and clears it).
	m.markStray()
	werr := fmt.Errorf("engine: log operation in metadata half %d at %d: %w", m.active, m.wp, err)
	if err := e.switchForOp(numbered, n+room, werr); err != nil {
		return 0, err
	}
	op.seq = e.seq.Add(1) // above the checkpoint's: recovery replays it
	if err := e.writeOpsRecord([]nsOp{op}, n); err != nil {
		// This half's log ends here too: the next operation switches
		// back (and fails while the other half still refuses). The
		// record may stand past the checkpoint just written.
		m.markStray()
		m.wp = e.sb.metaHalfCap()
		err = fmt.Errorf("%w: %w; again in metadata half %d after a checkpoint: %w", ErrMetaLog, werr, m.active, err)
		e.switchFailed(err) // the switch landed, but the log takes no records
		return 0, err
	}
	return e.opsLanded([]nsOp{op}, n), nil
}

// holdOp numbers op, whose payload is l bytes, and holds it
// (metaLog.pend) for the record of the operations logged after it
// (writeOp with pack): it returns pendTicket. The log keeps a block for
// the held operations' record and room after it (their own, as writeOp
// keeps). m.mu held.
func (e *Engine) holdOp(op nsOp, l int, room int64) (uint64, error) {
	m := e.meta
	if len(m.pend) > 0 && 4+m.pendLen+packOpHdr+l > maxPackLen {
		if err := e.landPendingLocked(); err != nil {
			return 0, err
		}
	}
	if m.wp+BlockSize+room > e.sb.metaHalfCap() {
		if err := e.switchForOp(false, BlockSize+room, nil); err != nil {
			return 0, err
		}
	}
	op.seq = e.seq.Add(1)
	if len(m.pend) == 0 {
		m.pendLen = 4
	}
	m.pend = append(m.pend, op)
	m.pendLen += packOpHdr + l
	m.pending.Store(true)
	return pendTicket, nil
}

// landPendingLocked writes the held operations' record (metaLog.pend)
// at the log's end. If the half has no room for it, or the write fails,
// the half switch holds them (its checkpoint), as for an operation's
// record; if that fails too, they stay applied with no record
// (Engine.unlogged) and the error says so. nsMu (shared or exclusive)
// and m.mu held.
func (e *Engine) landPendingLocked() error {
	m := e.meta
	if len(m.pend) == 0 {
		return nil
	}
	if m.wp+BlockSize+metaVoidRoom > e.sb.metaHalfCap() {
		if err := e.switchForOp(false, metaVoidRoom, nil); err != nil {
			return err
		}
		if len(m.pend) == 0 {
			return nil
		}
	}
	ops := m.pend
	err := e.writeOpsRecord(ops, BlockSize)
	if err == nil {
		e.opsLanded(ops, BlockSize)
		return nil
	}
	m.markStray()
	werr := fmt.Errorf("engine: log %d operations in metadata half %d at %d: %w", len(ops), m.active, m.wp, err)
	// Applied with no record from here, as writeOp's held operations
	// are when their record fails: set before the switch, whose
	// checkpoint (or, the other half refusing its reset, the one in
	// this half that supersedes the record) holds them and clears it.
	// Set after it, a switch that failed though that checkpoint held
	// them left them owing one more
	// (TestH42eLandedPackSupersededInHalfIsNotUnlogged).
	e.setUnlogged(unloggedPack)
	m.dropPending()
	return e.switchForOp(false, metaVoidRoom, werr)
}

// landPending writes the held operations' record (landPendingLocked)
// for a caller that holds no engine lock but wmu, collector.mu or
// neither: an acknowledging flush (flushAcked). It takes nsMu shared
// and metaLog.mu, as settleStray does.
func (e *Engine) landPending() error {
	m := e.meta
	if !m.pending.Load() {
		return nil
	}
	e.nsMu.RLock()
	defer e.nsMu.RUnlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	return e.landPendingLocked()
}

// switchForOp checkpoints into the other metadata half for an operation
// that needs need bytes of log: the active half is full (failed nil) or
// refused its record (failed, that write's error). m.mu is held.
func (e *Engine) switchForOp(numbered bool, need int64, failed error) error {
	m := e.meta
	if failed != nil {
		// Whatever happens next, nothing more is written at m.wp.
		m.wp = e.sb.metaHalfCap()
	}
	if numbered {
		err := fmt.Errorf("engine: log operation: a metadata half switch would number its checkpoint above an operation numbered before it: %w", ErrMetaLog)
		if failed != nil {
			err = fmt.Errorf("%w: %w", failed, err)
		}
		return err
	}
	if now := time.Now(); now.Before(m.switchRetryAt) {
		err := fmt.Errorf("%w: no metadata half switch before %v after %d failed in a row, the last: %w",
			ErrMetaLog, m.switchRetryAt.Sub(now).Round(time.Millisecond), m.switchFails, m.switchErr)
		if failed != nil {
			err = fmt.Errorf("%w; %w", failed, err)
		}
		return err
	}
	if err := e.checkpointLocked(); err != nil {
		if !errors.Is(err, ErrNoSpace) {
			e.switchFailed(err)
		}
		if failed != nil && errors.Is(err, errNextHalfReset) {
			// The checkpoint flushed the device before the reset
			// failed: the failed record, if it landed, is durable.
			// Supersede it in this half's own log while the
			// operation still fails (settleStray tries again later).
			if serr := e.supersedeStrayInHalf(); serr != nil {
				err = fmt.Errorf("%w; no checkpoint in its own half either: %w", err, serr)
			}
		}
		switch {
		case failed != nil:
			return fmt.Errorf("%w: %w; switching metadata halves: %w", ErrMetaLog, failed, err)
		case errors.Is(err, ErrNoSpace):
			return err
		}
		return fmt.Errorf("%w: the active half is full: %w", ErrMetaLog, err)
	}
	if m.wp+need > e.sb.metaHalfCap() {
		// Format sizes the halves for the largest checkpoint the
		// data zones can call for; a namespace larger still (files
		// without data beyond that allowance) leaves no room.
		return fmt.Errorf("engine: log operation: a %d-byte metadata half holds a %d-byte checkpoint and no %d-byte operation after it: %w",
			e.sb.metaHalfCap(), m.wp, need, ErrNoSpace)
	}
	return nil
}

// switchFailed counts a half switch for an operation that failed with
// err (its checkpoint, or the record after it) and sets the backoff
// before the next (switchBackoff). m.mu is held.
func (e *Engine) switchFailed(err error) {
	m := e.meta
	m.switchFails++
	m.switchErr = err
	m.switchRetryAt = time.Now().Add(switchBackoff(m.switchFails))
}

// writeOpRecord writes op's n-byte record at the active half's m.wp.
func (e *Engine) writeOpRecord(op nsOp, payload []byte, n int64) error {
	m := e.meta
	encodeMeta(m.block[:n], e.sb.FS(), metaOp, op.seq, payload)
	return e.writeMeta(m.active, m.wp, m.block[:n], m.w)
}

// writeOpsRecord writes the n-byte record of ops (numbered, in order)
// at the active half's m.wp: one operation's (metaOp), or a pack of
// them (metaPack), which fits n, one block.
func (e *Engine) writeOpsRecord(ops []nsOp, n int64) error {
	if len(ops) == 1 {
		return e.writeOpRecord(ops[0], encodeOp(ops[0]), n)
	}
	m := e.meta
	last := ops[len(ops)-1].seq
	encodeMeta(m.block[:n], e.sb.FS(), metaPack, last, encodePack(ops))
	return e.writeMeta(m.active, m.wp, m.block[:n], m.w)
}

// testHookMetaWrite, if set (by tests only), runs before a record or a
// checkpoint (data) is written to metadata half h at offset off; an
// error it returns is that write's.
var testHookMetaWrite func(e *Engine, h int, off int64, data []byte) error

// opLanded accounts the n-byte record of op alone, which has landed and
// carries none of the held operations (an opVoid a checkpoint writes
// with operations held, voidFailedLocked): they stay held, for the next
// record or checkpoint to carry. Forgotten there, they were applied with
// no record and nothing to say so, and the next pack went without them:
// a cut that kept the log's unflushed writes replayed a deferred create
// without the deferred remove before it
// (TestH42bVoidKeepsHeldOps). It returns the ticket of the flush that
// makes the record durable.
func (e *Engine) opLanded(op nsOp, n int64) uint64 {
	return e.recordLanded([]nsOp{op}, n)
}

// opsLanded accounts the n-byte record of ops, which has landed and
// carries the held operations (they are its first ones, or there are
// none), which it forgets, and returns the ticket of the flush that
// makes it durable.
func (e *Engine) opsLanded(ops []nsOp, n int64) uint64 {
	m := e.meta
	t := e.recordLanded(ops, n)
	if len(m.pend) > 0 {
		// After needFlush: a flushAcked that finds none held takes
		// the ticket that covers them (ticketAfterLanding).
		m.dropPending()
	}
	return t
}

// recordLanded accounts the n-byte record of ops, which has landed, and
// returns the ticket of the flush that makes it durable. The bytes count
// to the operations' kinds in equal shares. m.mu held.
func (e *Engine) recordLanded(ops []nsOp, n int64) uint64 {
	m := e.meta
	m.wp += n
	if m.switchFails != 0 {
		// The log takes records again: no backoff.
		m.switchFails, m.switchErr, m.switchRetryAt = 0, nil, time.Time{}
	}
	e.stats.metaWritten.Add(n)
	for i, op := range ops {
		share := n / int64(len(ops))
		if i == len(ops)-1 {
			share = n - share*int64(len(ops)-1)
		}
		e.stats.metaOps[op.kind].Add(share)
	}
	// The record has landed: the next flush to start covers it.
	t := e.flushes.ticket()
	for old := m.needFlush.Load(); old < t && !m.needFlush.CompareAndSwap(old, t); old = m.needFlush.Load() {
	}
	return t
}

// writeMeta writes data (aligned memory) at offset off of metadata half
// h's log, through as many of its zones as it spans. Each zone is written
// to its capacity before the next one opens, so a half holds at most one
// active zone.
func (e *Engine) writeMeta(h int, off int64, data []byte, w *uring.Waiter) error {
	if testHookMetaWrite != nil {
		if err := testHookMetaWrite(e, h, off, data); err != nil {
			return err
		}
	}
	for len(data) > 0 {
		z, zoff := e.sb.metaAt(h, off)
		n := min(int64(len(data)), e.sb.ZoneCap-zoff)
		if err := e.writeZone(z, zoff, data[:n], w); err != nil {
			return err
		}
		data, off = data[n:], off+n
	}
	return nil
}

// readMeta reads len(buf) bytes at offset off of metadata half h's log.
func (e *Engine) readMeta(h int, off int64, buf []byte, w *uring.Waiter) error {
	for len(buf) > 0 {
		z, zoff := e.sb.metaAt(h, off)
		n := min(int64(len(buf)), e.sb.ZoneCap-zoff)
		if err := e.readDev(int64(z)*e.geo.ZoneSize+zoff, buf[:n], w); err != nil {
			return err
		}
		buf, off = buf[n:], off+n
	}
	return nil
}

// writeZone writes data (aligned memory) at offset off of zone, in pieces
// no larger than the device's max append, waiting for each.
func (e *Engine) writeZone(zoneIdx int, off int64, data []byte, w *uring.Waiter) error {
	start := int64(zoneIdx) * e.geo.ZoneSize
	chunk := e.geo.MaxAppend / BlockSize * BlockSize
	for done := 0; done < len(data); {
		n := min(chunk, len(data)-done)
		bufs := [][]byte{data[done : done+n]}
		if err := e.dev.Write(zoneIdx, start+off+int64(done), bufs, w); err != nil {
			return err
		}
		res := e.ring.Wait(w)
		if err := res.Err("write"); err != nil {
			return err
		}
		if int(res.Res) != n {
			return fmt.Errorf("engine: short metadata write: %d of %d bytes", res.Res, n)
		}
		done += n
	}
	return nil
}

// readDev reads len(buf) bytes at device offset off, in pieces no larger
// than the device's max append.
func (e *Engine) readDev(off int64, buf []byte, w *uring.Waiter) error {
	chunk := e.geo.MaxAppend / BlockSize * BlockSize
	for done := 0; done < len(buf); {
		n := min(chunk, len(buf)-done)
		err := e.dev.Read(off+int64(done), buf[done:done+n], w)
		if err == nil {
			err = e.ring.Wait(w).Err("read")
		}
		if err != nil {
			e.kickOffline() // a zone may have gone offline
			return err
		}
		done += n
	}
	return nil
}

// checkpoint writes a checkpoint to the other metadata zone.
func (e *Engine) checkpoint() error {
	e.meta.mu.Lock()
	defer e.meta.mu.Unlock()
	return e.checkpointLocked()
}

// errNextHalfReset marks a checkpoint that failed resetting the half it
// was for, before it changed anything in the active half.
var errNextHalfReset = errors.New("the other metadata half refuses its reset")

// checkpointLocked stops appends, snapshots the file system and writes it
// to the metadata zone that is not active, which then becomes active. The
// old zone keeps the previous checkpoint until the next switch.
func (e *Engine) checkpointLocked() error { return e.writeCheckpoint(false) }

// checkpointInHalf appends a checkpoint to the active half's own log,
// for recovery when the other half refuses its reset (a zone gone
// read-only): recovery's decisions (undo records it dropped, held
// extents it never committed, zones it found dead) are durable only in
// a checkpoint, and the next record of a file that carries a size would
// otherwise commit at the next recovery what this one dropped. Recovery
// takes the highest checkpoint in a half and the operations after it in
// that half, so it supersedes the log before it as a switch does.
func (e *Engine) checkpointInHalf() error {
	e.meta.mu.Lock()
	defer e.meta.mu.Unlock()
	return e.writeCheckpoint(true)
}

// voidFailedLocked logs, in the active half, opVoids naming the appends
// that failed since the last checkpoint and have none yet (see
// Engine.failedAppend), before a device flush makes their records
// durable along with everything else: landed before that flush, they are
// as durable, and a recovery from the last checkpoint skips the records
// they name. A checkpoint calls it, quiesced, before its data flush (the
// checkpoint supersedes the records, but is written only after that
// flush). Every half keeps room for one (metaVoidRoom: a log other
// records filled to the end is no exception). It returns false if some
// are left: no room (a half a failed switch finished, a burst of more
// than maxVoids failures), or a failed write, which ends the half's log
// where it is not known (stray, as an operation's failed record does:
// settleStray's checkpoint supersedes whatever landed). A switch then
// voids them all in the next half (writeCheckpoint). metaLog.mu held.
func (e *Engine) voidFailedLocked() bool {
	m := e.meta
	voids := e.failedSince(e.voided)
	for len(voids) > 0 {
		op := nsOp{kind: opVoid, voids: voids[:min(len(voids), maxVoids)]}
		payload := encodeOp(op)
		n := metaRecordLen(len(payload))
		if m.wp+n > e.sb.metaHalfCap() {
			return false
		}
		op.seq = e.seq.Add(1)
		if err := e.writeOpRecord(op, payload, n); err != nil {
			m.markStray()
			m.wp = e.sb.metaHalfCap()
			slog.Warn("engine: voiding failed appends' records failed", "records", len(voids), "half", m.active, "err", err)
			return false
		}
		e.opLanded(op, n)
		e.failedMu.Lock()
		e.voided += len(op.voids)
		e.failedMu.Unlock()
		voids = voids[len(op.voids):]
	}
	return true
}

// failedSince returns the numbers of the appends that failed since the
// last checkpoint, from the from'th on.
func (e *Engine) failedSince(from int) []uint64 {
	e.failedMu.Lock()
	defer e.failedMu.Unlock()
	return append([]uint64(nil), e.failedSeqs[from:]...)
}

// voidOps numbers and encodes the opVoid records that name seqs, up to
// maxVoids each. It allocates, but only after appends failed.
func (e *Engine) voidOps(seqs []uint64) [][]byte {
	var recs [][]byte
	for len(seqs) > 0 {
		op := nsOp{kind: opVoid, voids: seqs[:min(len(seqs), maxVoids)], seq: e.seq.Add(1)}
		payload := encodeOp(op)
		rec := make([]byte, metaRecordLen(len(payload)))
		encodeMeta(rec, e.sb.FS(), metaOp, op.seq, payload)
		recs = append(recs, rec)
		seqs = seqs[len(op.voids):]
	}
	return recs
}

// voidsLen is the bytes voidOps's records take.
func voidsLen(recs [][]byte) (n int64) {
	for _, r := range recs {
		n += int64(len(r))
	}
	return n
}

// nextHalfVoidsEnd is where a switch to half h appends, after the voids
// a failed one left there (metaLog.nextVoidsEnd), or 0 if it resets the
// half: there are none, or the device's write pointer is not where they
// end (some of the failed checkpoint landed, and recovery would read
// nothing after it). A half with a zone gone read-only or offline takes
// neither: that is an error, as its reset's would be (errNextHalfReset:
// the active half is left as it was; TestH19eRecoveryOpensWhenTheVoidsHalfWentReadOnly).
// metaLog.mu held.
func (e *Engine) nextHalfVoidsEnd(h int) (int64, error) {
	m := e.meta
	if m.nextVoidsEnd == 0 {
		return 0, nil
	}
	rz := make([]zns.Zone, e.sb.MetaGroup)
	got, err := e.dev.Report(e.sb.MetaZones[h], rz)
	end := int64(-1)
	if err == nil && got == len(rz) {
		for i, z := range rz {
			if z.Cond == zns.CondReadOnly || z.Cond == zns.CondOffline {
				return 0, fmt.Errorf("metadata zone %d is %v", e.sb.MetaZones[h]+i, z.Cond)
			}
		}
		end = e.halfEnd(rz)
	}
	if end != m.nextVoidsEnd {
		// The window this closes opens again: from the reset until
		// the voids are written again, a crash replays the records.
		slog.Warn("engine: the other metadata half holds the only durable voids of failed appends, but no checkpoint can follow them there; it is reset and they are written again",
			"half", h, "voids_end", m.nextVoidsEnd, "write_pointer", end, "err", err)
		return 0, nil
	}
	return m.nextVoidsEnd, nil
}

// metaVoidRoom is the log every half keeps free after the operations
// for one opVoid of up to maxVoids numbers (voidFailedLocked, for an
// in-half checkpoint: a switch voids in the next half).
var metaVoidRoom = metaRecordLen(len(encodeOp(nsOp{kind: opVoid, voids: make([]uint64, maxVoids)})))

// writeCheckpoint is checkpointLocked, or with inHalf checkpointInHalf's
// checkpoint (metaLog.mu held).
func (e *Engine) writeCheckpoint(inHalf bool) (err error) {
	m := e.meta
	e.quiesce.Lock()
	defer e.quiesce.Unlock()
	e.waitUntil(func() bool { return e.inflight.Load() == 0 })
	// The snapshot holds every change applied before it, logged or not;
	// one whose log fails from here on sets it again.
	// unlogged before its kinds: a truncate's setUnlogged (not under
	// metaLog.mu, as a pack's is: cutAndLog's holds no lock) between
	// the two leaves unlogged set with its kind taken here, and an
	// unlogged of no kind is named a truncate's (unloggedText); kinds
	// taken with unlogged clear are given back on failure too.
	unlogged, unloggedWhat := e.unlogged.Swap(false), e.unloggedWhat.Swap(0)
	// The snapshot reports the zones after this: it records every one
	// found offline before it full.
	offline := e.offlineOwed.Swap(false)
	// Until this ends (set again or not), what it took is still owed
	// to a settle that reads the flags without metaLog.mu: one that
	// found them clear from here acknowledged, after a flush, what this
	// checkpoint then failed to hold (TestH42eAckDuringAFailingCheckpointWaitsForIt).
	if unlogged || offline {
		e.owedInCheckpoint.Store(true)
	}
	defer func() {
		if err != nil && (unlogged || unloggedWhat != 0) {
			// A kind taken while unlogged was clear belongs to a
			// setUnlogged under way, which sets unlogged after it:
			// given back only with unlogged, a failed pack's kind
			// then hid it (TestH43fFailedCheckpointKeepsATruncatesKind).
			e.setUnlogged(unloggedWhat)
		}
		if err != nil && offline {
			e.offlineOwed.Store(true)
		}
		if unlogged || offline {
			e.owedInCheckpoint.Store(false) // after the flags are set again
		}
		// Still quiesced: no append failed since the wait, and every
		// one that failed before it is numbered below this checkpoint.
		if err == nil {
			// The held operations are applied (their callers held
			// nsMu exclusive from their numbers to their applies, and
			// the caller holds it now): the snapshot holds them.
			m.dropPending()
			m.nextVoidsEnd, m.nextVoided = 0, 0
			e.failedAppend.Store(false)
			e.failedMu.Lock()
			e.failedSeqs, e.voided = e.failedSeqs[:0], 0
			e.failedMu.Unlock()
		}
	}()
	if inHalf {
		return e.writeCheckpointInHalf()
	}
	// The data flush, before the checkpoint is written, makes a failed
	// append's record durable: the log says first that the record is
	// void, so that a crash between the two does not replay it. The
	// voids go in the active half's log, which keeps room for one
	// (metaVoidRoom), and the data flush comes first, as the checkpoint
	// is written only after it. Where the active half has no room for
	// them (a switch whose checkpoint failed left it finished, or a
	// burst of failures passed one block's worth), they go at the start
	// of the next half, reset first, and the data flush after them:
	// every failure since the last checkpoint is named there again, as a
	// failed switch's voids went with the reset that retries it.
	// Recovery takes voids from either half (recover). The reset makes
	// only itself durable, not the records (a zoned drive's reset does
	// not write back its cache's writes to other zones, nor does the
	// emu's): they become durable with the voids, at the data flush after
	// them (TestH27aCutInsideCheckpointWithPendingVoids/next-start; the
	// emu's reset used to flush, and a crash between it and the voids'
	// flush replayed them). A half a failed switch (or one before a
	// crash) left its voids in is appended to, not reset, so that they
	// stay durable;
	// those it names need not be named again (metaLog.nextVoidsEnd).
	// Where some of that switch's checkpoint landed, no record after it
	// would be read: the half is reset, and until the voids are written
	// again a crash replays the records they name.
	next := 1 - m.active
	at, err := e.nextHalfVoidsEnd(next)
	if err != nil {
		return fmt.Errorf("engine: checkpoint: %w: %w", errNextHalfReset, err)
	}
	var failed, pending []uint64
	if !e.voidFailedLocked() {
		failed = e.failedSince(0)
		pending = failed
		if at > 0 {
			pending = failed[min(m.nextVoided, len(failed)):]
		}
	}
	voids := e.voidOps(pending)
	dataFlushed := len(voids) == 0
	if dataFlushed {
		// What the checkpoint maps is durable before the checkpoint
		// can be: a device persists writes to different zones in any
		// order until a flush, and a checkpoint that outlived the data
		// it points at would replace acknowledged mappings with lost
		// bytes (f2fs flushes before it writes a checkpoint pack, for
		// the same reason).
		if err := e.flushDevice(context.Background()); err != nil {
			return fmt.Errorf("engine: checkpoint: flush data: %w", err)
		}
	}
	// Quiesced, with nsMu held by the caller: nothing the snapshot maps
	// changes until the data flush, where that comes after it.
	c := e.snapshot()
	payload := encodeCheckpoint(c)
	n := metaRecordLen(len(payload))
	if BlockSize+n > e.sb.metaHalfCap() {
		return fmt.Errorf("engine: checkpoint of %d bytes does not fit a %d-byte metadata half (%d zones): %w",
			n, e.sb.metaHalfCap(), e.sb.MetaGroup, ErrNoSpace)
	}
	if at > 0 && at+voidsLen(voids)+n > e.sb.metaHalfCap() {
		// No room after them: the half is reset after all, and every
		// failure named again (numbered above the snapshot, which
		// recovery, taking the checkpoint, never replays anyway).
		slog.Warn("engine: no room for a checkpoint after the voids a failed switch left in the other metadata half; it is reset, and the failed appends' records are voided again after it", "half", next, "at", at)
		at, pending = 0, failed
		voids = e.voidOps(pending)
	}
	// In a half that is reset, the superblock comes first.
	start, head := at, int64(0)
	if at == 0 {
		head = BlockSize
	}
	var vlen int64
	for i, v := range voids {
		if start+head+vlen+int64(len(v))+n > e.sb.metaHalfCap() {
			slog.Warn("engine: no room in the metadata half beside its checkpoint to void failed appends' records before a device flush", "voided", i, "of", len(voids), "half", next)
			voids = voids[:i]
			break
		}
		vlen += int64(len(v))
	}
	buf, err := unix.Mmap(-1, 0, int(head+vlen+n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return fmt.Errorf("engine: checkpoint buffer: %w", err)
	}
	defer unix.Munmap(buf)
	if head > 0 {
		e.sb.encode(buf[:BlockSize])
	}
	off := head
	for _, v := range voids {
		off += int64(copy(buf[off:], v))
	}
	encodeMeta(buf[off:], e.sb.FS(), metaCheckpoint, c.seq, payload)
	// The next half is reset first: a reset opens no zone, and a half
	// that refuses it (a zone gone read-only) leaves the active half as
	// it was, its log still open for operations (the switch fails; Open
	// writes its checkpoint into the active half's log, see recover).
	if at == 0 {
		m.nextVoidsEnd, m.nextVoided = 0, 0
		for z := e.sb.MetaZones[next]; z < e.sb.MetaZones[next]+e.sb.MetaGroup; z++ {
			if err := e.dev.ResetZone(z); err != nil {
				return fmt.Errorf("engine: checkpoint: reset metadata zone %d: %w: %w", z, errNextHalfReset, err)
			}
		}
	}
	// The old half keeps the previous checkpoint, but it must stop
	// holding an active zone before the next half opens one: the open
	// budget leaves room for one metadata zone, and with the data zones
	// and GC's all active the device refuses a second. Finishing keeps
	// its records (a crash before the new checkpoint is durable recovers
	// from them). The log fills a half's zones in order, so only the zone
	// its write pointer is in can be active.
	m.wp = e.sb.metaHalfCap() // full: if this switch fails, the next operation retries it
	if err := e.finishMetaHalf(m.active); err != nil {
		return fmt.Errorf("engine: checkpoint: %w", err)
	}
	from := int64(0)
	if len(voids) == 0 && !dataFlushed {
		// No room for a single void beside the checkpoint: the data
		// flush comes before it all the same.
		if err := e.flushDevice(context.Background()); err != nil {
			return fmt.Errorf("engine: checkpoint: flush data: %w", err)
		}
	}
	if len(voids) > 0 {
		if err := e.writeMeta(next, start, buf[:off], m.w); err != nil {
			return fmt.Errorf("engine: checkpoint: void failed appends' records: %w", err)
		}
		// Landed: a retry appends after them (and flushes before its
		// checkpoint), should this switch fail from here on.
		m.nextVoidsEnd = start + off
		m.nextVoided = len(failed) - len(pending) + min(len(voids)*maxVoids, len(pending))
		e.stats.metaWritten.Add(vlen)
		e.stats.metaOps[opVoid].Add(vlen)
		if err := e.flushDevice(context.Background()); err != nil {
			return fmt.Errorf("engine: checkpoint: flush data: %w", err)
		}
		from = off
	}
	if err := e.writeMeta(next, start+from, buf[from:], m.w); err != nil {
		return fmt.Errorf("engine: checkpoint: %w", err)
	}
	// The half's log is whole to here: should the flush fail, a retry
	// appends after the checkpoint rather than erase the voids before
	// it (TestH19eVoidRetryKeepsVoidsWhenTheWholeCheckpointLanded).
	m.nextVoidsEnd = start + off + n
	if err := e.flushDevice(context.Background()); err != nil {
		return fmt.Errorf("engine: checkpoint: flush: %w", err)
	}
	m.active, m.wp = next, start+head+vlen+n
	m.stray.Store(false) // what the old half holds is never replayed
	e.stats.metaWritten.Add(head + n)
	e.stats.ckptWritten.Add(head + n)
	e.stats.checkpoints.Add(1)
	e.endOwed(c.owed)
	return nil
}

// writeCheckpointInHalf is checkpointInHalf's checkpoint: the failed
// appends are voided in the active half's own log (the room it keeps,
// metaVoidRoom), then the data flush, then the checkpoint after them.
// metaLog.mu and quiesce held.
func (e *Engine) writeCheckpointInHalf() error {
	if !e.voidFailedLocked() {
		// The data flush would make failed appends' records durable with
		// nothing to void them, and with the half this full the
		// checkpoint that supersedes them would not fit either
		// (TestH18eInHalfCheckpointFlushesUnvoidedRecords): no flush,
		// and nothing acknowledged until a switch works again.
		return fmt.Errorf("engine: checkpoint in metadata half %d: no room to void failed appends' records before its data flush: %w", e.meta.active, ErrNoSpace)
	}
	if err := e.flushDevice(context.Background()); err != nil {
		return fmt.Errorf("engine: checkpoint: flush data: %w", err)
	}
	c := e.snapshot()
	payload := encodeCheckpoint(c)
	n := metaRecordLen(len(payload))
	buf, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return fmt.Errorf("engine: checkpoint buffer: %w", err)
	}
	defer unix.Munmap(buf)
	encodeMeta(buf, e.sb.FS(), metaCheckpoint, c.seq, payload)
	return e.appendCheckpoint(c, buf)
}

// appendCheckpoint writes c's encoded record rec at the active half's
// write pointer and makes it durable (checkpointInHalf; metaLog.mu and
// quiesce held, what c maps flushed). A write that fails ends the
// half's log, as an operation's does.
func (e *Engine) appendCheckpoint(c *checkpointState, rec []byte) error {
	m := e.meta
	n := int64(len(rec))
	if m.wp+n > e.sb.metaHalfCap() {
		return fmt.Errorf("engine: checkpoint: %d bytes do not fit after %d in metadata half %d (%d bytes): %w",
			n, m.wp, m.active, e.sb.metaHalfCap(), ErrNoSpace)
	}
	if err := e.writeMeta(m.active, m.wp, rec, m.w); err != nil {
		err = fmt.Errorf("engine: checkpoint in metadata half %d at %d: %w", m.active, m.wp, err)
		m.wp = e.sb.metaHalfCap()
		return err
	}
	m.wp += n
	if err := e.flushDevice(context.Background()); err != nil {
		return fmt.Errorf("engine: checkpoint: flush: %w", err)
	}
	e.stats.metaWritten.Add(n)
	e.stats.ckptWritten.Add(n)
	e.stats.checkpoints.Add(1)
	e.endOwed(c.owed)
	return nil
}

// endOwed ends the undo states a durable checkpoint saw owing their
// commits (quiesce still held: no record was numbered since its
// snapshot). Recovery starts from the checkpoint's map, the file as it
// is, whole, so it acts as each one's commit: nothing numbered before it
// is replayed, the zeros' record included, records of the file carry its
// size again, and what the undo kept counted valid (replaced) is
// garbage. A state that began after the snapshot (a truncate that
// failed meanwhile) is not the one saved, and stays.
func (e *Engine) endOwed(owed []owedUndo) {
	for _, o := range owed {
		o.f.mu.Lock()
		if o.f.undo == o.u {
			e.endUndo(o.f)
		}
		o.f.mu.Unlock()
	}
	if len(owed) > 0 {
		e.idle.Signal() // a writer may wait for it (waitSettled)
	}
}

// finishMetaHalf finishes whichever zone of metadata half h is active.
func (e *Engine) finishMetaHalf(h int) error {
	rz := make([]zns.Zone, e.sb.MetaGroup)
	got, err := e.dev.Report(e.sb.MetaZones[h], rz)
	if err != nil {
		return fmt.Errorf("report metadata zones from %d: %w", e.sb.MetaZones[h], err)
	}
	for i, z := range rz[:min(got, len(rz))] {
		if z.Cond.Active() {
			if err := e.dev.FinishZone(e.sb.MetaZones[h] + i); err != nil {
				return fmt.Errorf("finish metadata zone %d: %w", e.sb.MetaZones[h]+i, err)
			}
		}
	}
	return nil
}

// snapshot captures the file system for a checkpoint. Appends are
// stopped; the caller holds nsMu. The checkpoint takes a sequence number
// of its own, above every operation and record it contains and below
// every one it does not: no two checkpoints share one, so the newer of the
// two metadata zones' checkpoints always wins at recovery.
func (e *Engine) snapshot() *checkpointState {
	c := &checkpointState{seq: e.seq.Add(1), nextID: e.nextID, zoneWP: map[int]int64{}}
	for _, f := range e.byID {
		f.mu.RLock()
		if f.undo != nil {
			// The checkpoint commits it: it holds the file as the
			// undo left it, or, for a file removed while open, not
			// at all.
			c.owed = append(c.owed, owedUndo{f: f, u: f.undo})
		}
		if f.unnamed.Load() {
			// Removed while open: its remove, logged below this
			// number, drops it at recovery; its data is the open
			// handles' until they close.
			f.mu.RUnlock()
			continue
		}
		cf := ckptFile{id: f.id, name: f.name(), size: f.carriedSize(), ext: make([]extent, 0, f.ext.count())}
		f.ext.each(func(x extent) bool { cf.ext = append(cf.ext, x); return true })
		f.mu.RUnlock()
		c.files = append(c.files, cf)
	}
	offline := e.offlineZones()
	for _, z := range e.zones {
		if z == nil {
			continue
		}
		if z.idx < len(offline) && offline[z.idx] {
			// It takes no record again, and its data no longer
			// reads: recorded full, recovery skips it, as it may
			// only if nothing newer than a checkpoint can lie there
			// (offlineZoneNews). With what placement had allocated
			// there, the next open, even after a clean Close,
			// refused the whole file system.
			c.zoneWP[z.idx] = z.cap
			continue
		}
		if z.resetPending.Load() {
			// Its reset is decided and may happen at any moment after
			// this checkpoint: whatever is written there next starts at
			// 0, and what it holds now is older than this checkpoint.
			c.zoneWP[z.idx] = 0
			continue
		}
		c.zoneWP[z.idx] = z.alloc.Load()
	}
	return c
}

// offlineZones says which zones the device reports offline, indexed by
// zone (nil if the report fails: the snapshot records every zone as
// usual, and a recovery that finds one offline refuses to open unless
// an earlier checkpoint recorded it full).
func (e *Engine) offlineZones() []bool {
	report := make([]zns.Zone, e.geo.Zones)
	n, err := e.dev.Report(0, report)
	if err != nil {
		e.log.Warn("engine: checkpoint: report zones (to record offline zones full)", "err", err)
		return nil
	}
	var offline []bool
	for i, rz := range report[:n] {
		if rz.Cond == zns.CondOffline {
			if offline == nil {
				offline = make([]bool, len(report))
			}
			offline[i] = true
		}
	}
	return offline
}

// metaZones are the first zones of the two metadata halves of k zones
// each: the first two sequential zones for k = 1 (as every device
// formatted before halves grew was laid out), else the first 2k
// sequential zones, which must be consecutive.
func metaZones(dev zns.Device, k int) ([2]int, error) {
	g := dev.Geometry()
	report := make([]zns.Zone, g.Zones)
	n, err := dev.Report(0, report)
	if err != nil {
		return [2]int{}, fmt.Errorf("engine: report zones: %w", err)
	}
	var seq []int
	for i, z := range report[:n] {
		if z.Type != zns.TypeConventional {
			seq = append(seq, i)
			if len(seq) == 2*k {
				break
			}
		}
	}
	if len(seq) < 2*k {
		return [2]int{}, fmt.Errorf("engine: device has %d sequential zones; zonefold needs more than %d", len(seq), 2*k+2)
	}
	if k > 1 && seq[2*k-1]-seq[0] != 2*k-1 {
		return [2]int{}, fmt.Errorf("engine: the device's first %d sequential zones, for metadata, are not consecutive", 2*k)
	}
	return [2]int{seq[0], seq[k]}, nil
}

// FileSystemOn returns the superblock of the zonefold file system on
// dev and true, or false when no copy of one reads there: a command that
// would destroy a file system (resetting its zones) asks first, as
// format does of a device holding data.
func FileSystemOn(dev zns.Device) (Superblock, bool) {
	sb, err := readSuperblock(dev)
	return sb, err == nil
}

// readSuperblock reads the superblock copy at the start of either
// metadata half: the first sequential zone's, else (that copy damaged)
// the first valid one in the zones after it, which must be where the
// second half starts by the superblock's own account.
func readSuperblock(dev zns.Device) (Superblock, error) {
	first, err := metaZones(dev, 1)
	if err != nil {
		return Superblock{}, err
	}
	g := dev.Geometry()
	buf, err := unix.Mmap(-1, 0, BlockSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return Superblock{}, err
	}
	defer unix.Munmap(buf)
	w := uring.NewWaiter()
	var firstErr error
	for z := first[0]; z < min(g.Zones, first[0]+maxMetaGroup+1); z++ {
		// A copy that fails to read, whether the device refuses the
		// read at once (a zone gone offline) or fails it, leaves the
		// other copy: returning at a refusal made one bad metadata
		// zone fail Open and fsck with the bare device error.
		err := dev.Read(int64(z)*g.ZoneSize, buf, w)
		if err == nil {
			err = dev.Ring().Wait(w).Err("read superblock")
		}
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("engine: read the superblock copy in zone %d: %w", z, err)
			}
			continue
		}
		sb, err := decodeSuperblock(buf)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		mz, err := metaZones(dev, sb.MetaGroup)
		if err != nil {
			return sb, err
		}
		if sb.MetaZones != mz {
			return sb, fmt.Errorf("engine: superblock names metadata zones %v, the device's are %v", sb.MetaZones, mz)
		}
		if z != mz[0] && z != mz[1] {
			continue // not a superblock copy's place: a stale one
		}
		return sb, nil
	}
	return Superblock{}, firstErr
}

// maxMetaGroup bounds the zones of a metadata half.
const maxMetaGroup = 1 << 12

// ckptMax is the largest checkpoint (record header and payload) a file
// system whose data zones hold dataBlocks blocks can call for. Writeback
// writes whole blocks and extents of a file never overlap, so every
// extent covers a block no other extent covers (a file's last, partial
// one too): at most dataBlocks extents in all. Files without data are
// not bounded so; the allowance below covers one per 16 data blocks with
// names of 64 bytes, and a namespace past that gets ENOSPC at create or
// rename (nsRoomFor), while a checkpoint with an extent on every data
// block still fits, rather than a checkpoint that does not fit.
func ckptMax(dataBlocks, dataZones int64) int64 {
	const file = 8 + 4 + 64 + 8 + 4
	return metaHdrLen + 8 + 8 + 4 + dataBlocks*ckptExtSize + (dataBlocks/16+64)*file + 4 + dataZones*12
}

// metaGroupFor is the zones per metadata half for a file system of used
// zones: the fewest that hold a superblock copy, the largest checkpoint
// (ckptMax) and a log of at least a quarter of it (and 32 blocks) after
// it, so that a full namespace still logs many operations between
// checkpoints.
func metaGroupFor(g zns.Geometry, used int) int {
	for k := 1; k < maxMetaGroup; k++ {
		data := int64(used - 2*k)
		if data < 1 {
			return k
		}
		worst := ckptMax(data*g.ZoneCap/BlockSize, data)
		if int64(k)*g.ZoneCap >= BlockSize+worst+max(worst/4, 32*BlockSize) {
			return k
		}
	}
	return maxMetaGroup
}

// MetaZones is the zones Format gives the metadata (both halves) on a
// device of geometry g: the rest hold data.
func MetaZones(g zns.Geometry) int { return 2 * metaGroupFor(g, g.Zones) }

// FormatOptions control Format.
type FormatOptions struct {
	// Force formats a device that holds data or another superblock.
	Force bool
	// Zones limits the file system to the device's first Zones zones
	// (0: all), e.g. to make a GC benchmark on a large device short.
	Zones int
}

// ErrNotEmpty is what CheckEmpty (and Format without Force) returns for a
// device that holds data: a file system, or anything else written. The
// error returned says which (errors.Is finds ErrNotEmpty in it).
var ErrNotEmpty = errors.New("the device holds data (--force erases it)")

// NotEmptyError is CheckEmpty's refusal: what the device holds. A
// command line words its own next step from it.
type NotEmptyError struct {
	// Holds is what the device holds: "a zonefold file system (uuid
	// ...)" or "data that is not a zonefold file system (zone 3 is not
	// empty)".
	Holds string
	// FileSystem says whether that is a zonefold file system.
	FileSystem bool
}

func (e *NotEmptyError) Error() string {
	return "engine: the device holds " + e.Holds + " (--force erases it)"
}

func (e *NotEmptyError) Is(target error) bool { return target == ErrNotEmpty }

// CheckEmpty refuses a device whose first zones (0: all) hold data, as
// Format does without Force: every command that erases a device the user
// named asks it first. The refusal says whether the data is a zonefold
// file system (its uuid) or something else: "zone 0 is not empty" left a
// user who had formatted the device already to guess.
func CheckEmpty(dev zns.Device, zones int) error {
	g := dev.Geometry()
	report := make([]zns.Zone, g.Zones)
	n, err := dev.Report(0, report)
	if err != nil {
		return fmt.Errorf("engine: report zones: %w", err)
	}
	for i, z := range report[:n] {
		if zones > 0 && i >= zones {
			break
		}
		if z.Type != zns.TypeConventional && z.WP != z.Start {
			if sb, ok := FileSystemOn(dev); ok {
				return &NotEmptyError{Holds: fmt.Sprintf("a zonefold file system (uuid %s)", sb.ID()), FileSystem: true}
			}
			return &NotEmptyError{Holds: fmt.Sprintf("data that is not a zonefold file system (zone %d is not empty)", i)}
		}
	}
	return nil
}

// planFormat is the superblock Format would write to dev, after
// Format's checks of dev and opts, writing nothing.
func planFormat(dev zns.Device, opts FormatOptions) (Superblock, error) {
	g := dev.Geometry()
	// A device the engine cannot open gets no file system: a block size
	// above BlockSize used to fail only at the first metadata write,
	// after every zone was reset.
	if err := checkGeometry(g); err != nil {
		return Superblock{}, err
	}
	if !opts.Force {
		if err := CheckEmpty(dev, opts.Zones); err != nil {
			return Superblock{}, err
		}
	}
	used := g.Zones
	if opts.Zones > 0 {
		if opts.Zones > g.Zones {
			return Superblock{}, fmt.Errorf("engine: format: %d zones asked for; the device has %d", opts.Zones, g.Zones)
		}
		used = opts.Zones
	}
	k := metaGroupFor(g, used)
	mz, err := metaZones(dev, k)
	if err != nil {
		return Superblock{}, err
	}
	// The metadata halves, then at least two data zones beside GC's
	// default reserve: what Open needs.
	var gc GCConfig
	gc.fill()
	data := 2 + gc.Reserve
	least := mz[1] + k + data
	if opts.Zones > 0 && used < least {
		return Superblock{}, &FormatZonesError{Zones: opts.Zones, Least: leastZones(dev, least, data), DeviceZones: g.Zones}
	}
	if used < least {
		conv := ""
		if mz[0] > 0 {
			// The metadata halves start at the first sequential zone.
			conv = fmt.Sprintf(", %d of them conventional (zonefold uses sequential zones only)", mz[0])
		}
		return Superblock{}, fmt.Errorf("engine: format: the device has %d zones%s; zonefold needs at least %d (%d data zones after the %d metadata zones)", used, conv, least, data, 2*k)
	}
	// Nor does a device whose open or active limit leaves no data zone
	// beside metadata and GC: formatted, serve refused it.
	cfg := Config{GC: gc}
	if _, _, err := planOpenZones(&cfg, g, used-mz[1]-k); err != nil {
		return Superblock{}, err
	}
	uuid, err := newUUID()
	if err != nil {
		return Superblock{}, err
	}
	return Superblock{Version: formatVersion, UUID: uuid, ZoneSize: g.ZoneSize, ZoneCap: g.ZoneCap, Zones: g.Zones, BlockSize: BlockSize, MetaZones: mz, MetaGroup: k, UsedZones: used}, nil
}

// leastZones is the fewest zones Format takes on dev, from least, what
// it needs with the metadata groups of a smaller file system, and data,
// the data zones Open needs: more zones can take larger metadata groups
// (metaGroupFor), which need more zones in turn, until it settles. It is
// least itself where the metadata cannot be read (the refusal then says
// the smaller need).
func leastZones(dev zns.Device, least, data int) int {
	g := dev.Geometry()
	for least <= g.Zones {
		k := metaGroupFor(g, least)
		mz, err := metaZones(dev, k)
		if err != nil || mz[1]+k+data <= least {
			break
		}
		least = mz[1] + k + data
	}
	return least
}

// Format writes a fresh, empty zonefold file system to dev: every zone
// reset, a superblock at the start of both metadata zones and an empty
// checkpoint. Without Force it refuses a device that is not empty.
func Format(dev zns.Device, opts FormatOptions) (Superblock, error) {
	sb, err := planFormat(dev, opts)
	if err != nil {
		return Superblock{}, err
	}
	g, used, mz := dev.Geometry(), sb.UsedZones, sb.MetaZones
	if err := resetZones(dev, used); err != nil {
		return sb, fmt.Errorf("engine: format: %w", err)
	}
	e := &Engine{dev: dev, geo: g, ring: dev.Ring(), sb: sb, byID: map[uint64]*file{}, nextID: 1}
	if e.meta, err = newMetaLog(e); err != nil {
		return sb, err
	}
	defer e.meta.close()
	// An empty checkpoint in metadata zone 1 makes it the active one; then
	// the superblock in zone 0 (written by the checkpoint switch later).
	e.meta.active = 1
	if err := e.checkpoint(); err != nil {
		return sb, err
	}
	buf, err := unix.Mmap(-1, 0, BlockSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return sb, err
	}
	defer unix.Munmap(buf)
	sb.encode(buf)
	if err := e.writeZone(mz[1], 0, buf, e.meta.w); err != nil {
		return sb, fmt.Errorf("engine: format: %w", err)
	}
	// Half 1 holds only the superblock copy until the first checkpoint
	// switch resets it; finished, it holds no open or active resource.
	if err := dev.FinishZone(mz[1]); err != nil {
		return sb, fmt.Errorf("engine: format: finish metadata zone %d: %w", mz[1], err)
	}
	if err := dev.Flush(); err != nil {
		return sb, fmt.Errorf("engine: format: flush: %w", err)
	}
	return sb, nil
}

// resetZones resets the device's first n zones (all of them at once when
// n is the whole device).
func resetZones(dev zns.Device, n int) error {
	g := dev.Geometry()
	if n == g.Zones {
		return dev.ResetAll()
	}
	report := make([]zns.Zone, n)
	got, err := dev.Report(0, report)
	if err != nil {
		return fmt.Errorf("report zones: %w", err)
	}
	for i, z := range report[:got] {
		if z.Type == zns.TypeConventional || z.WP == z.Start {
			continue
		}
		if err := dev.ResetZone(i); err != nil {
			return fmt.Errorf("reset zone %d: %w", i, err)
		}
	}
	return nil
}

// SyncNamespace makes the namespace changes made with ODeferSync or
// RemoveDeferred durable, as an fsync of a directory does on a kernel file
// system: it returns once a device flush that started after the last of
// them was logged has succeeded, and runs one (or joins one already
// running) unless such a flush has ended already.
func (e *Engine) SyncNamespace() error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.leave()
	if err := e.syncNamespace(); err != nil {
		return fmt.Errorf("engine: sync namespace: %w", err)
	}
	return nil
}

// syncNamespace is SyncNamespace for a caller already admitted (enter).
func (e *Engine) syncNamespace() error {
	// What is held first, as syncTicket reads it: once none is held,
	// every operation held before has landed and needFlush covers it
	// (opsLanded sets it before it clears pending). Read the other way
	// round, a pack another caller landed in between was covered by
	// neither, and an older flush acknowledged it.
	held := e.meta.pending.Load()
	if testHookSyncNamespaceRead != nil {
		testHookSyncNamespaceRead(e)
	}
	t := e.meta.needFlush.Load()
	if held {
		t = pendTicket // flushAcked lands them
	}
	if t == 0 {
		return e.settleStray()
	}
	return e.flushAcked(context.Background(), t)
}

// testHookSyncNamespaceRead, if set (by tests only), runs in
// syncNamespace between its reads of what is held and of needFlush.
var testHookSyncNamespaceRead func(*Engine)

// flushAcked flushes the device for a caller that reports the flush's
// success as durability (an fsync, Engine.Sync, SyncNamespace, a
// create's flush, a durable operation's, awaitOp): it returns once a flush numbered t or later has
// succeeded (t = 0: one that started after the call; see flushFor) and
// no failed operation's record (stray) it may have made durable is left
// unsuperseded. The stray is settled before the flush, so the flush does
// not make it durable, and again after it: an operation whose record
// failed between the first settle and the flush (a remove of the synced
// file, racing the fsync) left a record that flush made durable, and the
// ack, given after that operation failed, was undone by its replay
// (TestFailedOpBetweenSettleAndFlushNeverUndoesTheAck). One that fails
// after this returns failed after the ack: it may undo it only as an
// operation in flight at a crash would. The caller holds no engine lock.
//
// Operations held for a pack (metaLog.pend) land first, whatever t: an
// fsync makes every logged operation durable, as before they were held.
// t, if taken before that (pendTicket, or one an fsync took), then
// grows to the ticket that covers their record.
func (e *Engine) flushAcked(ctx context.Context, t uint64) error {
	if t, err := e.ticketAfterLanding(t); err != nil {
		return err
	} else if err := e.settleStray(); err != nil {
		return err
	} else {
		return e.flushAckedLanded(ctx, t)
	}
}

// ticketAfterLanding lands the held operations (landPending) and
// returns t, or, if some were held, the later ticket that covers their
// record too. For pendTicket (an operation held when its caller took
// the ticket, or an fsync's syncTicket then) that is the ticket of the
// last record landed, whoever landed it: a caller that finds none held
// any more finds needFlush covering them (opsLanded sets it before it
// clears pending), or a checkpoint took them, flushed after they were
// applied.
func (e *Engine) ticketAfterLanding(t uint64) (uint64, error) {
	m := e.meta
	held := m.pending.Load()
	if held {
		if err := e.landPending(); err != nil {
			return 0, err
		}
	}
	switch {
	case t == pendTicket:
		return m.needFlush.Load(), nil // 0 (nothing landed since Open): the next flush
	case held && t != 0:
		return max(t, m.needFlush.Load()), nil
	}
	return t, nil
}

// flushAckedLanded is flushAcked once what was held has landed and
// the stray settled.
func (e *Engine) flushAckedLanded(ctx context.Context, t uint64) error {
	if testHookAckFlush != nil {
		testHookAckFlush(e)
	}
	if err := e.flushes.flushFor(ctx, e.dev, t); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	return e.settleStray()
}

// testHookAckFlush, if set (by tests only), runs in flushAcked between
// its first settle and its flush.
var testHookAckFlush func(*Engine)

// owesCheckpoint reports whether a flush must be preceded by a
// checkpoint: the log may hold a failed operation's record (stray), an
// append failed (failedAppend), or memory holds a change no record
// carries (unlogged), or a data zone was found offline since the last
// checkpoint (offlineOwed), or a checkpoint that took one of the last
// two runs (owedInCheckpoint: the settle waits for it).
func (e *Engine) owesCheckpoint() bool {
	return e.meta.stray.Load() || e.failedAppend.Load() || e.unlogged.Load() || e.offlineOwed.Load() ||
		e.owedInCheckpoint.Load()
}

// settleStray runs before a device flush whose success is reported as
// durability (an fsync, Engine.Sync, SyncNamespace, a create's flush),
// and before the flushes nobody is told of (GC's, a truncate's), which
// make a record just as durable:
// while the metadata log may hold a failed operation's record (stray),
// that flush could make the record durable, and recovery would replay
// the operation over what the flush acknowledged (a remove that failed
// with ErrMetaLog, replayed, takes the file and the data fsynced to it
// since). So the switch the log owes comes first: a checkpoint in the
// other half, of the namespace as it is, which recovery takes over
// anything in the half the record is in. If it fails, so does the
// caller, with ErrMetaLog. A failed append's record is settled the same
// way (Engine.failedAppend): the checkpoint supersedes the data records
// numbered below it too, and so is a change applied in memory whose
// record failed (Engine.unlogged): the checkpoint holds it. The caller
// holds no engine lock but wmu or
// collector.mu; this takes nsMu shared and metaLog.mu, as a logged
// operation does.
func (e *Engine) settleStray() error {
	m := e.meta
	if !e.owesCheckpoint() {
		return nil
	}
	if testHookSettleWait != nil {
		testHookSettleWait(e)
	}
	e.nsMu.RLock()
	defer e.nsMu.RUnlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	return e.settleStrayLocked()
}

// What Engine.unlogged stands for (Engine.unloggedWhat), each bit a
// change applied in memory whose record failed.
const (
	unloggedTruncate uint32 = 1 << iota // a truncate's size (logSize, cutAndLog)
	unloggedPack                        // deferred operations whose pack failed (metaLog.pend)
)

// setUnlogged records that a change of the kinds in what is applied in
// memory with no record: every flush settles with a checkpoint first
// until one holds it (Engine.unlogged).
func (e *Engine) setUnlogged(what uint32) {
	e.unloggedWhat.Or(what) // before unlogged: whoever sees it sees what
	if testHookSetUnlogged != nil {
		testHookSetUnlogged()
	}
	e.unlogged.Store(true)
}

// testHookSetUnlogged, if set (by tests only), runs in setUnlogged
// between its kind and unlogged.
var testHookSetUnlogged func()

// unloggedText says what is in memory only while Engine.unlogged is set,
// naming each kind: a failed pack's message alone hid a truncate whose
// record failed too (TestH43bSettleNamesPackAndTruncate).
func (e *Engine) unloggedText() string {
	switch e.unloggedWhat.Load() {
	case unloggedPack:
		return "deferred namespace operations are in memory only (the record of their pack failed)"
	case unloggedTruncate | unloggedPack:
		return "a truncate's size (its record failed) and deferred namespace operations (the record of their pack failed) are in memory only"
	}
	return "a truncate's size is in memory only (its record failed)"
}

// testHookSettleWait, if set (by tests only), runs in settleStray once
// it found a checkpoint owed, before it takes the locks a running
// checkpoint holds.
var testHookSettleWait func(*Engine)

// settleStrayLocked is settleStray with nsMu (shared or exclusive) and
// metaLog.mu held. Its checkpoint is a half switch like an operation's,
// so it keeps to the switches' backoff (switchBackoff) and a failure
// counts as a failed switch. When the other half refuses its reset, the
// checkpoint goes into the active half's own log (supersedeStrayInHalf).
func (e *Engine) settleStrayLocked() error {
	m := e.meta
	if !e.owesCheckpoint() {
		return nil
	}
	fail := func(err error) error {
		if !m.stray.Load() && !e.failedAppend.Load() && !e.unlogged.Load() {
			return fmt.Errorf("%w: a data zone went offline, and the checkpoint that records it failed (a crash before one makes the next open refuse): %w", ErrMetaLog, err)
		}
		if !m.stray.Load() && !e.failedAppend.Load() {
			return fmt.Errorf("%w: %s, and the checkpoint that makes it durable failed: %w", ErrMetaLog, e.unloggedText(), err)
		}
		if !m.stray.Load() {
			return fmt.Errorf("%w: a failed append's record may be on the device, and the checkpoint that supersedes it failed: %w", ErrMetaLog, err)
		}
		return fmt.Errorf("%w: a failed operation's record may be in metadata half %d, and the checkpoint that supersedes it failed: %w", ErrMetaLog, m.active, err)
	}
	if now := time.Now(); now.Before(m.switchRetryAt) {
		return fail(fmt.Errorf("no metadata half switch before %v after %d failed in a row, the last: %w",
			m.switchRetryAt.Sub(now).Round(time.Millisecond), m.switchFails, m.switchErr))
	}
	err := e.checkpointLocked()
	if err == nil {
		return nil
	}
	if errors.Is(err, errNextHalfReset) {
		var serr error
		if m.stray.Load() {
			serr = e.supersedeStrayInHalf()
		} else {
			// Only a failed append to supersede: the active half's
			// log is whole, and takes the checkpoint.
			serr = e.writeCheckpoint(true)
		}
		if serr == nil {
			return nil
		}
		err = fmt.Errorf("%w; no checkpoint in its own half either: %w", err, serr)
	}
	// A half out of room is not a failed switch, but a supersede that
	// found no room after the other half refused is: without the backoff
	// every sync would scan the whole half again.
	if errors.Is(err, errNextHalfReset) || !errors.Is(err, ErrNoSpace) {
		e.switchFailed(err)
	}
	return fail(err)
}

// supersedeStrayInHalf writes a checkpoint into the active half's own
// log, after a failed operation's record (stray) there, when the other
// half refuses its reset: recovery takes the newest checkpoint of a half
// and only the operations after it, so the record is never replayed.
// The failed write left m.wp unknown (the log counted full); the device's
// write pointer says where the log ends, and the checkpoint goes there
// only if the log reads whole up to it, as recovery reads it (after a
// torn record, nothing is read). nsMu and metaLog.mu are held.
func (e *Engine) supersedeStrayInHalf() error {
	m := e.meta
	report := make([]zns.Zone, e.geo.Zones)
	got, err := e.dev.Report(0, report)
	if err != nil {
		return fmt.Errorf("engine: supersede a failed record: report zones: %w", err)
	}
	report = report[:got]
	if e.sb.MetaZones[m.active]+e.sb.MetaGroup > len(report) {
		return fmt.Errorf("engine: supersede a failed record: the report of %d zones misses metadata half %d", len(report), m.active)
	}
	buf, err := newScanBuf(int(max(e.geo.ZoneCap, 1<<20)))
	if err != nil {
		return err
	}
	defer buf.close()
	end := e.metaHalfEnd(m.active, report)
	_, _, logEnd, _, err := e.scanMetaHalf(m.active, report, buf, m.w)
	if err != nil {
		return fmt.Errorf("engine: supersede a failed record: %w", err)
	}
	if logEnd != end && logEnd <= m.strayFrom {
		// Recovery's read of the half ends before the first failed
		// record: what landed of it (and of any after it) is never
		// replayed, so nothing needs superseding. Nothing after it
		// would be read either, so the half takes no more records
		// (m.wp stays at its end): namespace operations fail until
		// the other half takes its reset, but fsyncs, which failed
		// on the stray for as long as it refused, go on
		// (TestUnreadableFailedRecordDoesNotFailSyncsForever).
		slog.Warn("engine: a failed operation's record in metadata half cannot be read, so it is never replayed; the half's log has ended",
			"half", m.active, "log_end", logEnd, "write_pointer", end)
		m.stray.Store(false)
		return nil
	}
	if logEnd != end {
		return fmt.Errorf("engine: supersede a failed record: metadata half %d's log ends at %d, its write pointer at %d (a torn record): no checkpoint after it would be read", m.active, logEnd, end)
	}
	m.wp = end
	if err := e.writeCheckpoint(true); err != nil {
		// The log stays closed while the record stands: an operation
		// logged after it and acknowledged would be replayed after it
		// (TestStraySupersedeFailedCheckpointKeepsLogClosed).
		m.wp = e.sb.metaHalfCap()
		return err
	}
	m.stray.Store(false) // recovery reads nothing before the checkpoint
	return nil
}
