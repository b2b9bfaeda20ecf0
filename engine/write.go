package engine

import (
	"errors"
	"fmt"
	"github.com/zonefold/zonefold/zns"
	"log/slog"
	"slices"

	"github.com/zonefold/zonefold/cache"
	"github.com/zonefold/zonefold/writeback"
)

// recordOp is one append in flight: a record header and the data it
// carries. A fixed set of them is made at Open; none is allocated per I/O.
type recordOp struct {
	e    *Engine
	f    *file // nil for a pad record
	z    *zone
	hdrI int
	hdr  RecordHeader
	bufs [][]byte
	p    writeback.Pending
	gc   *gcBatch // set for GC relocations
	n    int64    // bytes appended, header included
	// devSums is the CRC-32C of each block of the append, header first,
	// for a device that takes them (Engine.sumDev).
	devSums []uint32
	// The outcome, from Appended to the completer.
	off int64
	err error
}

// maxRecordBufs is the most buffers one record's append carries: its
// header block and at most one per data block (a pad's zeros are one
// block each; a data record's pieces are whole blocks).
const maxRecordBufs = 1 + MaxRecordBlocks

// newRecordOps makes n record ops for e with every slice an append
// fills sized for the largest record, from one array per kind: packing,
// checksumming and submitting a record never grows one. Grown on use,
// each of the engine's ops (1024 on a ring of 256 entries) grew its
// extents, buffers and sums several times, and a pad record dropped its
// sums: runtime.growslice under WriteExtents in a CPU profile of the
// daemon under fio. About 11 KiB an op.
func newRecordOps(e *Engine, n int) []*recordOp {
	ops := make([]recordOp, n)
	exts := make([]RecordExtent, n*MaxRecordExtents)
	sums := make([]uint32, n*MaxRecordBlocks)
	devSums := make([]uint32, n*(MaxRecordBlocks+1))
	bufs := make([][]byte, n*maxRecordBufs)
	out := make([]*recordOp, n)
	for i := range ops {
		op := &ops[i]
		op.e = e
		op.hdr.Extents = exts[i*MaxRecordExtents : i*MaxRecordExtents : (i+1)*MaxRecordExtents]
		op.hdr.Sums = sums[i*MaxRecordBlocks : i*MaxRecordBlocks : (i+1)*MaxRecordBlocks]
		op.devSums = devSums[i*(MaxRecordBlocks+1) : i*(MaxRecordBlocks+1) : (i+1)*(MaxRecordBlocks+1)]
		op.bufs = bufs[i*maxRecordBufs : i*maxRecordBufs : (i+1)*maxRecordBufs]
		out[i] = op
	}
	return out
}

// testHookWriteExtents, if set (by tests only, before the engine opens),
// runs as WriteExtents starts.
var testHookWriteExtents func(e *Engine, fileID uint64)

// testHookNumbered, if set (by tests only), runs in WriteExtents once a
// data record of f has taken its number, before it is submitted.
var testHookNumbered func(e *Engine, f *file)

// testHookMapRecord, if set, is called on the completer before (mapped
// false) and after (true) a completed record's extents are mapped.
var testHookMapRecord func(e *Engine, op *recordOp, mapped bool)

// maxRecordData is the most data one record carries on this device.
func (e *Engine) maxRecordData() int64 { return maxRecordData(e.geo) }

// maxRecordData is the most data one record carries on a device of
// geometry geo: its largest append less the header, at most a
// checksum's worth of blocks for each of the header's sums.
func maxRecordData(geo zns.Geometry) int64 {
	return min(int64(geo.MaxAppend)/BlockSize*BlockSize-BlockSize, MaxRecordBlocks*BlockSize)
}

