package zns

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// TableInferrer is a device whose zone table Open may have inferred
// rather than read (Options.InferLostTable): an *Emu whose zone table
// was lost. A salvage says so in its report.
type TableInferrer interface {
	// InferredZoneTable reports whether the zone table was inferred
	// from the data, in memory only.
	InferredZoneTable() bool
}

// InferredZoneTable implements TableInferrer.
func (e *Emu) InferredZoneTable() bool { return e.inferred }

// inferZones builds, in memory, the zone table of an emu file whose
// table is lost (ErrLostZoneTable), for a read-only salvage
// (Options.InferLostTable): each sequential zone's write pointer is
// where the file's last data extent in the zone's capacity ends
// (SEEK_DATA/SEEK_HOLE), rounded up to a block; a zone with none is
// empty. That is where the zone's writes ended, or past it: every block
// the device wrote is data in the file (a punched failed write reads as
// zeros anyway; the last non-zero block instead would cut a record
// whose last blocks are zeros), unless a copy of the file (cp
// --sparse=always, rsync -S) or its file system made zero blocks holes:
// then a record whose last blocks are zeros runs past it, and the
// engine's salvage takes such a record as whole when every block passes
// its checksum (engine wholePastInferredWP). What a zone held before
// its last reset is never punched, so it may lie past the real end. An
// over-estimate costs a reader that checks what it reads (the engine's
// records carry their file, offset, version and checksums) nothing but
// damage reported in that stale tail. A zone finished part way shows
// its write pointer where its data ends, not at its capacity: no byte
// tells it from one still open, and the unwritten rest reads as zeros
// either way (a capacity instead made the engine's metadata log, which
// fills a half's zones to capacity in order, read its active zone's
// zeros as damage). A file system that reports no holes shows every
// zone full. Every sequential zone is read-only: the device refuses
// each write, reset, finish and open, and a Flush has nothing to write.
// Nothing is written here.
func (e *Emu) inferZones(fd int, size int64) error {
	bs := int64(e.geo.BlockSize)
	for i := range e.zones {
		z := &e.zones[i]
		if z.typ == TypeConventional {
			continue
		}
		start := e.dataOff + e.start(i)
		limit := min(start+e.geo.ZoneCap, size)
		end := start
		for off := start; off < limit; {
			data, more, err := seekData(fd, off)
			if err != nil {
				return fmt.Errorf("infer the write pointer of zone %d: %w", i, err)
			}
			if !more || data >= limit {
				break
			}
			hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
			if err != nil {
				hole = limit // no hole reporting: data to the end
			}
			end = min(hole, limit)
			off = hole
		}
		rel := min((end-start+bs-1)/bs*bs, e.geo.ZoneCap)
		z.wp, z.written, z.cond = e.start(i)+rel, e.start(i)+rel, CondReadOnly
	}
	e.recount()
	restartSums(e.zones)
	return nil
}
