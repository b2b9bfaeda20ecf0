package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/uring"
	"github.com/zonefold/zonefold/zns"
)

// event is one thing recovery replays, in sequence order: a namespace
// operation or a data record.
type event struct {
	seq uint64
	op  *nsOp
	rec *RecordHeader
	dev int64 // device offset of the record's data
}

// scanBuf is aligned scratch memory for recovery and GC reads.
type scanBuf struct{ mem []byte }

func newScanBuf(n int) (*scanBuf, error) {
	mem, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("engine: map scan buffer: %w", err)
	}
	return &scanBuf{mem: mem}, nil
}

func (s *scanBuf) close() { _ = unix.Munmap(s.mem) }

// grow makes the buffer at least n bytes long, keeping its first block:
// a checkpoint of a half of several zones can outgrow what a scan starts
// with, and only the one that does pays for the memory.
func (s *scanBuf) grow(n int) error {
	if n <= len(s.mem) {
		return nil
	}
	mem, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return fmt.Errorf("engine: map a %d-byte scan buffer: %w", n, err)
	}
	copy(mem, s.mem[:BlockSize])
	s.close()
	s.mem = mem
	return nil
}

// recover rebuilds the file system: the newest valid checkpoint, then
// every namespace operation and data record with a higher sequence
// number, in order. A torn or corrupt record ends its zone. Recovery ends
// with a fresh checkpoint, so the next open starts from here.
func (e *Engine) recover() error {
	var err error
	if e.meta, err = newMetaLog(e); err != nil {
		return err
	}
	buf, err := newScanBuf(int(max(e.geo.ZoneCap, 1<<20)))
	if err != nil {
		return err
	}
	defer buf.close()
	w := uring.NewWaiter()
	report := make([]zns.Zone, e.geo.Zones)
	n, err := e.dev.Report(0, report)
	if err != nil {
		return fmt.Errorf("engine: recover: report zones: %w", err)
	}
	report = report[:n]
	e.reportRollbacks()
	if err := e.checkSlotFallback(); err != nil {
		return err
	}

	// 1. The metadata zones: checkpoints and operations.
	var ckpt *checkpointState
	var ckptZone int
	var zoneOps [2][]nsOp
	var logEnd [2]int64
	var undecoded [2][]metaUndecoded
	for i := range e.sb.MetaZones {
		c, ops, end, bad, err := e.scanMetaHalf(i, report, buf, w)
		var rerr *metaReadError
		if errors.As(err, &rerr) && errors.Is(err, syscall.EIO) {
			// Bad media inside the log (not past its end): what it
			// holds, and what follows, may be acknowledged
			// operations, so Open does not go on without them.
			return fmt.Errorf("engine: recover: metadata half %d's log fails to read at %d: the medium failed the read (%w); the operations logged from there on cannot be replayed, and recovering without them could lose acknowledged ones: refusing to open (fsck reads the device without writing)",
				rerr.half, rerr.at, rerr.err)
		}
		if err != nil {
			return err
		}
		undecoded[i] = bad
		if c != nil && ckpt != nil && c.seq == ckpt.seq {
			// Every checkpoint takes its own number: a tie is a device
			// an older zonefold wrote, or damage. fsck says so.
			e.ckptTie = true
			slog.Warn("engine: recover: both metadata zones hold a checkpoint of one sequence number", "seq", c.seq)
		}
		if c != nil && (ckpt == nil || c.seq > ckpt.seq) {
			ckpt, ckptZone = c, i
		}
		zoneOps[i], logEnd[i] = ops, end
	}
	if ckpt == nil {
		return fmt.Errorf("engine: recover: no valid checkpoint in metadata zones %v", e.sb.MetaZones)
	}
	if err := e.checkUndecoded(undecoded, ckpt.seq, ckptZone); err != nil {
		return err
	}
	if err := e.checkHiddenLog(1-ckptZone, logEnd[1-ckptZone], report, ckpt.seq, buf, w); err != nil {
		if !e.salvage {
			return err
		}
		e.salvaged(err)
	}
	// cutTop is the highest number of a whole record after where the
	// walk of the checkpoint's half stopped early (damage): not
	// replayed, but its number was handed out, and recovery's
	// checkpoint is numbered above it. Numbered below, a crash before
	// the next checkpoint left that half holding whole records above
	// the newest checkpoint after a damaged one, and the next Open
	// refused the device (checkHiddenLog).
	var cutTop uint64
	if u := undecoded[ckptZone]; len(u) > 0 && u[len(u)-1].kind != metaCheckpoint {
		// The walk ended on an operation (or a pack of them) that
		// does not decode: checkUndecoded said so.
		end := e.metaHalfEnd(ckptZone, report)
		later, err := e.laterMeta(ckptZone, logEnd[ckptZone], end, ckpt.seq, false, buf, w)
		if err != nil {
			return err
		}
		cutTop = later.top
	} else if top, err := e.checkCutLog(ckptZone, logEnd[ckptZone], report, ckpt.seq, buf, w); err != nil {
		return err
	} else {
		cutTop = top
	}
	// Every operation logged after a checkpoint went to the zone that
	// holds it: one in the other zone numbered above it was never
	// acknowledged (bytes of a write lost to a power cut, which a device
	// that shows what lies past a write pointer could expose).
	ops := zoneOps[ckptZone]
	var otherVoids []nsOp
	for _, op := range zoneOps[1-ckptZone] {
		if op.kind == opVoid && op.seq > ckpt.seq {
			// A switch voids failed appends at the start of the
			// half it resets, before the data flush that precedes
			// its checkpoint (writeCheckpoint): if that checkpoint
			// did not land, they are still what failed.
			otherVoids = append(otherVoids, op)
			continue
		}
		if op.seq > ckpt.seq {
			slog.Warn("engine: recover: operation in the older metadata zone is newer than the checkpoint; ignored",
				"seq", op.seq, "checkpoint_seq", ckpt.seq, "zone", e.sb.MetaZones[1-ckptZone])
		}
	}
	e.meta.active = ckptZone
	// The log goes on where it ends if the device's write pointer is
	// there too (the checkpoint below normally moves it to the other
	// half anyway); after a torn record or a finished zone the half
	// counts as full, since what follows a torn record is never read.
	e.meta.wp = e.sb.metaHalfCap()
	if logEnd[ckptZone] == e.metaHalfEnd(ckptZone, report) {
		e.meta.wp = logEnd[ckptZone]
	}
	e.ckptSeq = ckpt.seq
	e.loadCheckpoint(ckpt)
	bumpMax(&e.seq, cutTop)

	// 2. Newer operations and the zones they tell recovery to rescan.
	var events []event
	fromStart := map[int]bool{}
	void := map[uint64]bool{} // records whose appends failed (opVoid)
	for _, op := range otherVoids {
		takeVoids(&e.seq, void, op)
		// Recovery's checkpoint resets the half they are in: they are
		// failed appends still, to be voided again before its flush
		// (TestH18eRecoveryCheckpointResetsTheHalfHoldingVoids).
		e.failedSeqs = append(e.failedSeqs, op.voids...)
	}
	if len(otherVoids) > 0 {
		e.failedAppend.Store(true)
		// They are the only durable voids of those records: the
		// checkpoint below appends after them rather than reset
		// their half (TestRecoveryCheckpointKeepsDurableVoids).
		e.meta.nextVoidsEnd, e.meta.nextVoided = logEnd[1-ckptZone], len(e.failedSeqs)
	}
	for i := range ops {
		if ops[i].seq <= ckpt.seq {
			continue
		}
		if ops[i].kind == opVoid {
			takeVoids(&e.seq, void, ops[i])
			continue
		}
		events = append(events, event{seq: ops[i].seq, op: &ops[i]})
		if ops[i].kind == opZoneReset {
			fromStart[ops[i].zone] = true
		}
	}

	if testHookRecoverVoids != nil {
		testHookRecoverVoids(len(void))
	}

	// 3. Newer data records in every data zone.
	type scanned struct {
		z    *zone
		rz   zns.Zone
		end  int64
		torn bool
	}
	var scans []scanned
	for _, z := range e.zones {
		if z == nil {
			continue
		}
		rz := report[z.idx]
		from, ok := ckpt.zoneWP[z.idx]
		if !ok || fromStart[z.idx] || from > rz.WP-rz.Start {
			// Reset since the checkpoint (a write pointer below the
			// checkpoint's can mean nothing else): everything in it
			// is newer.
			from = 0
		}
		if rz.Cond == zns.CondOffline {
			// Nothing in it reads any more (its write pointer is not
			// valid either). If the checkpoint had it allocated to
			// its capacity, and no reset is logged since, nothing
			// newer lies there: what files map there fails to read,
			// and the rest of the file system opens. Else a record
			// newer than the checkpoint may lie there, which would
			// leave older bytes mapped where acknowledged ones were.
			// With AcceptOfflineZones the user has chosen to lose
			// whatever it held, newer records too: the rest opens.
			if err := offlineZoneNews(z, ckpt, fromStart[z.idx]); err != nil && !e.cfg.AcceptOfflineZones {
				return err
			} else if err != nil {
				e.offlineAccepted = append(e.offlineAccepted, z.idx)
				at := z.start // reset since: all of it
				if w, ok := ckpt.zoneWP[z.idx]; ok && !fromStart[z.idx] {
					at += w
				}
				e.lostRoom = append(e.lostRoom, lostRoom{z: z, at: at})
				slog.Error("engine: recover: opening with an offline data zone that may hold records newer than the checkpoint (accept offline zones): what it held is lost; ranges those records wrote read as at the checkpoint, files they grew are shorter, reads of what the checkpoint maps there fail (fsck names the files)",
					"zone", z.idx, "checkpoint_seq", ckpt.seq, "err", err)
			}
			slog.Warn("engine: recover: data zone is offline: reads of what files map there fail", "zone", z.idx)
			z.offline.Store(true) // recovery's checkpoint records it
			scans = append(scans, scanned{z, rz, z.cap, false})
			continue
		}
		recs, end, torn, err := e.scanDataZone(z, rz, from, buf, w)
		if err != nil {
			return err
		}
		for torn {
			// No append is known to have failed since the checkpoint:
			// a header below the write pointer that fails is damage
			// (damagedHeader), never a torn write. With voids above
			// the checkpoint, the block may be a failed append's
			// range, and the zone's log ends there, unless it is
			// neither zeros nor a header a void names
			// (voidedOrNoHeader): bits flipped at rest in a newer
			// record's header, which ending the log there lost with
			// every record after it, silently.
			// A failed append's range may be followed by the
			// appends in flight with it, whole and acknowledged by a
			// flush that began before its failure was known (as
			// without a void, damagedHeader): the log goes on at the
			// next whole newer record, if any; ending it there lost
			// that fsynced data silently
			// (TestH40eFsyncAfterALateFailedAppendSurvivesItsVoid).
			if len(void) > 0 {
				kind, err := e.voidedOrNoHeader(z, rz, end, ckpt.seq, void, buf, w)
				if err != nil {
					return err
				}
				if kind == besideVoidEnds {
					break
				}
				if kind != besideVoidJudge {
					next, nextAt, err := e.laterRecord(rz, end+BlockSize, rz.WP-rz.Start, ckpt.seq, buf, w)
					if err != nil {
						return fmt.Errorf("engine: recover: read zone %d: %w", z.idx, err)
					}
					if next == 0 {
						break // the zone's log ends at the failed range
					}
					if kind == besideVoidZeros {
						// No byte says whether these zeros are
						// the voided append's range: judged as
						// without a void (reported, goes on).
						kind = besideVoidJudge
					} else {
						slog.Warn("engine: recover: a voided record's header fails its checksum; recovery goes on at the zone's next newer record",
							"zone", z.idx, "at", end, "next", next, "next_at", nextAt)
						more, mend, mtorn, err := e.scanDataZone(z, rz, nextAt, buf, w)
						if err != nil {
							return err
						}
						recs, end, torn = append(recs, more...), mend, mtorn
						continue
					}
				}
			}
			next, err := e.damagedHeader(z, rz, end, ckpt.seq, buf, w)
			if err != nil {
				var dmg *damagedRecordError
				if !errors.As(err, &dmg) || !e.cfg.AcceptDamagedRecords {
					return err
				}
				// The user chose to lose that record: the zone's
				// log goes on at the next whole one, if any.
				e.damage = append(e.damage, "accepted: "+dmg.what)
				slog.Error("engine: recover: opening past a damaged record (accept damaged records): "+dmg.what, "zone", z.idx)
			}
			// Without an error, next is where a failed append's
			// range may end (damagedHeader), or 0: torn.
			if next == 0 {
				break
			}
			more, mend, mtorn, err := e.scanDataZone(z, rz, next, buf, w)
			if err != nil {
				return err
			}
			recs, end, torn = append(recs, more...), mend, mtorn
		}
		for _, r := range recs {
			if r.seq > ckpt.seq && void[r.seq] {
				slog.Warn("engine: recover: a record whose append failed is not replayed", "zone", z.idx, "seq", r.seq, "file", r.rec.File)
				continue
			}
			if r.seq > ckpt.seq {
				events = append(events, r)
			}
		}
		scans = append(scans, scanned{z, rz, end, torn})
	}
	// A zone a torn record ends stays active until recovery's checkpoint
	// is durable (settleTornZones): it counts against the budget before
	// settleZone decides which cleanly written zones stay open, or those
	// fill the budget beside it and the device's active zones pass its
	// limit (TestH17cTornZonesCountedWhenRecoveryKeepsZonesOpen).
	var torns []*zone
	for _, s := range scans {
		if !e.readOnly && heldTorn(s.z, s.rz, s.torn) {
			s.z.tornHeld.Store(true)
			s.z.unfinished = true
			e.placer.unfinished++
			torns = append(torns, s.z)
		}
	}
	// A clean, partly written zone that would fit the budget but for the
	// torn ones waits for recovery's checkpoint: if it lands, they are
	// finished and give their places back (settleHeld).
	var waiting []*zone
	for _, s := range scans {
		if e.settleZone(s.z, s.rz, s.end, s.torn, len(torns)-len(waiting)) {
			waiting = append(waiting, s.z)
		}
	}

	// 4. Replay in sequence order. What is held at the end was never
	// committed (replayRecord).
	sort.Slice(events, func(i, j int) bool { return events[i].seq < events[j].seq })
	e.held = map[uint64][]extent{}
	defer func() { e.held = nil }()
	for _, ev := range events {
		if ev.op != nil {
			e.replayOp(*ev.op)
		} else {
			e.replayRecord(ev.rec, ev.dev)
		}
		if ev.seq > e.seq.Load() {
			e.seq.Store(ev.seq)
		}
	}
	for _, z := range e.zones {
		if z != nil {
			// Pads and records of removed files count too: a sequence
			// number on the device is never handed out again.
			bumpMax(&e.seq, z.lastSeq.Load())
		}
	}
	for id := range e.byID {
		e.nextID = max(e.nextID, id+1)
	}
	e.nsBytes = 0
	for name := range e.byName {
		e.nsBytes += nsEntryLen(name)
	}
	e.recountValid()
	if e.readOnly {
		e.recovered, e.recoveredVoid = events, void
		return nil
	}
	dead := e.deadZones()
	if len(events) > 0 || len(dead) > 0 {
		slog.Info("engine: recovered", "checkpoint_seq", ckpt.seq, "replayed", len(events), "seq", e.seq.Load(), "dead_zones", len(dead))
	}
	// The checkpoint that forgets the dead zones is durable before any of
	// them is reset (as f2fs reuses a segment only after the checkpoint
	// that frees it): a crash in between recovers from it, scans them
	// from their start and finds only records older than itself.
	if err := e.checkpoint(); err != nil {
		if errors.Is(err, ErrNoSpace) && len(e.held) == 0 {
			// The namespace outgrew a half (an older zonefold did not
			// bound it: nsRoomFor). Nothing recovery decided needs a
			// checkpoint, so the file system opens on its log as it
			// stands, without resetting the dead zones, and serves
			// every byte for reading; operations needing a switch
			// get ENOSPC, and the log as it stands has room for few
			// more records (often one), so removes cannot shrink it
			// enough (review): the way out is to copy the files off
			// and format. Refusing to open left the data unreachable
			// on a device fsck called clean.
			slog.Warn("engine: recover: the namespace's checkpoint does not fit a metadata half (a device an older zonefold filled with names); opening on the metadata log as it stands: every file reads, but creates, removes, renames and writes that need a metadata half switch fail with ENOSPC. Copy the files off (zonefold get) and format the device", "half", ckptZone, "at", e.meta.wp, "err", err)
			e.settleHeld(torns, waiting, false)
			return nil
		}
		if !errors.Is(err, errNextHalfReset) {
			return err
		}
		// The other half refused its reset (a zone gone read-only)
		// and the recovered half was left as it was: the checkpoint
		// goes into its own log, and the file system opens on it, as
		// the last one did; namespace operations fail with ErrMetaLog
		// once the half fills. Without it, what recovery decided
		// (dropped undo records, uncommitted extents) was not
		// durable, and the next record of such a file, carrying its
		// size, committed them at the next recovery.
		slog.Warn("engine: recover: no checkpoint into the other metadata half; it goes into this one's log", "half", ckptZone, "at", e.meta.wp, "err", err)
		cerr := errors.New("the log has ended")
		if e.meta.wp < e.sb.metaHalfCap() {
			cerr = e.checkpointInHalf()
		}
		if cerr != nil {
			if len(e.held) > 0 {
				return fmt.Errorf("engine: recover: metadata half %d refuses its reset (%w), and recovery's checkpoint in half %d failed: %w; it dropped uncommitted records (of %d files) that a file's next record would commit (fsck reads the file system without writing)",
					1-ckptZone, err, ckptZone, cerr, len(e.held))
			}
			// Nothing recovery decided needs it: the file system
			// opens without resetting the dead zones (no checkpoint
			// forgets them; GC collects them later).
			slog.Warn("engine: recover: no room for a checkpoint in this metadata half either; the log goes on", "half", ckptZone, "at", e.meta.wp, "err", cerr)
			e.settleHeld(torns, waiting, false)
			return nil
		}
	}
	e.settleHeld(torns, waiting, true)
	e.resetDeadZones(dead)
	return nil
}