// WriteExtents implements writeback.Store: it packs the extents into
// records that fit the zones placement grants and appends them. It runs
// under the ring's plug and does not wait for I/O.
//
// The plug may hold appends others wait for: this flush's earlier
// records, another file's in the same round, the pad of a zone that
// placement filled, which leaves that zone draining until the pad lands.
// Those others submit what the ring holds before they park, but an
// append queued after that stays queued until the plug's holder submits
// it. So before WriteExtents blocks on anything but the ring's own waits
// (which submit first) — the collector, or quiesce while a checkpoint
// wants it — it submits what the ring holds (see rlockQuiesce). A GC
// pass holding the collector waited forever for a pad this queued before
// it went to wait for the collector.
func (e *Engine) WriteExtents(fileID uint64, exts []cache.Extent, p writeback.Pending) error {
	if testHookWriteExtents != nil {
		testHookWriteExtents(e, fileID)
	}
	f := e.fileByID(fileID)
	if f == nil {
		// Removed after it was dirtied: its data is garbage, and clean.
		return nil
	}
	e.rlockQuiesce()
	defer e.quiesce.RUnlock()
	w := extentCursor{exts: exts}
	share := shareNot
	var gcErr error // the last pass's, if the device failed it
	for !w.done() {
		want := BlockSize + w.peek(e.maxRecordData(), MaxRecordExtents)
		// A class stream (the hinted policy) has no single owner.
		stream, owner := e.placer.stream(f), f
		if stream != &f.mru {
			owner = nil
		}
		g, err := e.placer.reserveData(stream, owner, want, false, share)
		if g.padZone != nil {
			e.appendPad(g.padZone, g.padOff, p)
		}
		if errors.Is(err, errDraining) || errors.Is(err, errPadFirst) {
			continue // the pad was what a zone waited for, or comes first
		}
		if errors.Is(err, errNoFreeZone) {
			// Have GC free a zone for this file rather than mix it into
			// another's; if GC can free none, share one. The pad
			// queued above may be what the pass holding the
			// collector waits for: submit it first.
			e.quiesce.RUnlock()
			_ = e.ring.Flush()
			moved := e.gc.freeZone(e.placer.lacksFreeZone)
			e.rlockQuiesce()
			if moved {
				share = shareNot
			} else {
				share = max(share, shareData)
			}
			continue
		}
		if errors.Is(err, ErrNoSpace) {
			// Out of zones: collect, without holding off checkpoints
			// (GC may log a zone reset, which may checkpoint), and
			// with what the plug holds submitted, as above. First only
			// a pass admission would run (admitGain); if none gains
			// that, take room in a zone GC opened, which admission
			// counted; a pass of any gain is the last resort (sliver
			// is set once taken, and then GC's zones stay allowed).
			// Passes of any gain first kept the room admission counts
			// there, as each one's gain went to GC's zone: with a sync
			// after every 4 KiB overwrite near full, 77 MB were copied
			// in 38 passes for 275 writes and admission never refused
			// one (TestAdmissionRefusesWhenGCFreesSliversSynced).
			gain := e.admitGain()
			if share == shareGC {
				gain = minGCGain
			}
			e.quiesce.RUnlock()
			_ = e.ring.Flush()
			moved, _, err := e.gc.reclaimFor(nil, gain)
			e.rlockQuiesce()
			if moved {
				continue
			}
			gcErr = err
			if share < shareGC {
				// GC reclaimed nothing worth a pass: take room in a
				// zone GC opened rather than copy a zone for a sliver.
				share = shareGC
				continue
			}
		}
		if errors.Is(err, ErrNoSpace) && gcErr != nil {
			// Short of zones because the device failed GC's pass
			// (and, likely, the appends that used the zones up):
			// the fsync must report that, not a full device.
			return fmt.Errorf("engine: place %d bytes of file %d: GC could not make room: %w", want, fileID, gcErr)
		}
		if err != nil {
			return fmt.Errorf("engine: place %d bytes of file %d: %w", want, fileID, err)
		}
		share = min(share, shareData) // GC's zones again only after GC fails again
		if g.n < want {
			e.stats.split.Add(1)
		}
		op := e.takeOp()
		op.f, op.z, op.p, op.gc = f, g.z, p, nil
		op.hdr.Kind = KindData
		op.hdr.File = fileID
		seq, size := e.numberRecord(f)
		op.hdr.Seq, op.hdr.Size = seq, size
		if testHookNumbered != nil {
			testHookNumbered(e, f)
		}
		op.hdr.Extents = op.hdr.Extents[:0]
		op.bufs = op.bufs[:0]
		op.hdrI, op.bufs = e.takeHeader(op.bufs)
		op.hdr.Sums = op.hdr.Sums[:0]
		for data := g.n - BlockSize; data > 0; {
			off, b := w.next(data, MaxRecordExtents-len(op.hdr.Extents))
			if b == nil {
				break
			}
			if k := len(op.hdr.Extents) - 1; k >= 0 && op.hdr.Extents[k].FileOff+int64(op.hdr.Extents[k].Len) == off {
				// File-contiguous with the previous piece (the next
				// folio): one header entry covers both.
				op.hdr.Extents[k].Len += uint32(len(b))
			} else {
				op.hdr.Extents = append(op.hdr.Extents, RecordExtent{FileOff: off, Len: uint32(len(b)), Version: op.hdr.Seq})
			}
			op.bufs = append(op.bufs, b)
			op.hdr.Sums = appendSums(op.hdr.Sums, b)
			data -= int64(len(b))
		}
		op.hdr.DataLen = uint32(g.n - BlockSize)
		if err := e.submitRecord(op); err != nil {
			return err
		}
	}
	return nil
}

