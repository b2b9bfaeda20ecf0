package engine

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"syscall"

	"github.com/zonefold/zonefold/uring"
	"github.com/zonefold/zonefold/zns"
)

// FsckReport is what Fsck found. Problems empty means the file system is
// consistent.
type FsckReport struct {
	Superblock Superblock
	Files      int
	Extents    int
	Records    int   // records walked in data zones
	LiveBytes  int64 // bytes the extent maps point at
	Replayed   int   // operations and records newer than the checkpoint
	// Recovered says recovery found a state and fsck checked it.
	// Without it (the device's geometry or zones not what the
	// superblock says, or recovery refusing the device, as it does
	// a damaged newest checkpoint that Salvage goes past: Problems
	// say why) nothing past that was checked and the counts are zero.
	Recovered bool
	Notes     []string
	Problems  []string
}

func (r *FsckReport) problem(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// Fsck checks a formatted device without changing it. It recovers the file
// system in memory as Open would, writing nothing, and reports as damage
// (Problems) exactly:
//   - a superblock copy, checkpoint tie or geometry that recovery cannot
//     trust;
//   - what recovery refused (a checksum-valid newer checkpoint that does
//     not decode) or left out (Engine.damage: a checkpoint extent no
//     record can hold, an operation that does not decode, ids twice),
//     and a zone the device took back to an older flush as it opened
//     (zns.RollbackReporter: the emulator's last flush's data damaged
//     at rest, or a power cut during that flush);
//   - a mapped extent that does not lie in a record whose header holds
//     and that carries the same file, offset and version, or that covers
//     a block whose checksum fails;
//   - a record newer than the checkpoint, found by walking every data zone
//     from its start, whose bytes recovery does not map (nor a later
//     version of them), although its file was not removed or truncated
//     below them since: acknowledged data that would be lost;
//   - more valid bytes in a zone than its write pointer allows;
//   - data files map in a zone the device reports offline (lost: it is
//     not walked, and one problem per zone names the files).
//
// A torn last record, the unwritten tail of a zone that recovery
// finished and an offline zone no file maps data in are notes, not
// damage: nothing mapped lives there.
func Fsck(dev zns.Device) (*FsckReport, error) {
	return FsckWith(dev, FsckOptions{})
}

// FsckOptions changes what Fsck's recovery accepts.
type FsckOptions struct {
	// AcceptOfflineZones is Config.AcceptOfflineZones: recovery goes on
	// past a data zone offline that may hold records newer than the
	// checkpoint (else reported as recovery's problem, ErrZoneOffline),
	// and the report names the files that map data there.
	AcceptOfflineZones bool
	// AcceptDamagedRecords is Config.AcceptDamagedRecords: recovery
	// goes on past a damaged record header newer than the checkpoint
	// (else reported as recovery's problem), and the report names it.
	AcceptDamagedRecords bool
}

// FsckWith is Fsck with opts.
func FsckWith(dev zns.Device, opts FsckOptions) (*FsckReport, error) {
	rep, st, err := fsck(dev, opts, false)
	if st != nil {
		st.close()
	}
	return rep, err
}

// fsckState is what fsck recovered and found on the device: the engine
// recovered in memory, read-only, and an index of what every record in
// every data zone carries. Salvage copies from it.
type fsckState struct {
	e       *Engine
	buf     *scanBuf
	hb      *scanBuf // Salvage's, for a record's header
	w       *uring.Waiter
	good    []fsckPiece // sorted by device offset
	bad     []fsckBad   // sorted
	offline map[int]*fsckOffline
}

func (st *fsckState) close() {
	st.buf.close()
	if st.hb != nil {
		st.hb.close()
	}
	st.e.meta.close()
}

// fsck checks dev (FsckWith); with salvage, recovery goes on past what
// makes Open refuse the device (Engine.salvage). It returns the state it
// checked, to be closed, unless recovery failed.
func fsck(dev zns.Device, opts FsckOptions, salvage bool) (*FsckReport, *fsckState, error) {
	rep := &FsckReport{}
	g := dev.Geometry()
	sb, err := readSuperblock(dev)
	if err != nil {
		return nil, nil, err
	}
	rep.Superblock = sb
	if err := sb.checkGeometry(g); err != nil {
		rep.problem("%v", err)
		return rep, nil, nil
	}
	e := &Engine{dev: dev, geo: g, ring: dev.Ring(), sb: sb, byName: map[string]*file{}, byID: map[uint64]*file{},
		nextID: 1, readOnly: true, salvage: salvage}
	e.cfg.fill()
	e.cfg.AcceptOfflineZones = opts.AcceptOfflineZones || salvage
	e.cfg.AcceptDamagedRecords = opts.AcceptDamagedRecords || salvage
	e.readGroups.New = func() any { return new(uring.Group) }
	if err := e.checkDevice(); err != nil {
		rep.problem("%v", err)
		return rep, nil, nil
	}
	// Both superblock copies should agree.
	if err := e.checkSuperblockCopies(rep); err != nil {
		return nil, nil, err
	}
	if err := e.setupZones(); err != nil {
		rep.problem("%v", err)
		return rep, nil, nil
	}
	if err := e.recover(); err != nil {
		rep.problem("recovery: %v", err)
		return rep, nil, nil
	}
	buf, err := newScanBuf(int(max(g.ZoneCap, 1<<20)))
	if err != nil {
		e.meta.close()
		return nil, nil, err
	}
	st := &fsckState{e: e, buf: buf, w: uring.NewWaiter(), offline: map[int]*fsckOffline{}}
	if err := st.check(rep); err != nil {
		st.close()
		return nil, nil, err
	}
	rep.Recovered = true
	return rep, st, nil
}

// check fills rep, and st's index of what the data zones hold.
func (st *fsckState) check(rep *FsckReport) error {
	e, buf, w, offline := st.e, st.buf, st.w, st.offline
	g := e.geo
	rep.Replayed = len(e.recovered)
	for _, d := range e.damage {
		rep.problem("recovery: %s", d)
	}
	rep.Notes = append(rep.Notes, e.deviceNotes...)
	for _, z := range e.offlineAccepted {
		rep.Notes = append(rep.Notes, fmt.Sprintf("zone %d is offline and may have held records newer than checkpoint %d (accepted): what they wrote is absent, their ranges read as the checkpoint has them", z, e.ckptSeq))
	}
	if e.ckptTie {
		rep.problem("both metadata zones hold a checkpoint with sequence number %d: recovery cannot tell which is newer", e.ckptSeq)
	}
	report := make([]zns.Zone, g.Zones)
	n, err := e.dev.Report(0, report)
	if err != nil {
		return fmt.Errorf("engine: fsck: report zones: %w", err)
	}
	// Walk every data zone from its start, independently of where
	// recovery started, and index what each record carries.
	var good []fsckPiece
	var bad []fsckBad
	var recs []fsckRecord
	// Offline zones no longer read: they are not walked, and what files
	// map there is reported once per zone, below.
	for _, z := range e.zones {
		if z == nil || z.idx >= n {
			continue
		}
		if report[z.idx].Cond == zns.CondOffline {
			offline[z.idx] = &fsckOffline{files: map[string]bool{}}
			continue
		}
		fw := fsckWalk{e: e, rep: rep, buf: buf, w: w}
		if err := fw.zone(z, report[z.idx]); err != nil {
			return err
		}
		good, bad, recs = append(good, fw.good...), append(bad, fw.bad...), append(recs, fw.recs...)
	}
	sort.Slice(good, func(i, j int) bool { return good[i].dev < good[j].dev })
	sort.Slice(bad, func(i, j int) bool { return bad[i].start < bad[j].start })
	st.good, st.bad = good, bad
	// Records an opVoid names failed their appends and were never
	// acknowledged: recovery skips them, and loses nothing by it.
	kept := recs[:0]
	for _, r := range recs {
		if r.seq > e.ckptSeq && e.recoveredVoid[r.seq] {
			rep.Notes = append(rep.Notes, fmt.Sprintf("zone %d at offset %d: the record of sequence %d (file id %d) failed its append and is void; recovery skips it", r.zone, r.at, r.seq, r.file))
			continue
		}
		kept = append(kept, r)
	}
	recs = kept

	// 1. Every mapped extent lies in a record whose checksum holds and
	// that carries the same file, offset and version.
	valid := map[int]int64{}
	for _, f := range e.byID {
		rep.Files++
		f.ext.each(func(x extent) bool {
			rep.Extents++
			rep.LiveBytes += x.len
			c := st.checkExtent(f, x)
			if c.offline != nil {
				c.offline.bytes += x.len
				c.offline.files[f.name()] = true
				valid[c.zone] += x.len
				return true
			}
			switch {
			case c.carried:
				if len(c.bad) > 0 {
					rep.problem("file %q (id %d): the block at offset %d (device offset %d, version %d) is not what was written (its checksum fails, or it fails to read): reads of it fail",
						f.name(), f.id, x.off+(c.bad[0]-x.dev), c.bad[0], x.ver)
				}
			default:
				rep.problem("file %q (id %d): extent at offset %d (%d bytes, version %d) points at device offset %d, where no record carries it",
					f.name(), f.id, x.off, x.len, x.ver, x.dev)
			}
			if c.zone >= 0 {
				valid[c.zone] += x.len
			} else {
				rep.problem("file %q: extent at offset %d points outside the data zones (device offset %d)", f.name(), x.off, x.dev)
			}
			return true
		})
		if f.size < 0 {
			rep.problem("file %q: negative size %d", f.name(), f.size)
		}
	}
	for _, z := range e.zones {
		if z == nil || z.idx >= n {
			continue
		}
		if off := offline[z.idx]; off != nil {
			if off.bytes > 0 {
				rep.problem("zone %d is offline (the device reports that its data no longer reads): %d bytes that files map there are lost, and reads of them fail (files %s)",
					z.idx, off.bytes, off.names())
			} else {
				rep.Notes = append(rep.Notes, fmt.Sprintf("zone %d is offline (the device reports that its data no longer reads); no file maps data there", z.idx))
			}
			continue // its write pointer is not valid
		}
		wp := report[z.idx].WP - report[z.idx].Start
		// An inferred write pointer is only where the emu file's
		// data ends: a record whose last blocks are holes there runs
		// past it (wholePastInferredWP), and each extent was checked
		// against its record above.
		if v := valid[z.idx]; v > wp && !tableInferred(e.dev) {
			rep.problem("zone %d: %d valid bytes above its write pointer %d", z.idx, v, wp)
		}
	}

	// 2. Nothing newer than the checkpoint that is on the device is lost:
	// every byte such a record carries is mapped to that version or a
	// newer one, unless its file was removed, or truncated below it,
	// since. This is what recovery starting a zone's scan at the wrong
	// place, or keeping a stale checkpoint, would lose. A later record's
	// size cuts like a truncate (recovery cuts a file to the size of each
	// record it replays: one that carries a truncate's size may have
	// outlived the truncate's log record).
	cuts := map[uint64][]nsOp{}
	for _, ev := range e.recovered {
		if ev.op != nil && ev.op.kind == opTruncate {
			cuts[ev.op.file] = append(cuts[ev.op.file], *ev.op)
		}
	}
	for _, r := range recs {
		if r.seq > e.ckptSeq && r.size != SizeUnknown {
			cuts[r.file] = append(cuts[r.file], nsOp{seq: r.seq, kind: opTruncate, file: r.file, size: int64(r.size)})
		}
	}
	lost := 0
	// Newest first: a record's size holds unless a later record or
	// truncate of the file says it shrank since.
	sort.Slice(recs, func(i, j int) bool { return recs[i].seq > recs[j].seq })
	laterSize := map[uint64]int64{}
	for _, r := range recs {
		if r.seq <= e.ckptSeq {
			continue
		}
		f := e.byID[r.file]
		if f == nil {
			continue // removed since
		}
		if r.size != SizeUnknown {
			// The size it carries, too, unless a truncate since cut it.
			want := int64(r.size)
			if s, ok := laterSize[f.id]; ok {
				want = min(want, s)
			}
			laterSize[f.id] = want
			for _, op := range cuts[f.id] {
				if op.seq > r.seq {
					want = min(want, op.size)
				}
			}
			if f.size < want {
				if lost++; lost <= 20 {
					rep.problem("file %q (id %d): the record of sequence %d in zone %d at offset %d gives it %d bytes, newer than the checkpoint, but recovery gives it %d: acknowledged data would be lost",
						f.name(), f.id, r.seq, r.zone, r.at, want, f.size)
				}
			}
		}
		if r.size == SizeUnknown && !committed(cuts[f.id], r.seq) {
			// A failed truncate's rewrite that never reached its
			// commit point: recovery drops it (replayRecord).
			continue
		}
		for _, x := range r.ext {
			end := x.FileOff + int64(x.Len)
			limit := int64(MaxFileSize)
			for _, op := range cuts[f.id] {
				if op.seq > x.Version {
					limit = min(limit, (op.size+BlockSize-1)/BlockSize*BlockSize)
				}
			}
			end = min(end, limit)
			covered := x.FileOff
			f.ext.lookup(x.FileOff, max(0, end-x.FileOff), func(m extent) {
				if m.off > covered || m.ver < x.Version {
					return
				}
				covered = max(covered, m.end())
			})
			if covered < end {
				if lost++; lost <= 20 {
					rep.problem("file %q (id %d): bytes %d..%d of version %d (record of sequence %d in zone %d at offset %d) are on the device and newer than the checkpoint, but recovery does not map them: acknowledged data would be lost",
						f.name(), f.id, covered, end, x.Version, r.seq, r.zone, r.at)
				}
			}
		}
	}
	if lost > 20 {
		rep.problem("%d more pieces of newer records that recovery does not map", lost-20)
	}
	return nil
}

// committed reports whether one of a file's records or truncates (cuts)
// numbered after seq sets its size, committing a record without a size
// numbered seq (Engine.replayRecord).
func committed(cuts []nsOp, seq uint64) bool {
	for _, op := range cuts {
		if op.seq > seq {
			return true
		}
	}
	return false
}

// fsckPiece is one extent a record whose header holds carries.
type fsckPiece struct {
	file    uint64
	fileOff int64
	ver     uint64
	dev     int64
	len     int64
	hdr     int64 // the record's header
}

// carries reports whether piece p holds all of extent x of file id.
func (p fsckPiece) carries(id uint64, x extent) bool {
	return p.dev <= x.dev && x.dev+x.len <= p.dev+p.len &&
		p.file == id && p.ver == x.ver && p.fileOff+(x.dev-p.dev) == x.off && p.hdr == x.hdr
}

// recordPieces are the pieces record header h, at device offset hdr,
// carries: its extents, laid out in order after the header.
func recordPieces(h *RecordHeader, hdr int64) []fsckPiece {
	if h.Kind == KindPad {
		return nil
	}
	var ps []fsckPiece
	dev := hdr + BlockSize
	for _, x := range h.Extents {
		ps = append(ps, fsckPiece{file: h.File, fileOff: x.FileOff, ver: x.Version, dev: dev, len: int64(x.Len), hdr: hdr})
		dev += int64(x.Len)
	}
	return ps
}

// readData reads the data of the record at offset off of zone z, whose
// header is h, at device offset dev into data. Blocks that fail to read
// (EIO: media damage) are bad blocks, as those that fail their checksums
// are, and it returns them (by device offset); other errors end fsck.
func (fw *fsckWalk) readData(z *zone, off int64, h *RecordHeader, dev int64, data []byte) (map[int64]bool, error) {
	e := fw.e
	err := e.readDev(dev, data, fw.w)
	if err == nil {
		return nil, nil
	}
	if !errors.Is(err, syscall.EIO) {
		return nil, fmt.Errorf("engine: fsck: read zone %d at %d: %w", z.idx, off, err)
	}
	unreadable := map[int64]bool{}
	for b := int64(0); b < int64(len(data)); b += BlockSize {
		err := e.readDev(dev+b, data[b:b+BlockSize], fw.w)
		if err == nil {
			continue
		}
		if !errors.Is(err, syscall.EIO) {
			return nil, fmt.Errorf("engine: fsck: read zone %d at %d: %w", z.idx, off, err)
		}
		unreadable[dev+b] = true
		fw.bad = append(fw.bad, fsckBad{start: dev + b, end: dev + b + BlockSize})
		fw.rep.Notes = append(fw.rep.Notes, fmt.Sprintf("zone %d: the record at offset %d (sequence %d, file %d) has a block at device offset %d that fails to read: %v", z.idx, off, h.Seq, h.File, dev+b, err))
	}
	return unreadable, nil
}

// fsckOffline is what files map in one offline zone.
type fsckOffline struct {
	bytes int64
	files map[string]bool
}

// names lists the files, sorted, at most a few of them.
func (o *fsckOffline) names() string {
	names := slices.Sorted(maps.Keys(o.files))
	const most = 8
	if len(names) > most {
		return fmt.Sprintf("%q and %d more", names[:most], len(names)-most)
	}
	return fmt.Sprintf("%q", names)
}

// fsckBad is a data block that fails its checksum.
type fsckBad struct{ start, end int64 }

// fsckRecord is a record with a valid checksum.
type fsckRecord struct {
	seq, file uint64
	size      uint64
	zone      int
	at        int64
	ext       []RecordExtent
}

// firstBad is the first bad block in [lo, hi), if any.
func firstBad(bad []fsckBad, lo, hi int64) (int64, bool) {
	i := sort.Search(len(bad), func(i int) bool { return bad[i].end > lo })
	if i < len(bad) && bad[i].start < hi {
		return max(lo, bad[i].start), true
	}
	return 0, false
}

// extentCheck is what fsck finds of one mapped extent.
type extentCheck struct {
	zone    int          // the data zone it lies in (-1: none)
	offline *fsckOffline // its zone is offline: nothing in it reads
	// carried: a record whose header holds carries it, for the same
	// file, offset and version.
	carried bool
	// bad: when carried, the device offsets of its blocks that fail
	// their checksums or fail to read.
	bad []int64
}

// checkExtent checks extent x of file f against what the walk of the
// data zones found: fsck reports what fails, Salvage copies only what
// passes.
func (st *fsckState) checkExtent(f *file, x extent) extentCheck {
	c := extentCheck{zone: -1}
	z := st.e.zoneAt(x.dev)
	if z != nil {
		c.zone = z.idx
		if off := st.offline[z.idx]; off != nil {
			c.offline = off
			return c
		}
	}
	good := st.good
	i := sort.Search(len(good), func(i int) bool { return good[i].dev+good[i].len > x.dev })
	c.carried = i < len(good) && good[i].carries(f.id, x)
	if !c.carried {
		return c
	}
	for lo := x.dev; ; {
		at, found := firstBad(st.bad, lo, x.dev+x.len)
		if !found {
			break
		}
		c.bad = append(c.bad, at)
		lo = at + BlockSize
	}
	return c
}

// fsckWalk reads one zone's records from its start to its write pointer.
type fsckWalk struct {
	e    *Engine
	rep  *FsckReport
	buf  *scanBuf
	w    *uring.Waiter
	good []fsckPiece
	bad  []fsckBad
	recs []fsckRecord
}

// zone walks z. A data block that fails its checksum is noted (whether a
// file maps it is for the checks above to say); the walk ends where no
// valid header is: a torn last write, or the never-written tail of a zone
// recovery finished, neither of them damage by itself.
func (fw *fsckWalk) zone(z *zone, rz zns.Zone) error {
	e := fw.e
	wp := rz.WP - rz.Start
	var h RecordHeader
	for off := int64(0); off < wp; {
		hb := fw.buf.mem[:BlockSize]
		if off+BlockSize > wp {
			fw.note(z, off, wp, "a torn last write")
			return nil
		}
		if err := e.readDev(rz.Start+off, hb, fw.w); err != nil {
			return fmt.Errorf("engine: fsck: read zone %d at %d: %w", z.idx, off, err)
		}
		if err := DecodeHeader(hb, &h); err != nil || h.FS != e.sb.FS() {
			fw.note(z, off, wp, "no record header")
			return nil
		}
		n := BlockSize + int64(h.DataLen)
		if off+n > wp || int64(h.DataLen) > int64(len(fw.buf.mem)) {
			whole, err := e.wholePastInferredWP(z, rz, off, &h, fw.buf, fw.w)
			if err != nil {
				return err
			}
			if !whole {
				fw.note(z, off, wp, "a record longer than what was written")
				return nil
			}
			wp = off + n // its last blocks are holes in the emu file
		}
		hdr := rz.Start + off
		dev := hdr + BlockSize
		if h.Kind != KindPad && h.DataLen > 0 {
			data := fw.buf.mem[:h.DataLen]
			unreadable, err := fw.readData(z, off, &h, dev, data)
			if err != nil {
				return err
			}
			for rest, at := data, dev; len(rest) > 0; {
				b := badBlock(rest, h.Sums[(at-dev)/BlockSize:])
				if b < 0 {
					break
				}
				bad := at + int64(b)*BlockSize
				if !unreadable[bad] {
					fw.bad = append(fw.bad, fsckBad{start: bad, end: bad + BlockSize})
					fw.rep.Notes = append(fw.rep.Notes, fmt.Sprintf("zone %d: the record at offset %d (sequence %d, file %d) has a block at device offset %d that fails its checksum", z.idx, off, h.Seq, h.File, bad))
				}
				rest, at = rest[(b+1)*BlockSize:], bad+BlockSize
			}
		}
		if h.Kind != KindPad {
			fw.rep.Records++
			fw.recs = append(fw.recs, fsckRecord{seq: h.Seq, file: h.File, size: h.Size, zone: z.idx, at: off, ext: slices.Clone(h.Extents)})
			fw.good = append(fw.good, recordPieces(&h, hdr)...)
		}
		off += n
	}
	return nil
}

func (fw *fsckWalk) note(z *zone, at, wp int64, what string) {
	fw.rep.Notes = append(fw.rep.Notes, fmt.Sprintf("zone %d: the log ends at offset %d with %s; the %d bytes up to the write pointer hold no record (a torn last write, or a finished zone's unwritten tail)", z.idx, at, what, wp-at))
}

// checkSuperblockCopies compares the copy at the start of each metadata
// zone with the first valid one.
func (e *Engine) checkSuperblockCopies(rep *FsckReport) error {
	buf, err := newScanBuf(BlockSize)
	if err != nil {
		return err
	}
	defer buf.close()
	w := uring.NewWaiter()
	rz := make([]zns.Zone, 1)
	for _, mz := range e.sb.MetaZones {
		// A half reset for a checkpoint that never landed (a power
		// cut between the reset, durable at once as on a zoned
		// drive, and the checkpoint's write) holds nothing yet:
		// recovery takes the other half.
		if got, err := e.dev.Report(mz, rz); err == nil && got == 1 && rz[0].WP == rz[0].Start {
			rep.Notes = append(rep.Notes, fmt.Sprintf("metadata zone %d is empty: its half was reset for a checkpoint that never landed", mz))
			continue
		}
		if err := e.readDev(int64(mz)*e.geo.ZoneSize, buf.mem[:BlockSize], w); err != nil {
			rep.problem("metadata zone %d: superblock unreadable: %v", mz, err)
			continue
		}
		sb, err := decodeSuperblock(buf.mem[:BlockSize])
		switch {
		case err != nil:
			rep.problem("metadata zone %d: superblock copy invalid: %v", mz, err)
		case sb != e.sb:
			rep.problem("metadata zone %d: superblock copy differs from the other", mz)
		}
	}
	return nil
}