// takeVoids adds the records an opVoid names to void; its number and
// theirs were handed out, and never are again.
func takeVoids(seq *atomic.Uint64, void map[uint64]bool, op nsOp) {
	bumpMax(seq, op.seq)
	for _, s := range op.voids {
		void[s] = true
		bumpMax(seq, s)
	}
}

// settleHeld settles what recovery held until its checkpoint: the torn
// zones (settleTornZones), then the cleanly written zones waiting for
// their places (settleZone), open where the budget now has room and
// finished where not or where it holds nothing valid (deadZones: reset
// next, as any full zone without data).
func (e *Engine) settleHeld(torns, waiting []*zone, checkpointed bool) {
	e.settleTornZones(torns, checkpointed)
	for _, z := range waiting {
		if !z.resetPending.Load() && len(e.placer.open) < e.placer.budget-e.placer.unfinished {
			z.state.Store(zoneOpen)
			e.placer.open = append(e.placer.open, z)
			continue
		}
		z.alloc.Store(z.cap)
		e.finishAtRecovery(z)
	}
}

// settleTornZones finishes the zones a torn record ends (zone.tornHeld,
// counted unfinished since the scan) once recovery's checkpoint is
// durable (checkpointed), which numbers every record on the device below
// it. Finished before, a crash ahead of the checkpoint left the zone's
// write pointer at its capacity, and the next recovery, from the old
// checkpoint, found the torn record's header below the write pointer with
// its missing blocks reading as zeros, and replayed it over fsynced data
// as if those blocks had rotted (EIO where the acknowledged bytes were:
// TestH17bTornRecordAfterInterruptedRecovery). Without a checkpoint the
// zones stay as they are, unfinished (they keep their places in the
// device's limits) and held: GC finishes them (retryFinish) only after a
// checkpoint, so that until then a recovery finds the record torn again.
func (e *Engine) settleTornZones(torns []*zone, checkpointed bool) {
	if !checkpointed {
		return
	}
	for _, z := range torns {
		z.tornHeld.Store(false)
		if err := e.dev.FinishZone(z.idx); err != nil {
			e.stats.finishErrs.Add(1)
			slog.Warn("engine: recover: finish zone", "zone", z.idx, "err", err, "still_active", e.zoneMayBeActive(z))
			continue // still unfinished: GC tries again (retryFinish)
		}
		z.unfinished = false
		e.placer.unfinished--
	}
}