// rlockQuiesce takes quiesce shared for a builder of appends that may
// hold the ring's plug. If a checkpoint holds quiesce or waits for it, it
// first submits what the ring holds: the checkpoint waits for every
// append in flight, and for the builders holding quiesce, which may wait
// for one of the appends the plug holds.
func (e *Engine) rlockQuiesce() {
	if e.quiesce.TryRLock() {
		return
	}
	_ = e.ring.Flush()
	e.quiesce.RLock()
}

// takeOp takes a free record op, submitting what the ring holds before
// it waits: the ops it waits for may be queued under a plug.
func (e *Engine) takeOp() *recordOp {
	select {
	case op := <-e.ops:
		return op
	default:
	}
	_ = e.ring.Flush()
	return <-e.ops
}

// takeHeader takes a header block and makes it the first buffer.
func (e *Engine) takeHeader(bufs [][]byte) (int, [][]byte) {
	i, blk := e.hdrs.get()
	return i, append(bufs, blk)
}

// submitRecord encodes op's header and appends the record to op.z.
func (e *Engine) submitRecord(op *recordOp) error {
	op.hdr.FS = e.sb.FS()
	if err := EncodeHeader(&op.hdr, op.bufs[0]); err != nil {
		op.z.doneWriting(&e.idle)
		e.releaseOp(op)
		return err
	}
	op.n = BlockSize + int64(op.hdr.DataLen)
	if op.p != nil {
		op.p.Add(1)
	}
	e.inflight.Add(1)
	var err error
	if e.sumDev != nil && op.f != nil && op.gc == nil {
		// A client record's sums were just computed from its bytes
		// (WriteExtents); a GC record's are carried from the record it
		// copies (a bad block stays bad) and a pad's are stale, so
		// those the device checksums itself. The header's sums are of
		// the data blocks; the device's chain covers the header too.
		op.devSums = append(append(op.devSums[:0], Checksum(op.bufs[0])), op.hdr.Sums...)
		err = e.sumDev.AppendSums(op.z.idx, op.bufs, op.devSums, op)
	} else {
		err = e.dev.Append(op.z.idx, op.bufs, op)
	}
	if err != nil {
		op.Appended(0, err)
		return nil // reported through Pending
	}
	return nil
}

