package engine

import (
	"fmt"
	"sort"

	"github.com/zonefold/zonefold/uring"
	"github.com/zonefold/zonefold/zns"
)

// tornZone is a data zone whose record log ends before its write pointer.
type tornZone struct {
	zone   int
	at, wp int64
	torn   bool
}

// FsckReport is what Fsck found. Problems empty means the file system is
// consistent.
type FsckReport struct {
	Superblock Superblock
	Files      int
	Extents    int
	Records    int   // records walked in data zones
	LiveBytes  int64 // bytes the extent maps point at
	Replayed   int   // operations and records newer than the checkpoint
	Notes      []string
	Problems   []string
}

func (r *FsckReport) problem(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// Fsck checks a formatted device without changing it: both superblock
// copies, the metadata log, every record in every data zone (header and
// data checksums), that every mapped extent lies inside a record that
// carries it, and the per-zone valid counts. It recovers the file system
// in memory as Open would, but writes nothing.
func Fsck(dev zns.Device) (*FsckReport, error) {
	rep := &FsckReport{}
	g := dev.Geometry()
	sb, err := readSuperblock(dev)
	if err != nil {
		return nil, err
	}
	rep.Superblock = sb
	if err := sb.checkGeometry(g); err != nil {
		rep.problem("%v", err)
		return rep, nil
	}
	e := &Engine{dev: dev, geo: g, ring: dev.Ring(), sb: sb, byName: map[string]*file{}, byID: map[uint64]*file{},
		nextID: 1, readOnly: true}
	e.cfg.fill()
	e.readGroups.New = func() any { return new(uring.Group) }
	if err := e.checkDevice(); err != nil {
		rep.problem("%v", err)
		return rep, nil
	}
	// Both superblock copies should agree.
	if err := e.checkSuperblockCopies(rep); err != nil {
		return nil, err
	}
	if err := e.setupZones(); err != nil {
		rep.problem("%v", err)
		return rep, nil
	}
	if err := e.recover(); err != nil {
		rep.problem("recovery: %v", err)
		return rep, nil
	}
	defer e.meta.close()
	rep.Replayed = len(e.recovered)
	for _, tz := range e.tornZones {
		if tz.torn {
			// What a crash mid-append leaves: recovery drops the record
			// and finishes the zone at the next open.
			rep.Notes = append(rep.Notes, fmt.Sprintf("zone %d: torn last record at offset %d (write pointer %d), as a crash leaves it; the next open drops it", tz.zone, tz.at, tz.wp))
		}
	}
	// Walk every data zone from its start and index the records.
	type carried struct {
		file    uint64
		fileOff int64
		ver     uint64
		dev     int64
		len     int64
	}
	var pieces []carried
	buf, err := newScanBuf(int(max(g.ZoneCap, 1<<20)))
	if err != nil {
		return nil, err
	}
	defer buf.close()
	w := uring.NewWaiter()
	report := make([]zns.Zone, g.Zones)
	n, err := dev.Report(0, report)
	if err != nil {
		return nil, fmt.Errorf("engine: fsck: report zones: %w", err)
	}
	for _, z := range e.zones {
		if z == nil || z.idx >= n {
			continue
		}
		recs, end, torn, err := e.scanDataZone(z, report[z.idx], 0, buf, w)
		if err != nil {
			return nil, err
		}
		if torn && !tornKnown(e.tornZones, z.idx) {
			rep.problem("zone %d: record at offset %d fails its checks; the %d bytes after it up to the write pointer are unreadable",
				z.idx, end, report[z.idx].WP-report[z.idx].Start-end)
		}
		for _, r := range recs {
			rep.Records++
			dev := r.dev
			for _, x := range r.rec.Extents {
				pieces = append(pieces, carried{file: r.rec.File, fileOff: x.FileOff, ver: x.Version, dev: dev, len: int64(x.Len)})
				dev += int64(x.Len)
			}
		}
	}
	sort.Slice(pieces, func(i, j int) bool { return pieces[i].dev < pieces[j].dev })
	// Every mapped extent must lie inside a carried piece of the same
	// file, offset and version.
	valid := map[int]int64{}
	for _, f := range e.byID {
		rep.Files++
		f.ext.each(func(x extent) bool {
			rep.Extents++
			rep.LiveBytes += x.len
			i := sort.Search(len(pieces), func(i int) bool { return pieces[i].dev+pieces[i].len > x.dev })
			ok := i < len(pieces) && pieces[i].dev <= x.dev && x.dev+x.len <= pieces[i].dev+pieces[i].len &&
				pieces[i].file == f.id && pieces[i].ver == x.ver && pieces[i].fileOff+(x.dev-pieces[i].dev) == x.off
			if !ok {
				rep.problem("file %q (id %d): extent at offset %d (%d bytes, version %d) points at device offset %d, where no record carries it",
					f.name, f.id, x.off, x.len, x.ver, x.dev)
			}
			if z := e.zoneAt(x.dev); z != nil {
				valid[z.idx] += x.len
			} else {
				rep.problem("file %q: extent at offset %d points outside the data zones (device offset %d)", f.name, x.off, x.dev)
			}
			return true
		})
		if f.size < 0 {
			rep.problem("file %q: negative size %d", f.name, f.size)
		}
	}
	for _, z := range e.zones {
		if z == nil {
			continue
		}
		wp := report[z.idx].WP - report[z.idx].Start
		if v := valid[z.idx]; v > wp {
			rep.problem("zone %d: %d valid bytes above its write pointer %d", z.idx, v, wp)
		}
	}
	return rep, nil
}

func tornKnown(list []tornZone, zone int) bool {
	for _, t := range list {
		if t.zone == zone {
			return true
		}
	}
	return false
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
	for _, mz := range e.sb.MetaZones {
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