// heldTorn reports whether a zone whose scan ended torn is still active
// on the device (not full, finished, read-only or offline), and so must
// wait for recovery's checkpoint to be finished (settleTornZones).
func heldTorn(z *zone, rz zns.Zone, torn bool) bool {
	wp := rz.WP - rz.Start
	return torn && rz.Cond != zns.CondReadOnly && rz.Cond != zns.CondOffline && rz.Cond != zns.CondFull &&
		wp != 0 && wp < z.cap
}

// startFresh sets up the metadata log of a device Format just wrote: its
// checkpoint is the only record, in metadata zone 0.
func (e *Engine) startFresh() error {
	var err error
	if e.meta, err = newMetaLog(e); err != nil {
		return err
	}
	e.meta.active = 0
	e.meta.wp = BlockSize + metaRecordLen(len(encodeCheckpoint(&checkpointState{nextID: 1, zoneWP: map[int]int64{}})))
	e.seq.Store(formatSeq)
	return nil
}

// formatSeq is the sequence number of the empty checkpoint Format writes
// (its first): everything after it is numbered above.
const formatSeq = 1

// metaHalfEnd is where metadata half h's log ends at the latest: its
// zones fill in order, so past the first one not written to capacity
// there is nothing of it.
func (e *Engine) metaHalfEnd(h int, report []zns.Zone) int64 {
	return e.halfEnd(report[e.sb.MetaZones[h] : e.sb.MetaZones[h]+e.sb.MetaGroup])
}

// halfEnd is metaHalfEnd of a half whose zones' report is zones.
//
// On a device whose zone table was inferred (zns.Emu.inferZones) a
// zone's write pointer is only where the emu file's data ends in it,
// and a copy that made zero blocks holes (cp --sparse=always, rsync -S)
// puts it before a record whose last block is all zeros: a checkpoint's
// payload ends with the last data zone's write pointer, 8 zero bytes
// when that zone is empty. One that ends a zone's capacity so showed the
// zone written part way, which ended the half there: the checkpoint
// taken for torn and every record after it, in the half's next zones,
// lost without a word (TestSalvageLostZoneTableMetaRecordEndingInAZeroBlock).
// The log fills a half's zones in order, so there a zone before the
// last one that holds data was written to its capacity; its tail reads
// as the zeros the records hold. (A record past the last zone's
// inferred write pointer: scanMetaHalf.)
func (e *Engine) halfEnd(zones []zns.Zone) int64 {
	last := -1
	if tableInferred(e.dev) {
		for i, rz := range zones {
			if rz.WP > rz.Start {
				last = i
			}
		}
	}
	var end int64
	for i, rz := range zones {
		w := min(max(rz.WP-rz.Start, 0), e.sb.ZoneCap)
		if i < last {
			w = e.sb.ZoneCap
		}
		end += w
		if w < e.sb.ZoneCap {
			break
		}
	}
	return end
}

// metaUndecoded is a metadata record whose checksum holds (it was
// written whole) and that does not decode: damage, or a writer's bug,
// never a torn write.
type metaUndecoded struct {
	kind uint16
	seq  uint64 // its header's
	err  error
}

// checkUndecoded decides what the undecodable records of each metadata
// half (scanMetaHalf) mean for recovery from checkpoint ckptSeq in half
// ckptHalf. A checkpoint numbered above it is refused: recovery would
// quietly lose every operation logged after that checkpoint (they are
// in its half, which recovery then ignores), and its own checkpoint
// would reset that half, leaving no trace. An operation above it in
// ckptHalf ends the log, and everything logged after it is lost:
// damage fsck reports. Older ones were superseded and cost nothing.
func (e *Engine) checkUndecoded(undecoded [2][]metaUndecoded, ckptSeq uint64, ckptHalf int) error {
	for half, bad := range undecoded {
		for _, u := range bad {
			switch {
			case u.seq <= ckptSeq:
			case u.kind == metaCheckpoint:
				err := fmt.Errorf("engine: recover: metadata half %d holds checkpoint %d, checksum valid, that does not decode (%w); recovering from the older checkpoint %d would lose what was logged after it: refusing to open (fsck reads the device without writing)",
					half, u.seq, u.err, ckptSeq)
				if !e.salvage {
					return err
				}
				e.salvaged(err)
			case half == ckptHalf:
				what := "operation"
				if u.kind == metaPack {
					what = "pack of operations up to"
				}
				e.damage = append(e.damage, fmt.Sprintf("%s %d in metadata half %d, checksum valid, does not decode (%v): the log is read up to it, and what was logged after it is not replayed", what, u.seq, half, u.err))
			}
		}
	}
	return nil
}

// salvaged records, for Salvage, a refusal recovery went on past: damage
// fsck reports.
func (e *Engine) salvaged(err error) {
	e.damage = append(e.damage, "salvaged past a refusal (what was logged after the checkpoint salvage starts from is not replayed): "+err.Error())
}

// checkHiddenLog looks past where the walk of metadata half h, the one
// recovery does not start from, stopped (at off): a record there whose
// checksum fails, followed by whole records numbered above the
// checkpoint recovery starts from (ckptSeq), is damage, never a torn
// write (nothing is logged after a torn record, and a half's log is
// written in order: the followers prove it was written whole). That half
// was the active one, and what failed is its newest checkpoint or the
// log before the operations after it; recovering from the older
// checkpoint would quietly lose every operation logged after it, and
// replay data records against zones it does not know were reset since
// (GC's resets logged after it, recovery's unlogged ones). So Open
// refuses, as it does a newer checkpoint that does not decode
// (checkUndecoded), and fsck says why. A stop that is the log's end (a
// torn last record, the zeros after a finished half's log) finds no
// followers. A zeroed block in a half filled to capacity is not looked
// past: the search would read the whole half at every Open. In the half
// recovery starts from, records after an unreadable one can be failed
// appends that were never acknowledged (metaLog.strayFrom), so its walk
// ends there as before. A block past the stop that the medium fails to
// read, with no whole record numbered at or below the checkpoint after
// it (which would prove the half's log was older there), may be what
// was logged after the checkpoint: passed over, a newer pack whose
// header block failed let Open go on without it, silently
// (TestH43hHiddenLogRecordWithAnUnreadableHeaderRefuses), so Open
// refuses there too.
func (e *Engine) checkHiddenLog(h int, off int64, report []zns.Zone, ckptSeq uint64, buf *scanBuf, w *uring.Waiter) error {
	end := e.metaHalfEnd(h, report)
	if off+BlockSize > end {
		return nil
	}
	later, err := e.laterMeta(h, off, end, ckptSeq, end >= e.sb.metaHalfCap(), buf, w)
	if err != nil {
		return err
	}
	if later.top > ckptSeq {
		return fmt.Errorf("engine: recover: metadata half %d's log stops at %d on a record that fails its checksum, and %s follows it, above the checkpoint %d recovery would start from: the half's newest checkpoint or log is damaged, and recovering from the older checkpoint would lose what was logged after it: refusing to open (fsck reads the device without writing)",
			h, off, later.text(), ckptSeq)
	}
	if later.bad != nil {
		return fmt.Errorf("engine: recover: metadata half %d's log stops at %d on a record that fails its checksum, and the block at %d after it fails to read: the medium failed the read (%w); what was logged there may be newer than the checkpoint %d recovery would start from, and recovering from that checkpoint would lose it: refusing to open (fsck reads the device without writing)",
			h, off, later.badAt, later.bad, ckptSeq)
	}
	return nil
}