// appendPad fills a zone's tail, too short for a record, with a
// header-only pad record so that the zone reaches capacity.
func (e *Engine) appendPad(z *zone, off int64, p writeback.Pending) {
	e.appendFiller(z, z.cap-off, p)
}

// appendFiller appends a pad record of n bytes (a header and zeros) to
// z, in room reserved there that nothing else fills.
func (e *Engine) appendFiller(z *zone, n int64, p writeback.Pending) {
	op := e.takeOp()
	op.f, op.z, op.p, op.gc = nil, z, p, nil
	// The op's slices keep their arrays (newRecordOps): a pad's header
	// dropping its sums made the next data record on the op grow them.
	op.hdr = RecordHeader{Kind: KindPad, Seq: e.seq.Add(1), Size: SizeUnknown, Extents: op.hdr.Extents[:0], Sums: op.hdr.Sums[:0]}
	op.bufs = op.bufs[:0]
	op.hdrI, op.bufs = e.takeHeader(op.bufs)
	for left := n - BlockSize; left > 0; left -= BlockSize {
		op.bufs = append(op.bufs, e.zeroBlk)
		op.hdr.DataLen += BlockSize
	}
	_ = e.submitRecord(op)
}

// Appended implements zns.AppendCompletion. It runs on the ring's reaper
// (or a device's dispatcher, or the submitter when the device refuses the
// append at once) and only hands op to the completer: the channel has room
// for every op, so this never blocks, takes no lock and allocates nothing.
func (op *recordOp) Appended(off int64, err error) {
	op.off, op.err = off, err
	op.e.completed <- op
}

// completer finishes appends in the order their completions arrive. It
// runs off the reaper because mapping a record takes the file's lock and
// may take the placement lock (see the lock order in doc.go); it never
// waits for I/O.
func (e *Engine) completer() {
	defer close(e.completerDone)
	for op := range e.completed {
		e.finishAppend(op)
	}
}

// stopCompleter ends the completer once no append can complete any more.
func (e *Engine) stopCompleter() {
	close(e.completed)
	<-e.completerDone
}

// finishAppend maps a completed record's extents, frees its op and
// reports the result to the flush or GC batch that submitted it.
func (e *Engine) finishAppend(op *recordOp) {
	off, err := op.off, op.err
	if err != nil {
		e.stats.appendErrs.Add(1)
		// Before inflight drops: a checkpoint that waits for no append
		// in flight sees it (Engine.failedAppend).
		e.failedMu.Lock()
		e.failedSeqs = append(e.failedSeqs, op.hdr.Seq)
		e.failedMu.Unlock()
		e.failedAppend.Store(true)
		e.zoneFailed(op.z, err)
	} else {
		e.stats.appends.Add(1)
		e.stats.devHeaders.Add(BlockSize)
		switch {
		case op.hdr.Kind == KindPad:
			e.stats.devPad.Add(int64(op.hdr.DataLen))
		case op.gc != nil:
			e.stats.gcHeaders.Add(BlockSize)
			e.stats.gcWritten.Add(int64(op.hdr.DataLen))
		default:
			e.stats.devData.Add(int64(op.hdr.DataLen))
		}
		bumpMax(&op.z.lastSeq, op.hdr.Seq)
		if op.f != nil {
			if testHookMapRecord != nil {
				testHookMapRecord(e, op, false)
			}
			e.mapRecord(op, off)
			if testHookMapRecord != nil {
				testHookMapRecord(e, op, true)
			}
			// Landed: the next flush to start covers it. Before the
			// writeback ends (p.Done), which the file's fsync waits
			// for (see file.dataFlush).
			bumpMax(&op.f.dataFlush, e.flushes.ticket())
		}
	}
	z := op.z
	p, gc := op.p, op.gc
	e.releaseOp(op)
	z.doneWriting(&e.idle)
	if e.inflight.Add(-1) == 0 {
		e.idle.Signal()
	}
	if gc != nil {
		gc.done(err)
	}
	if p != nil {
		p.Done(err)
	}
}