// checkCutLog looks at where the walk of metadata half h, the one
// recovery starts from, stopped (at off), below the half's write pointer
// (its log ends there otherwise): the write pointer moves only over
// blocks on the media, so a record there whose checksum fails was
// written whole and changed since (damage), or is a write that failed
// and was never acknowledged (metaLog.strayFrom), which no byte tells
// apart; whole records numbered above the checkpoint after it can be
// either too. The walk ends there all the same (replaying what may never
// have been acknowledged is worse), but not silently: if it was damage,
// what was logged from there on is lost (a file removed since is back,
// a renamed one under its old name, one created since gone), so
// recovery says so and fsck reports it (Engine.damage). An all-zero
// block ending a half filled to capacity is its log's clean end, and a
// whole header whose record runs past the write pointer a torn write.
// It returns the highest number of a whole record it found after the
// stop (0: none).
func (e *Engine) checkCutLog(h int, off int64, report []zns.Zone, ckptSeq uint64, buf *scanBuf, w *uring.Waiter) (uint64, error) {
	end := e.metaHalfEnd(h, report)
	if off+BlockSize > end {
		return 0, nil
	}
	full := end >= e.sb.metaHalfCap()
	hb := buf.mem[:BlockSize]
	follows := "nothing whole follows it"
	var cutTop uint64
	if err := e.readMeta(h, off, hb, w); err != nil {
		if !errors.Is(err, syscall.EIO) {
			return 0, fmt.Errorf("engine: recover: read metadata half %d at %d: %w", h, off, err)
		}
		// This only reports: bad media is no reason to refuse an
		// Open that went on before it looked
		// (TestH39fCutLogReportSurvivesABadBlockAfterIt).
		follows = fmt.Sprintf("it fails to read: %v", err)
	} else {
		if mh, err := decodeMetaHeader(hb); err == nil && mh.fs == e.sb.FS() && off+metaRecordLen(mh.length) > end {
			return 0, nil // torn: the record runs past the write pointer
		}
		zero := isZero(hb)
		// A block after it that the medium fails to read
		// (later.bad) is passed over: what follows the cut is
		// not replayed either way, and if the block reads again a
		// later Open finds what it holds (checkHiddenLog). The
		// report says so: "nothing whole follows it" alone would
		// claim a look at a block nobody could read.
		later, err := e.laterMeta(h, off, end, ckptSeq, full, buf, w)
		switch {
		case err != nil:
			return 0, err
		case later.top == 0 && zero && full:
			return 0, nil
		case later.top != 0:
			follows = later.text() + " follows it"
			cutTop = later.top
		}
		if later.bad != nil {
			follows += fmt.Sprintf("; the block at %d after it fails to read (the medium failed the read: %v) and was passed over, so what it holds is not known", later.badAt, later.bad)
		}
	}
	d := fmt.Sprintf("metadata half %d's log stops at %d, below its write pointer (%d), on a record that fails its checksum (%s): the operations logged from there on are not replayed; unless that record was a write that failed (never acknowledged), it is damage, and files removed since may be back, renamed ones under their old names, created ones gone",
		h, off, end, follows)
	e.damage = append(e.damage, d)
	slog.Error("engine: recover: "+d, "checkpoint_seq", ckptSeq)
	return cutTop, nil
}

// laterMeta finds the whole records of this file system in metadata half
// h from off to end, block by block (a damaged header gives no length
// to skip by), and returns the highest number among them above floor and
// where that record is (0: none). With zeroEnd, an all-zero block at off is the
// log's clean end and nothing is read past it. A record whose header
// reads and whose own read fails (bad media in it) counts too, with
// unread: its number was handed out, and what it logged may be lost.
// Passed over, checkHiddenLog let Open go on without a newer pack
// beside the damaged checkpoint it follows, and checkCutLog numbered
// recovery's checkpoint below it
// (TestH43fHiddenLogRecordWithAnUnreadableBlockRefuses). A block that
// the medium fails to read, header or not, is passed over and named
// (laterFound.bad) unless a whole record numbered at or below floor
// follows it. Its only errors are those of reads that are not EIO and of
// mapping a buffer (no I/O): EIO is the medium's, and is a result.
func (e *Engine) laterMeta(h int, off, end int64, floor uint64, zeroEnd bool, buf *scanBuf, w *uring.Waiter) (later laterFound, err error) {
	top := floor
	var topAt int64
	var unread bool
	var badAt int64
	var bad error
	var rec *scanBuf
	defer func() {
		if rec != nil {
			rec.close()
		}
	}()
	read := func(at int64, b []byte) error {
		if err := e.readMeta(h, at, b, w); err != nil {
			return fmt.Errorf("engine: recover: read metadata half %d at %d: %w", h, at, err)
		}
		return nil
	}
	failed := func(at int64, err error) {
		if bad == nil {
			// The medium's error, without read's wrap: the
			// refusal names the half and the offset itself.
			badAt, bad = at, errors.Unwrap(err)
		}
	}
	err = scanBlocks(off, end, buf.mem, read, failed, func(at int64, b []byte) (bool, error) {
		if at == off {
			// The record the walk stopped on; a zero block there
			// is the log's clean end with zeroEnd.
			return zeroEnd && isZero(b), nil
		}
		mh, err := decodeMetaHeader(b)
		if err != nil || mh.fs != e.sb.FS() {
			return false, nil
		}
		// A whole record at or below floor after a block that
		// failed to read: the half's log is written in order, so
		// that block held nothing newer.
		old := mh.seq <= floor && bad != nil
		if mh.seq <= top && !old {
			return false, nil
		}
		l := metaRecordLen(mh.length)
		if at+l > end {
			return false, nil
		}
		if rec == nil || int64(len(rec.mem)) < l {
			if rec != nil {
				rec.close()
				rec = nil
			}
			if rec, err = newScanBuf(int(l)); err != nil {
				return false, err
			}
		}
		whole := rec.mem[:l]
		if err := read(at, whole); err != nil {
			if !errors.Is(err, syscall.EIO) {
				return false, err
			}
			if !old {
				top, topAt, unread = mh.seq, at, true
			}
			return false, nil
		}
		if _, err := verifyMeta(whole, mh); err == nil {
			if old {
				badAt, bad = 0, nil
			} else {
				top, topAt, unread = mh.seq, at, false
			}
		}
		return false, nil
	})
	if err != nil {
		return laterFound{}, err
	}
	later.badAt, later.bad = badAt, bad
	if top > floor {
		later.top, later.at, later.unread = top, topAt, unread
	}
	return later, nil
}

// laterFound is what laterMeta found past where a walk stopped.
type laterFound struct {
	// top is the highest number above floor of a record there, whole
	// or, with unread, with a header that reads and the rest failing
	// to; at is where it is (0: none).
	top    uint64
	at     int64
	unread bool
	// bad is the read error of the first block there that the medium
	// failed to read with no whole record at or below floor after it,
	// at badAt (nil: none).
	bad   error
	badAt int64
}

// text names the record l found: numbered top at at, whole or, with
// unread, with a header that reads and the rest failing to.
func (l laterFound) text() string {
	if l.unread {
		return fmt.Sprintf("a record numbered %d (at %d), whose header reads and the rest fails to (the medium failed the read),", l.top, l.at)
	}
	return fmt.Sprintf("a whole record numbered %d (at %d)", l.top, l.at)
}

// metaReadError is a read of the record at offset at of metadata half
// half that failed (scanMetaHalf): recovery names bad media there.
type metaReadError struct {
	half int
	at   int64
	err  error
}

func (r *metaReadError) Error() string {
	return fmt.Sprintf("engine: recover: read metadata half %d at %d: %v", r.half, r.at, r.err)
}

func (r *metaReadError) Unwrap() error { return r.err }

// scanMetaHalf reads one metadata half's records.
// It returns them, where its valid log ends, and the records whose
// checksum holds but that do not decode (a checkpoint is skipped, an
// operation ends the log).
func (e *Engine) scanMetaHalf(half int, report []zns.Zone, buf *scanBuf, w *uring.Waiter) (*checkpointState, []nsOp, int64, []metaUndecoded, error) {
	var best *checkpointState
	var ops []nsOp
	var bad []metaUndecoded
	end := e.metaHalfEnd(half, report)
	off := int64(BlockSize)
	for off+BlockSize <= end {
		hb := buf.mem[:BlockSize]
		if err := e.readMeta(half, off, hb, w); err != nil {
			return nil, nil, 0, nil, &metaReadError{half, off, err}
		}
		h, err := decodeMetaHeader(hb)
		if err != nil || h.fs != e.sb.FS() {
			break // the end of this zone's valid log
		}
		n := metaRecordLen(h.length)
		// Past the write pointer a record is torn, but where the
		// zone table was inferred that is only where the emu file's
		// data ends (halfEnd): a record whose last blocks are zeros
		// made holes runs past it, whole. There it is read (the
		// holes read as zeros) and kept if its checksum holds, as a
		// data record is (wholePastInferredWP).
		past := off+n > end
		if past && (!tableInferred(e.dev) || off+n > e.sb.metaHalfCap()) {
			break // torn
		}
		if err := buf.grow(int(n)); err != nil {
			return nil, nil, 0, nil, err
		}
		rec := buf.mem[:n]
		if err := e.readMeta(half, off+BlockSize, rec[BlockSize:], w); err != nil {
			return nil, nil, 0, nil, &metaReadError{half, off, err}
		}
		payload, err := verifyMeta(rec, h)
		if err != nil {
			break
		}
		if past {
			end = off + n // whole past an inferred write pointer
		}
		switch h.kind {
		case metaCheckpoint:
			c, err := decodeCheckpoint(payload)
			if err != nil {
				slog.Warn("engine: recover: corrupt checkpoint skipped", "seq", h.seq, "err", err)
				bad = append(bad, metaUndecoded{kind: h.kind, seq: h.seq, err: err})
				break
			}
			if best == nil || c.seq > best.seq {
				best = c
			}
		case metaOp:
			op, err := decodeOp(h.seq, payload)
			if err != nil {
				slog.Warn("engine: recover: corrupt operation ends the log", "seq", h.seq, "err", err)
				return best, ops, off, append(bad, metaUndecoded{kind: h.kind, seq: h.seq, err: err}), nil
			}
			ops = append(ops, op)
		case metaPack:
			// All or nothing: the checksum held, so every operation
			// in it was written; one that does not decode is damage
			// and ends the log before the pack, as a one-operation
			// record that does not decode does.
			packed, err := decodePack(h.seq, payload)
			if err == nil && e.sb.Version < superPackVersion {
				err = fmt.Errorf("%w: a pack of operations on a device of format %d, which holds none", errCorruptMeta, e.sb.Version)
			}
			if err != nil {
				slog.Warn("engine: recover: corrupt pack of operations ends the log", "seq", h.seq, "err", err)
				return best, ops, off, append(bad, metaUndecoded{kind: h.kind, seq: h.seq, err: err}), nil
			}
			ops = append(ops, packed...)
		}
		off += n
	}
	return best, ops, off, bad, nil
}

// scanDataZone reads the records of a data zone from offset from (in the
// zone) to its write pointer. It returns them, where the valid log ends,
// and whether it ended early on a torn or corrupt record.
func (e *Engine) scanDataZone(z *zone, rz zns.Zone, from int64, buf *scanBuf, w *uring.Waiter) ([]event, int64, bool, error) {
	var out []event
	wp := rz.WP - rz.Start
	off := from
	for off < wp {
		if off+BlockSize > wp {
			return out, off, true, nil
		}
		hb := buf.mem[:BlockSize]
		if err := e.readDev(rz.Start+off, hb, w); err != nil {
			if !errors.Is(err, syscall.EIO) {
				return nil, 0, false, fmt.Errorf("engine: recover: read zone %d at %d: %w", z.idx, off, err)
			}
			// Once more: a failure that passes reads now.
			if err = e.readDev(rz.Start+off, hb, w); err != nil {
				if _, terr := e.unreadableHeader(z, rz, off, wp, err, buf, w); terr != nil {
					return nil, 0, false, terr
				}
				return out, off, true, nil
			}
		}
		h := &RecordHeader{}
		if err := DecodeHeader(hb, h); err != nil || h.FS != e.sb.FS() {
			return out, off, true, nil
		}
		// The header is ours, whole or not the record is: its number
		// was handed out and is never handed out again.
		bumpMax(&z.lastSeq, h.Seq)
		// So was its file id (DecodeHeader holds it below maxSeq),
		// even where no create of it became durable: format 3 holds
		// a deferred create for a pack while a flush that
		// acknowledges nothing (GC's, a truncate's) writes its
		// data. Handing the id out again when recovery's checkpoint
		// does not land matched that record, newer than the
		// checkpoint, to the new file, and fsck called its bytes
		// lost (TestH42hOrphanRecordIDBesideAFullReadOnlyHalf; from
		// a real truncate's and GC's flush:
		// TestH42hOrphanRecordFromATruncateFlush,
		// TestH44bOrphanRecordFromAGCRelocation).
		if h.Kind != KindPad {
			e.nextID = max(e.nextID, h.File+1)
		}
		n := BlockSize + int64(h.DataLen)
		if off+n > wp {
			whole, err := e.wholePastInferredWP(z, rz, off, h, buf, w)
			if err != nil || !whole {
				return out, off, !whole, err
			}
			// Whole past an inferred write pointer: its last
			// blocks are holes in the emu file.
			wp = off + n
		}
		if h.Kind != KindPad && h.DataLen > 0 {
			data := buf.mem[:h.DataLen]
			if int64(len(buf.mem)) < int64(h.DataLen) {
				return out, off, true, nil
			}
			if err := e.readDev(rz.Start+off+BlockSize, data, w); err != nil {
				if !errors.Is(err, syscall.EIO) {
					return nil, 0, false, fmt.Errorf("engine: recover: read zone %d at %d: %w", z.idx, off, err)
				}
				// Media damage in the data, its header whole: as a
				// block that fails its checksum (below), the record
				// is replayed all the same and reads of what fails
				// fail. Failing Open on it left every file of the
				// device unreachable.
				slog.Warn("engine: recover: a record's data fails to read; it is replayed, and reads of its bad blocks fail",
					"zone", z.idx, "record_at", off, "seq", h.Seq, "file", h.File, "err", err)
			} else if b := badBlock(data, h.Sums); b >= 0 {
				// Below the write pointer every block was written (a
				// torn write ends at it, and is caught above): this
				// one changed since. The record is replayed all the
				// same, so that the records after it are too and a
				// read of the bad block fails instead of returning
				// older bytes.
				slog.Warn("engine: recover: a data block fails its checksum", "zone", z.idx, "record_at", off,
					"block_at", off+BlockSize+int64(b)*BlockSize, "seq", h.Seq, "file", h.File)
			}
		}
		if h.Kind != KindPad {
			out = append(out, event{seq: h.Seq, rec: h, dev: rz.Start + off + BlockSize})
		}
		off += n
	}
	return out, off, false, nil
}

// What a block where a data zone's scan ended below its write pointer
// is, beside voids above the checkpoint (voidedOrNoHeader).
const (
	// besideVoidEnds: the scan's to judge, as it was: the write pointer
	// cuts the block, it fails to read, or it is a whole header whose
	// record the write pointer cuts; the zone's log ends there.
	besideVoidEnds = iota
	// besideVoidZeros: zeros, as a failed append's range reads (the emu
	// zeroes it; a zoned drive does not move its write pointer over
	// one).
	besideVoidZeros
	// besideVoidHeader: a header of ours numbered above the checkpoint
	// that a void names (a failed append's own, part of it written).
	besideVoidHeader
	// besideVoidJudge: anything else, damage at rest, which
	// damagedHeader judges as it does without a void.
	besideVoidJudge
)

// voidedOrNoHeader says what the block at off of a data zone, where its
// scan ended below the write pointer, is, with the log voiding records
// above the checkpoint (void): whether it may be the range of an append
// that failed (zeros, or a header a void names), or is damage at rest,
// which damagedHeader judges as it does without a void: a header of
// ours that no void names (newerHeaderLike) refuses Open, other bytes
// are reported as possible damage. A block that fails to read, that
// the write pointer cuts, or a whole header (its record runs past the
// write pointer: torn) is the scan's to judge, as it was.
func (e *Engine) voidedOrNoHeader(z *zone, rz zns.Zone, off int64, ckptSeq uint64, void map[uint64]bool, buf *scanBuf, w *uring.Waiter) (int, error) {
	if off+BlockSize > rz.WP-rz.Start {
		return besideVoidEnds, nil
	}
	hb := buf.mem[:BlockSize]
	if err := e.readDev(rz.Start+off, hb, w); err != nil {
		if errors.Is(err, syscall.EIO) {
			return besideVoidEnds, nil
		}
		return 0, fmt.Errorf("engine: recover: read zone %d at %d: %w", z.idx, off, err)
	}
	if isZero(hb) {
		return besideVoidZeros, nil
	}
	var h RecordHeader
	if DecodeHeader(hb, &h) == nil && h.FS == e.sb.FS() {
		return besideVoidEnds, nil // whole: its record runs past the write pointer (torn)
	}
	if newerHeaderLike(hb, e.sb.FS(), ckptSeq) && void[binary.LittleEndian.Uint64(hb[8:])] {
		return besideVoidHeader, nil
	}
	return besideVoidJudge, nil
}

// testHookRecoverVoids, if set, is told how many records the log voids
// above the checkpoint recovery starts from (tests).
var testHookRecoverVoids func(n int)

// reportRollbacks reports, as damage, the zones the device took back to
// an older flush when it opened (zns.RollbackReporter: the emulator,
// whose last flush's data did not match the checksums it wrote with
// it). A power cut during that flush leaves that, and loses nothing
// acknowledged; damage at rest after a flush that returned leaves it
// too, and then the records and log operations that flush made durable
// in the zone are gone, their files back as the flush before had them,
// with no trace on the device: recovery cannot tell, so it says so
// rather than open clean.
func (e *Engine) reportRollbacks() {
	rr, ok := e.dev.(zns.RollbackReporter)
	if !ok {
		return
	}
	for _, r := range rr.Rollbacks() {
		d := fmt.Sprintf("device zone %d: the device took back bytes %d..%d, which its last flush wrote, because they no longer match that flush's checksum: a power cut during that flush (nothing lost that was acknowledged), or damage at rest after it, and then what was written there before that flush returned (fsynced file data, logged operations) is lost",
			r.Zone, r.From, r.To)
		e.damage = append(e.damage, d)
		slog.Error("engine: recover: " + d)
	}
}