// mapRecord points the file's extents at the record written at off.
func (e *Engine) mapRecord(op *recordOp, off int64) {
	f := op.f
	dev := off + BlockSize
	f.mu.Lock()
	defer f.mu.Unlock()
	if op.gc == nil && f.tailPending {
		// A truncate's zeros (the truncate wrote every other dirty
		// byte back first): checkpoints carry the new size now that
		// the map holds them (numberRecord). GC leaves the file alone
		// until the truncate has flushed them or put the file back
		// (tailSeq); a failed write of them tried again by writeback
		// before that lands here too.
		f.tailPending = false
	}
	if f.gone {
		return
	}
	for _, x := range op.hdr.Extents {
		ext := extent{off: x.FileOff, len: int64(x.Len), dev: dev, ver: x.Version, hdr: off}
		if op.gc != nil {
			moved := f.ext.relocate(ext, e.unmapped)
			op.z.valid.Add(moved)
			if f.tailOld != nil {
				e.relocateTailOld(f, ext)
			}
		} else if f.undo != nil && op.hdr.Size == SizeUnknown {
			// A failed truncate's undo owes its commit: what this
			// record replaces that a crash would map again stays
			// counted valid (undoState.replaced).
			op.z.valid.Add(f.ext.insert(ext, f.undo.keep))
		} else {
			op.z.valid.Add(f.ext.insert(ext, e.unmapped))
		}
		dev += int64(x.Len)
	}
	if op.z.offline.Load() {
		// Under f.mu: the watcher lists f's extents under it after it
		// marks the zone found, so either that list holds this record
		// or this load sees the mark.
		e.offlineLate.Store(true)
		e.kickOffline()
	}
}

// unmapped accounts for bytes no file maps any more.
func (e *Engine) unmapped(old extent) {
	if z := e.zoneAt(old.dev); z != nil {
		z.valid.Add(-old.len)
	}
}

func (e *Engine) releaseOp(op *recordOp) {
	e.hdrs.put(op.hdrI)
	op.f, op.z, op.p, op.gc, op.err = nil, nil, nil, nil, nil
	clear(op.bufs)
	op.bufs = op.bufs[:0]
	e.ops <- op
}

// zoneFailed retires a zone an append to failed: placement stops using
// it at once (the data stays dirty and goes elsewhere), and the retirer
// finishes it on the device once its other appends have landed, so that
// nothing is ever written after the failed record and the zone stops
// holding an open and an active resource. It counts against the open
// budget until then; GC reclaims it later. It runs on the completer.
// The retirement is logged with the zone and err, the append's error
// (once: later failures of appends already in flight there find it
// retired). It is not persisted: after a reopen the zone is a full (or
// unfinished) zone like any other, and GC's reset puts it back in use.
func (e *Engine) zoneFailed(z *zone, err error) {
	if z == nil {
		return
	}
	if e.placer.giveUp(z, false) {
		slog.Warn("engine: an append to a zone failed; the zone is retired (no more appends; finished once its appends in flight land; its data stays readable and GC collects it)",
			"zone", z.idx, "err", err)
		e.kickRetirer()
	}
}

// giveUp retires an open zone (or, unless openOnly, a full one) for the
// retirer to finish once its appends have landed (see zoneFailed,
// Engine.finishTail): an open zone's unreserved rest leaves the free
// space at once. It reports false, changing nothing, if the zone is in
// neither state.
func (p *placer) giveUp(z *zone, openOnly bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.giveUpLocked(z, openOnly)
}