// checkSlotFallback handles a device that opened from the older copy
// of its zone table (zns.SlotFallbackReporter: the emulator, whose
// newest header slot failed its checksum). A power cut tearing that
// slot's write leaves it, and loses nothing acknowledged; damage at
// rest to the slot after its flush returned leaves it too, and then
// what that flush made durable lies past the older table's write
// pointers: the records there are not replayed (an acknowledged rename
// is undone, an fsynced file is back as before), and Open's own writes
// land on them, losing them for good. Nor can a write pointer be safely
// moved over that data: the lost slot's checksums of it are gone, so
// nothing says it reached the media whole (docs/zns.md). So:
//   - no zone holds data past those pointers (SlotFallback.DataPast
//     empty): nothing is lost; noted (fsck) and logged, Open goes on;
//   - data past them, the damaged slot keeping the emu magic: a slot
//     write a crash tore looks just so (as does bit rot inside the
//     slot), so it is noted and logged too, and Open goes on;
//   - data past them, the slot written over (SlotFallback.Overwritten:
//     no crash leaves that): damage (fsck exit 1), and a read-write
//     Open refuses unless the user accepts losing it
//     (Config.AcceptDamagedRecords), after salvaging what they can.
func (e *Engine) checkSlotFallback() error {
	sr, ok := e.dev.(zns.SlotFallbackReporter)
	if !ok {
		return nil
	}
	f, ok := sr.SlotFallback()
	if !ok {
		return nil
	}
	d := "device: " + f.String()
	if len(f.DataPast) == 0 || !f.Overwritten {
		// With no data past the pointers nothing a newer table claimed
		// is lost: the older copy was damaged, or a torn slot recorded
		// no writes (see zns.SlotFallback); the next flush repairs the
		// copy.
		if len(f.DataPast) > 0 {
			// The slot still starts with the magic: a write of it
			// that a crash (kill -9, power cut) tore, which loses
			// nothing acknowledged, or damage at rest, which loses
			// the last flush's writes; no byte tells them apart. A
			// crash is by far the likelier (a kill -9 tears a large
			// slot's write between pages), and neither refusing
			// every start after one nor calling it damage (fsck's
			// exit 1 after a crash that lost nothing) is right: Open
			// goes on, and fsck notes it.
			d += ". The slot still starts with the emu magic, as a slot write a crash tore leaves it (which loses nothing acknowledged): the device opens as the older copy has it"
		}
		e.deviceNotes = append(e.deviceNotes, d)
		slog.Warn("engine: recover: " + d)
		return nil
	}
	if !e.readOnly && !e.cfg.AcceptDamagedRecords {
		return fmt.Errorf("engine: recover: %s: refusing to open, which would write over it (fsck reads the device without writing; fsck --copy-to DIR copies the files as the older table has them). "+
			"If a power cut interrupted the device, or once you have copied what you need, give --accept-damaged-records to zonefold serve (Config.AcceptDamagedRecords) to open it as the older table has it", d)
	}
	if e.readOnly {
		d += ". zonefold serve refuses the device, whose writes would destroy that data; fsck --copy-to DIR copies the files as the older copy has them (a file written or renamed by that flush may be missing, or under its old or a temporary name); once you have what you need, or if a power cut is what interrupted the device, zonefold serve --accept-damaged-records opens it as the older copy has it"
	} else {
		d = "accepted: " + d
	}
	e.damage = append(e.damage, d)
	slog.Error("engine: recover: " + d)
	return nil
}

// damagedHeader decides what a data zone's scan ending at off, below
// the write pointer, means: the zone's write pointer moves only over
// blocks on the media (a torn write ends at it: scanDataZone's other
// ends), so a header block wholly below it that fails its checksum was
// written whole and changed since, unless an append that failed left it
// (the host took the write pointer past a range it did not write), and
// every flush after a failed append is preceded by a checkpoint or by
// voids of the failed records in the log (Engine.failedAppend): recover
// calls it when the log voids nothing above the checkpoint, or when the
// block still reads as a header of ours numbered above it that no void
// names (voidedOrNoHeader). Its
// record is newer than the checkpoint, so no mapping but its own says
// which file's bytes it carried: replaying past it, or ending the zone's
// log there as a torn write, serves that file's older bytes (or a
// shorter file) where acknowledged ones were, silently, and loses every
// record after it in the zone. So Open refuses (fsck reads the device
// without writing, and reports the same error) with a damagedRecordError,
// unless the user accepts losing the record (Config.AcceptDamagedRecords):
// damagedHeader returns where the next whole record of the zone numbered
// above the checkpoint starts (0: none), where recovery goes on. Not
// damage: a whole header whose record runs past the write pointer (torn),
// and an all-zero block with no such record after it in a zone that is
// full (the unwritten rest of a finished zone reads as zeros). Nor,
// though reported as possible damage, a block that does not start as a
// header of ours numbered above the checkpoint: the range of an append
// whose failure the engine learnt of only after a flush that began while
// it was in flight reads so, voids and checkpoint still to come, and the
// appends in flight with it may follow it, acknowledged: damagedHeader
// returns where the next whole record numbered above the checkpoint
// starts (0: none), and recovery goes on there.
func (e *Engine) damagedHeader(z *zone, rz zns.Zone, off int64, ckptSeq uint64, buf *scanBuf, w *uring.Waiter) (int64, error) {
	wp := rz.WP - rz.Start
	if off+BlockSize > wp {
		return 0, nil // torn: the write pointer ends inside the header
	}
	hb := buf.mem[:BlockSize]
	if err := e.readDev(rz.Start+off, hb, w); err != nil {
		if errors.Is(err, syscall.EIO) {
			// The header does not read: the scan ended on it as
			// on an unreadable one, which is the scan's to judge
			// (it fails Open where that ending is unsound), not
			// a checksum's.
			return 0, nil
		}
		return 0, fmt.Errorf("engine: recover: read zone %d at %d: %w", z.idx, off, err)
	}
	var h RecordHeader
	if DecodeHeader(hb, &h) == nil && h.FS == e.sb.FS() {
		return 0, nil // whole: its record runs past the write pointer (torn)
	}
	zero := isZero(hb)
	like := newerHeaderLike(hb, e.sb.FS(), ckptSeq) // laterRecord reads over hb
	full := wp >= z.cap || rz.Cond == zns.CondFull
	next, nextAt, err := e.laterRecord(rz, off+BlockSize, wp, ckptSeq, buf, w)
	if err != nil {
		return 0, fmt.Errorf("engine: recover: read zone %d: %w", z.idx, err)
	}
	if zero && full && next == 0 {
		return 0, nil
	}
	if !like {
		// The block is no header of ours numbered above the
		// checkpoint: the range of an append that failed, its
		// failure reaching the engine only after a flush that began
		// while it was in flight (that flush's settle saw no failed
		// append, and it made the write pointer past the range
		// durable, voids and checkpoint still to come), reads so too:
		// zeros, or what a reset zone held before; the appends in
		// flight with it in the zone may follow it, whole, and be
		// acknowledged by that flush. No byte tells that crash from
		// damage, so recovery goes on at the zone's next whole record
		// numbered above the checkpoint, if any (ending the zone's
		// log there lost those acknowledged records), and reports the
		// range as possible damage (a design limit, as checkCutLog's):
		// refusing turned that crash into an unopenable file system
		// (TestH39fFailedAppendFlushedBeforeItsFailureIsNotDamage,
		// TestH39fFsyncAfterALateFailedAppendSurvives).
		d := fmt.Sprintf("data zone %d: the record header at %d, below the zone's write pointer (%d), fails its checksum and does not read as a header numbered above checkpoint %d: ", z.idx, off, wp, ckptSeq)
		if next != 0 {
			d += fmt.Sprintf("recovery goes on at record %d (at %d)", next, nextAt)
		} else {
			d += "nothing whole numbered above it follows, and the zone's log ends there"
		}
		d += "; unless it is the range of an append that failed (never acknowledged), it is damage, and that record's file reads older bytes there, or is shorter"
		e.damage = append(e.damage, d)
		slog.Error("engine: recover: " + d)
		return nextAt, nil
	}
	why := fmt.Sprintf("record %d, numbered above the checkpoint, follows it at %d", next, nextAt)
	switch {
	case next != 0:
	case zero:
		why = "the block is zeros, below the write pointer of a zone not full"
	default:
		why = "its bytes are no header"
	}
	lost := fmt.Sprintf("data zone %d: the record header at %d, below the zone's write pointer (%d), fails its checksum (%s): media damage in a record newer than checkpoint %d; which file's acknowledged bytes it held is lost with it",
		z.idx, off, wp, why, ckptSeq)
	if next != 0 {
		lost += fmt.Sprintf(" (up to %d bytes, to %d where the next record starts): that file reads older bytes there, or is shorter", nextAt-off-BlockSize, nextAt)
	} else {
		lost += " (nothing whole follows it up to the write pointer): that file reads older bytes there, or is shorter"
	}
	return nextAt, &damagedRecordError{what: lost}
}

// newerHeaderLike reports whether b starts as a record header of the
// file system fs numbered above floor (magic, file system and number
// intact): what a failed append's range hardly ever reads as (zeros, or
// what a reset zone held before), so a block like that whose checksum
// fails (one bit flipped at rest) is damage.
func newerHeaderLike(b []byte, fs, floor uint64) bool {
	le := binary.LittleEndian
	return le.Uint32(b[0:]) == recordMagic && le.Uint64(b[recFSOffset:]) == fs && le.Uint64(b[8:]) > floor
}

// damagedRecordError is damagedHeader's refusal; what says what is lost
// if the user opens anyway (Config.AcceptDamagedRecords).
type damagedRecordError struct{ what string }

func (d *damagedRecordError) Error() string {
	return "engine: recover: " + d.what + ": recovering past it would serve those older bytes as the file's: refusing to open (fsck reads the device without writing; copy what you can off a device you no longer trust). To open anyway, losing only that record, give --accept-damaged-records to zonefold serve (Config.AcceptDamagedRecords)"
}

// laterRecord finds, block by block from off to end in the zone rz (a
// damaged header gives no length to skip by), the first whole record
// header of this file system numbered above floor whose record ends by
// end; it returns its number and offset in the zone (0: none). Blocks
// that fail to read (EIO: bad media, as a failed append's range can be)
// hold none it can use; Open failing on them made the range of a failed
// append on bad media refuse Open where a torn write would not.
func (e *Engine) laterRecord(rz zns.Zone, off, end int64, floor uint64, buf *scanBuf, w *uring.Waiter) (uint64, int64, error) {
	var seq uint64
	var at int64
	err := scanBlocks(off, end, buf.mem, func(from int64, b []byte) error {
		return e.readDev(rz.Start+from, b, w)
	}, nil, func(from int64, b []byte) (bool, error) {
		var h RecordHeader
		if DecodeHeader(b, &h) != nil || h.FS != e.sb.FS() || h.Seq <= floor {
			return false, nil
		}
		if from+BlockSize+int64(h.DataLen) <= end {
			seq, at = h.Seq, from
			return true, nil
		}
		return false, nil
	})
	return seq, at, err
}

// scanBlocks reads [off, end) of a log (read reads len(b) bytes at an
// offset in it) in chunks of buf's size and hands each block, in order,
// to each until it says stop. A chunk the device fails (EIO) is read
// again block by block, and a block that fails alone is passed over,
// once failed (if not nil) is told where and why:
// bad media holds nothing a scan can use, and one bad block fails the
// whole read that holds it (the device fails the whole request, which
// the block layer may have merged from adjacent reads). Giving up on
// the chunk hid every block read with it: laterMeta's did, and a whole
// record numbered above the checkpoint beside one bad block was not
// counted, nor could the next Open look past it
// (TestH43bCutLogWithABadBlockAmongWholeRecords). Other errors end it.
func scanBlocks(off, end int64, buf []byte, read func(at int64, b []byte) error, failed func(at int64, err error), each func(at int64, b []byte) (stop bool, err error)) error {
	for from := off; from < end; {
		n := min(end-from, int64(len(buf))) / BlockSize * BlockSize
		if n == 0 {
			return nil
		}
		chunk := buf[:n]
		rerr := read(from, chunk)
		if rerr != nil && !errors.Is(rerr, syscall.EIO) {
			return rerr
		}
		for b := int64(0); b < n; b += BlockSize {
			blk := chunk[b : b+BlockSize]
			if rerr != nil {
				// The chunk failed: its blocks one by one.
				if err := read(from+b, blk); err != nil {
					if !errors.Is(err, syscall.EIO) {
						return err
					}
					if failed != nil {
						failed(from+b, err)
					}
					continue
				}
			}
			if stop, err := each(from+b, blk); stop || err != nil {
				return err
			}
		}
		from += n
	}
	return nil
}

// unreadableHeader decides what a record header at off of a data zone
// that failed to read twice with EIO (err) means for the zone's scan:
// torn (the zone's log ends there) or an error that fails Open.
//
// Bad media where the next header would be is most often the range
// where an append failed: null_blk zoned with bad blocks there fails
// every read of it, and the engine finished the zone past it, so the
// device reports it full. Nothing follows it, and as at a torn record
// the zone's log ends there: Open failing on it left every file of the
// device unreachable. A zone that is not full had its write pointer
// moved past off by a write, whose header fails to read: recovery
// cannot replay that record (its header says what it wrote), nor any
// record of a zone, full or not, with a record of ours after the
// unreadable header: it was written whole and may be acknowledged, as
// may those after it. Open refuses then rather than bring the files
// back without them. (A full zone whose last acknowledged record's
// header went bad loses that record, as one whose header fails its
// checksum does.)
func (e *Engine) unreadableHeader(z *zone, rz zns.Zone, off, wp int64, err error, buf *scanBuf, w *uring.Waiter) (bool, error) {
	if rz.Cond != zns.CondFull {
		return false, fmt.Errorf("engine: recover: zone %d (%s, write pointer at %d): the record header at %d fails to read: what it wrote cannot be replayed: %w",
			z.idx, rz.Cond, wp, off, err)
	}
	next, at, aerr := e.laterRecord(rz, off+BlockSize, wp, 0, buf, w)
	if aerr != nil {
		return false, fmt.Errorf("engine: recover: read zone %d at %d: %w", z.idx, off, aerr)
	}
	if next != 0 {
		return false, fmt.Errorf("engine: recover: zone %d: the record header at %d fails to read and a record follows it at %d: what it wrote cannot be replayed: %w",
			z.idx, off, at, err)
	}
	slog.Warn("engine: recover: a record header of a full zone fails to read and no record follows it; the zone's log ends there, as at a torn record",
		"zone", z.idx, "at", off, "wp", wp, "err", err)
	return true, nil
}

// settleZone sets a data zone's state after its scan. A zone whose log is
// torn is full: nothing may follow untrusted bytes; one still active is
// finished once recovery's checkpoint is durable (zone.tornHeld,
// settleTornZones). A cleanly written, partly full zone stays open for
// appends if the budget allows; one that does not fit the budget is
// finished, unless one of the spare places torn zones counted unfinished
// hold may come free: then it stays as it is, full to placement, and
// settleZone returns true (settleHeld decides once recovery's checkpoint
// has or has not finished them). A zone the device will not finish
// counts as unfinished, as retire's do.
func (e *Engine) settleZone(z *zone, rz zns.Zone, end int64, torn bool, spare int) (waiting bool) {
	wp := rz.WP - rz.Start
	switch {
	case rz.Cond == zns.CondReadOnly || rz.Cond == zns.CondOffline:
		z.state.Store(zoneFull)
		z.alloc.Store(z.cap)
	case wp == 0:
		z.alloc.Store(0)
		if z.state.Load() != zoneFree {
			z.state.Store(zoneFree)
			e.placer.free = append(e.placer.free, z)
		}
	case wp >= z.cap || rz.Cond == zns.CondFull:
		z.alloc.Store(z.cap)
		z.state.Store(zoneFull)
	case !torn && len(e.placer.open) < e.placer.budget-e.placer.unfinished && z.cap-wp >= minRecord:
		z.alloc.Store(wp)
		z.state.Store(zoneOpen)
		e.placer.open = append(e.placer.open, z)
	case !torn && spare > 0 && z.cap-wp >= minRecord:
		// Its write pointer stays where it is (the checkpoint records
		// it), and placement sees it full until settleHeld.
		z.alloc.Store(wp)
		z.state.Store(zoneFull)
		return true
	default:
		if torn {
			slog.Warn("engine: recover: torn record ends zone", "zone", z.idx, "at", end, "wp", wp)
		}
		z.alloc.Store(z.cap)
		z.state.Store(zoneFull)
		if !e.readOnly && !z.tornHeld.Load() { // fsck changes nothing
			e.finishAtRecovery(z)
		}
	}
	return false
}

// finishAtRecovery finishes a zone recovery leaves full.
func (e *Engine) finishAtRecovery(z *zone) {
	if err := e.dev.FinishZone(z.idx); err != nil {
		e.stats.finishErrs.Add(1)
		// retire's rule: a zone the device will not finish keeps its
		// place in the device's limits, so it counts against
		// placement's budget until it is finished or reset
		// (TestTornZoneFinishRefusedAtRecoveryCountsUnfinished).
		if e.zoneMayBeActive(z) && !z.unfinished {
			z.unfinished = true
			e.placer.unfinished++
		}
		slog.Warn("engine: recover: finish zone", "zone", z.idx, "err", err, "still_active", z.unfinished)
	}
}

// loadCheckpoint installs a checkpoint's namespace and mappings.
func (e *Engine) loadCheckpoint(c *checkpointState) {
	e.seq.Store(c.seq)
	e.nextID = max(c.nextID, 1)
	for _, cf := range c.files {
		if o := e.byID[cf.id]; o != nil || e.byName[cf.name] != nil {
			// Damage: every file has an id and a name of its own.
			// The first keeps them; a second would leave a name or an
			// id on a file the next checkpoint drops.
			e.damage = append(e.damage, fmt.Sprintf("the checkpoint holds file %q (id %d) twice, by id or by name; the second is left out", cf.name, cf.id))
			slog.Warn("engine: recover: the checkpoint holds a file id or name twice; the second is left out", "name", cf.name, "id", cf.id)
			continue
		}
		f := &file{id: cf.id, size: cf.size, ext: newExtentMap()}
		f.setName(cf.name)
		for _, x := range cf.ext {
			if why := e.extentFault(x); why != "" {
				// The rest of the checkpoint stands: refusing all of
				// it for one extent lost every operation logged after
				// it (TestH20bRefusedNewestCheckpointLosesFsyncedCreate).
				e.damage = append(e.damage, fmt.Sprintf("the checkpoint maps bytes %d..%d of file %q (id %d, version %d) to device offset %d, where no record can hold them (%s); left out",
					x.off, x.off+x.len, cf.name, cf.id, x.ver, x.dev, why))
				slog.Warn("engine: recover: a checkpoint extent no record can hold is left out", "file", cf.name, "extent", fmt.Sprintf("%+v", x), "why", why)
				continue
			}
			f.ext.t.ReplaceOrInsert(x)
		}
		// As in replayRecord: bytes past the size are a truncate's, in
		// flight when the checkpoint was taken.
		f.ext.truncate(f.size, nil)
		e.byID[f.id] = f
		e.setName(f.name(), f)
	}
}

// extentFault says why no record could hold checkpoint extent x, if so:
// every extent the engine maps is a clipped piece of one record's
// extents (whole blocks at block-aligned file offsets, below maxSeq),
// and a record lies in one data zone, its header first, with at most
// MaxRecordBlocks data blocks. GC copies what is mapped into records of
// its own, and reads trust the header x names for checksums.
func (e *Engine) extentFault(x extent) string {
	if x.off < 0 || x.len <= 0 || x.off%BlockSize != 0 || x.len%BlockSize != 0 || x.ver >= maxSeq {
		return "not whole blocks of a write"
	}
	if x.hdr < 0 || x.dev < x.hdr+BlockSize || (x.dev-x.hdr)%BlockSize != 0 ||
		int64(x.firstBlock())+x.len/BlockSize > MaxRecordBlocks {
		return "not in one record"
	}
	z := e.zoneAt(x.hdr)
	if z == nil || e.zoneAt(x.dev) != z || x.dev+x.len > int64(z.idx)*e.geo.ZoneSize+z.cap {
		return "not in one data zone"
	}
	return ""
}