// giveUpLocked is giveUp with p.mu held.
func (p *placer) giveUpLocked(z *zone, openOnly bool) bool {
	if openOnly && z.state.Load() != zoneOpen {
		return false
	}
	switch z.state.Load() {
	case zoneOpen:
		// Its tail will never be reserved: it leaves the free space.
		// One swap: a reservation's lock-free claim lands either
		// before it (and took its own bytes out of unalloc) or after
		// it (and fails), never counted twice.
		p.unalloc.Add(-max(0, z.cap-z.alloc.Swap(z.cap)))
		for i, o := range p.open {
			if o == z {
				p.open = append(p.open[:i], p.open[i+1:]...)
				break
			}
		}
	case zoneFull:
		// Filled (by reservations) already, perhaps still draining.
	default:
		return false // retiring already
	}
	z.state.Store(zoneRetiring)
	if !slices.Contains(p.draining, z) {
		p.draining = append(p.draining, z)
	}
	p.retiring = append(p.retiring, z)
	return true
}

// finishTail retires z, f's last zone, if it is still open, f's own
// (not GC's, nor reset and opened again for another writer since f took
// it, nor taken from a file still open whose MRU zone it is; only the
// last file it was taken from is known) and has less than limit left: all looked at under p.mu, where
// forGC is written and a reset zone is reopened, so the zone finished is
// the one f left.
//
// reserve (nil: none) says whether the zone's rest may leave the free
// space (Engine.reserveTail); the zone is finished only if it does.
func (p *placer) finishTail(z *zone, f *file, limit int64, reserve func(rem int64) (bool, func())) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if z.forGC || z.owner.Load() != f || z.state.Load() != zoneOpen {
		return false
	}
	if p.lifeOf(f, false) != LifeNotSet && p.keptTailsLocked(z)+1 < p.budget-p.unfinished {
		// A hinted file's tail is where the next file of its class
		// starts (classTailLocked), however short: finishing it would
		// leave that room for GC to reclaim instead. Kept tails must
		// leave a place in the open budget for a zone of its own to a
		// file of another class; past that, the tail is finished as an
		// unhinted file's is. Writers of a class that stopped writing,
		// each keeping a tail, filled the open budget, and a file of
		// another class shared one of those tails
		// (TestKeptTailsLeaveRoomForOtherClasses). At most one kept
		// tail per class cost Pebble's mru WAF (bench lsm: 1.30-1.35
		// -> 1.49-1.57): its concurrent compactions' tables of one
		// class fill several tails.
		return false
	}
	if o := z.sharedFrom.Load(); o != nil && o != f && o.handles.Load() > 0 && o.mru.Load() == z {
		// f took this zone from a file still open that may write to
		// it again (its MRU zone): finishing it would send that file
		// to a new zone and give up its room.
		return false
	}
	rem := z.remaining()
	if rem <= 0 || rem >= limit {
		return false
	}
	if reserve != nil {
		ok, release := reserve(rem)
		if !ok {
			return false // its room is promised to accepted writes
		}
		defer release()
	}
	if !p.giveUpLocked(z, true) {
		return false
	}
	p.tailsFinished.Add(1)
	p.filled.Add(1) // it leaves the open set full, as retire's do
	return true
}

// keptTailsLocked counts the open client zones other than z that are
// kept tails: no file is writing to them and they have room for a record.
// Called with p.mu held.
func (p *placer) keptTailsLocked(z *zone) int {
	n := 0
	for _, o := range p.open {
		if o != z && !o.forGC && o.state.Load() == zoneOpen && o.remaining() >= minRecord && o.orphan() {
			n++
		}
	}
	return n
}

// kickRetirer wakes the retirer for the zones giveUp queued.
func (e *Engine) kickRetirer() {
	select {
	case e.retireKick <- struct{}{}:
	default:
	}
}

// retirer finishes the zones zoneFailed retired, each once its appends
// have landed (it does device I/O, so it cannot run on the completer),
// until stop: once the flusher and the collector have ended.
func (e *Engine) retirer(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-e.retireKick:
		}
		for {
			e.placer.mu.Lock()
			zones := e.placer.retiring
			e.placer.retiring = nil
			e.placer.mu.Unlock()
			if len(zones) == 0 {
				break
			}
			for _, z := range zones {
				e.retire(z)
			}
		}
	}
}