// replayOp applies one logged namespace operation.
func (e *Engine) replayOp(op nsOp) {
	switch op.kind {
	case opCreate:
		// An id is never handed out twice, even one whose file was
		// removed since: GC and fsck match records to files by id.
		e.nextID = max(e.nextID, op.file+1)
		if f := e.byID[op.file]; f != nil && f.name() != op.name {
			// The id is a live file's under another name: damage (an
			// id is never handed out twice). Taking it left the old
			// name on a file the next checkpoint, which walks ids,
			// dropped with its data
			// (TestH19gCreateReusingLiveIDDropsFileSilently).
			e.damage = append(e.damage, fmt.Sprintf("operation %d creates %q with the id of %q, a live file; not replayed", op.seq, op.name, f.name()))
			slog.Warn("engine: recover: a create reuses a live file's id; not replayed", "seq", op.seq, "name", op.name, "id", op.file, "file", f.name())
			return
		}
		if old := e.byName[op.name]; old != nil {
			delete(e.byID, old.id)
		}
		f := &file{id: op.file, ext: newExtentMap()}
		f.setName(op.name)
		e.byID[f.id] = f
		e.setName(f.name(), f)
	case opRemove:
		if f := e.byID[op.file]; f != nil {
			delete(e.held, f.id)
			delete(e.byID, f.id)
			e.delName(f.name())
		}
	case opRename:
		if f := e.byID[op.file]; f != nil {
			if victim := e.byName[op.name]; victim != nil && victim != f {
				delete(e.byID, victim.id)
			}
			e.delName(f.name())
			f.setName(op.name)
			e.setName(f.name(), f)
		}
	case opTruncate:
		if f := e.byID[op.file]; f != nil {
			e.commitHeld(f)
			f.size = op.size
			f.ext.truncate(op.size, nil)
		}
	case opZoneReset:
		// Everything in the zone before this point was relocated first.
		if len(e.lostRoom) > 0 {
			e.loseRelocated(op.zone)
		}
	}
}

// lostRoom is an accepted offline zone's room past its checkpoint (at,
// a device offset, up to the zone's capacity): records newer than the
// checkpoint lay there, recovery drops them.
type lostRoom struct {
	z  *zone
	at int64
}

// loseRelocated maps every extent still in zone idx, whose reset is
// being replayed, into an accepted offline zone. GC relocated such an
// extent before it logged the reset, and its copy's record is not
// replayed, so the copy lay in a zone recovery drops newer records of
// (AcceptOfflineZones): the data is lost there. Left in the zone reset
// since, it counted as valid data the zone no longer held (GC failed to
// read it back, and retried with backoff for as long as the daemon ran)
// and fsck called it an extent no record carries; mapped into the
// offline zone, it reads as lost (reads fail), counts in LostBytes, and
// fsck names its file there. Which offline zone held the copy is not
// known (its record is gone): each takes the room past its checkpoint,
// where such copies were appended, a block for a header before each
// extent, as a record's; should that run out (it cannot, but for damage)
// the rest goes to the first zone's start, as unreadable.
func (e *Engine) loseRelocated(idx int) {
	for _, f := range e.byID {
		var stale []extent
		f.ext.each(func(x extent) bool {
			if z := e.zoneAt(x.dev); z != nil && z.idx == idx {
				stale = append(stale, x)
			}
			return true
		})
		for _, x := range stale {
			room := &e.lostRoom[0]
			for i := range e.lostRoom {
				if r := &e.lostRoom[i]; r.at+BlockSize+x.len <= r.z.start+r.z.cap {
					room = r
					break
				}
			}
			hdr := room.at
			if hdr+BlockSize+x.len > room.z.start+room.z.cap {
				hdr = room.z.start
			}
			x.hdr, x.dev = hdr, hdr+BlockSize
			room.at = x.dev + x.len
			f.ext.insert(x, nil)
		}
	}
}

// replayRecord applies one data or GC record.
//
// A record without a size is a failed truncate's rewrite of the bytes it
// cut (File.undoCut), which only the next record of the file that
// carries a size commits: its extents are held back until then
// (e.held), and a crash before the commit drops them. Replayed after the
// zeros' record, whose size cut everything past the tail block, some of
// them would otherwise bring the file back at its old size (carried by
// the last of them) with the rest cut.
func (e *Engine) replayRecord(h *RecordHeader, dev int64) {
	hdr := dev - BlockSize
	f := e.byID[h.File]
	if f == nil {
		return // removed later, or never created durably
	}
	if h.Size == SizeUnknown {
		for _, x := range h.Extents {
			e.held[f.id] = append(e.held[f.id], extent{off: x.FileOff, len: int64(x.Len), dev: dev, ver: x.Version, hdr: hdr})
			dev += int64(x.Len)
		}
		return
	}
	e.commitHeld(f)
	for _, x := range h.Extents {
		f.ext.insert(extent{off: x.FileOff, len: int64(x.Len), dev: dev, ver: x.Version, hdr: hdr}, nil)
		dev += int64(x.Len)
	}
	// Every extent replayed so far is older than the record; a
	// write makes the size cover its bytes before they are
	// written, so those past the record's size were cut by a
	// truncate: one whose log record may not have survived (the
	// truncate's tail record, or a GC record of its file, carries
	// the new size first). Half of it would show the old bytes
	// when the file grows again.
	f.size = int64(h.Size)
	f.ext.truncate(f.size, nil)
}

// commitHeld maps the extents of f's records without a size that
// replay held back (replayRecord), in their order: a record or a log
// operation of f numbered after them that sets its size commits them.
func (e *Engine) commitHeld(f *file) {
	for _, x := range e.held[f.id] {
		f.ext.insert(x, nil)
	}
	delete(e.held, f.id)
}

// recountValid derives every data zone's valid bytes from the mappings.
func (e *Engine) recountValid() {
	for _, z := range e.zones {
		if z != nil {
			z.valid.Store(0)
		}
	}
	for _, f := range e.byID {
		f.mu.RLock()
		f.ext.each(func(x extent) bool {
			if z := e.zoneAt(x.dev); z != nil {
				z.valid.Add(x.len)
			}
			return true
		})
		f.mu.RUnlock()
	}
}

// deadZones finds the full zones that hold no valid data (GC logged their
// reset but may have crashed before doing it, or everything in them was
// overwritten or removed) and marks their reset decided, so that the next
// checkpoint records them empty.
//
// After a clean Close many are expected (a daemon probe after heavy
// churn: 90 of 160 zones), by design. A running engine resets a dead
// zone lazily: only a GC pass does (resetEmpty, first in every pass,
// copying nothing), and the background collector runs passes only below
// GC.Low free zones, so dead zones pile up while free ones last. That
// costs a writer nothing: Available (df) counts their bytes as free, and
// a writer short of zones runs a pass that resets up to maxEmptyResets of
// them under one device flush before it would copy anything
// (TestH44kDeadZonesCostNoSpaceAndOpenResetsThem: 112 dead zones, a write
// of 82 zones with 42 free, GC reset 64 in one pass, copied 0). Only the
// free_zones gauge reads low until then. Close resets the zones GC logged
// (collector.settleAll) and leaves the rest: resetting them there would
// move the same resets from the next Open to Close, and a restart waits
// for both. Open resets them after its own checkpoint (which it writes
// anyway), one ResetZone each: on an emu file on ext4, 131 took about
// 20-40 ms beside a 12-50 ms open (each rewrites and fsyncs the emu's
// zone table); on a real device it is one zone-management command each,
// typically milliseconds, so tens of such zones add well under a second
// at worst.
func (e *Engine) deadZones() []*zone {
	var dead []*zone
	for _, z := range e.zones {
		if z == nil || z.state.Load() != zoneFull || z.valid.Load() != 0 || z.offline.Load() {
			continue // an offline zone takes no reset
		}
		z.resetPending.Store(true)
		dead = append(dead, z)
	}
	return dead
}

// resetDeadZones resets the zones deadZones found, once a checkpoint that
// records them empty is durable, and returns them to the free pool. A
// zone the device will not reset (gone read-only) stays full, its reset
// decided, as after a reset GC's pass had refused (collector.settle): it
// holds nothing valid, and GC tries it again later (victimFailed). Open
// failed on it before, so a zone gone read-only kept the daemon from
// starting (TestCrashWhileAZonesResetWaitsForRetryLosesNothing).
func (e *Engine) resetDeadZones(dead []*zone) {
	for _, z := range dead {
		if err := e.dev.ResetZone(z.idx); err != nil {
			e.gc.mu.Lock()
			e.gc.resetFailed(z, fmt.Errorf("engine: recover: reset zone %d: %w", z.idx, err))
			e.gc.mu.Unlock()
			continue
		}
		e.placer.freeZone(z)
	}
}

// ErrZoneOffline is why recovery refuses a device where a data zone went
// offline (its data no longer reads) while it may hold records newer than
// the checkpoint recovery starts from.
var ErrZoneOffline = errors.New("a data zone is offline")

// offlineZoneNews says whether an offline data zone may hold records
// newer than checkpoint ckpt (nil: it cannot): only if the checkpoint did
// not have it allocated to its capacity (a zone is allocated to its
// capacity when it fills or is given up after a failed append, and takes
// no record after that until a reset), or a reset of it was logged after
// the checkpoint (reset since).
func offlineZoneNews(z *zone, ckpt *checkpointState, reset bool) error {
	alloc, ok := ckpt.zoneWP[z.idx]
	if ok && !reset && alloc >= z.cap {
		return nil
	}
	return fmt.Errorf("engine: recover: data zone %d is offline, and records newer than the checkpoint %d recovery starts from may lie in it (the checkpoint had %d of its %d bytes allocated; reset since: %v): opening would serve older bytes where acknowledged ones were: refusing to open (fsck reads the device without writing; `zonefold fsck --accept-offline-zones` names the files that map data there). To open anyway, losing what the zone held, give --accept-offline-zones to zonefold serve (Config.AcceptOfflineZones): %w",
		z.idx, ckpt.seq, alloc, z.cap, reset, ErrZoneOffline)
}