// retire finishes one failed zone on the device and makes it full (a GC
// candidate, which takes no appends). If the device refuses the finish
// and reports the zone still active (or cannot say), the zone keeps its
// place in the device's limits: it leaves the draining zones, so that
// no writer waits for it, but counts against placement's budget as
// unfinished until GC resets it (placer.unfinished), and the failure is
// counted (Stats.ZoneFinishErrs, ZonesUnfinished). Letting it leave the
// budget, placement opened a zone past the device's active limit, and
// every append there failed (TestFailedFinishKeepsToActiveLimit).
func (e *Engine) retire(z *zone) {
	e.waitUntil(func() bool { return z.writers.Load() == 0 })
	unfinished := false
	if err := e.dev.FinishZone(z.idx); err != nil {
		e.stats.finishErrs.Add(1)
		cond, known := e.zoneCond(z)
		unfinished = !known || cond.Active()
		if known && cond == zns.CondOffline {
			// Not a zone whose data stays readable, as zoneFailed
			// said: the device lost it.
			e.log.Error("engine: a retired zone is offline: the data files map there no longer reads (reads of it fail with an error; fsck names the files)",
				"zone", z.idx, "mapped_bytes", z.valid.Load())
			e.kickOffline() // its cached data written again, a checkpoint
		} else {
			e.log.Warn("engine: finish a retired zone", "zone", z.idx, "err", err, "still_active", unfinished)
		}
	}
	p := &e.placer
	p.mu.Lock()
	if unfinished && !z.unfinished {
		z.unfinished = true
		p.unfinished++
	}
	z.state.Store(zoneFull)
	p.mu.Unlock()
	e.idle.Signal() // placement may open a zone in its place
}

// zoneMayBeActive reports whether the device may count z as open or
// active: it says so, or its report fails.
func (e *Engine) zoneMayBeActive(z *zone) bool {
	cond, known := e.zoneCond(z)
	return !known || cond.Active()
}

// zoneCond is z's condition as the device reports it (known false if the
// report fails).
func (e *Engine) zoneCond(z *zone) (zns.Cond, bool) {
	var rz [1]zns.Zone
	if n, err := e.dev.Report(z.idx, rz[:]); err != nil || n != 1 {
		return 0, false
	}
	return rz[0].Cond, true
}

func bumpMax(a interface {
	Load() uint64
	CompareAndSwap(old, new uint64) bool
}, v uint64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}

// extentCursor walks a flush's extents, handing out pieces that fit a
// record.
type extentCursor struct {
	exts []cache.Extent
	i    int
	used int // bytes of exts[i] already taken
}

func (c *extentCursor) done() bool { return c.i >= len(c.exts) }

// peek is the data the next record would carry with room for max bytes
// and maxExt extents.
func (c *extentCursor) peek(max int64, maxExt int) int64 {
	var n int64
	used := c.used
	for j := c.i; j < len(c.exts) && maxExt > 0 && n < max; j++ {
		n += int64(len(c.exts[j].Data) - used)
		used = 0
		maxExt--
	}
	return min(n, max)
}

// next takes up to max bytes from the current extent, at most one extent,
// and returns its file offset and memory; nil when nothing is left or no
// extent may be added.
func (c *extentCursor) next(max int64, extLeft int) (int64, []byte) {
	if c.done() || extLeft <= 0 || max <= 0 {
		return 0, nil
	}
	x := c.exts[c.i]
	rest := x.Data[c.used:]
	n := min(int64(len(rest)), max)
	off := x.Off + int64(c.used)
	b := rest[:n]
	c.used += int(n)
	if c.used == len(x.Data) {
		c.i++
		c.used = 0
	}
	return off, b
}
