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
// (Options.InferLostTable). A sequential zone with no data in the file
// (SEEK_DATA/SEEK_HOLE) is empty. One with data has its written end
// where the file's last data extent in the zone's capacity ends,
// rounded up to a block, and its write pointer at its capacity, as a
// finished zone's: no byte tells a zone finished part way (a metadata
// zone the log went on past, in the next zone of its half) from one
// still open, and a reader stops at the zeros after its last record in
// a full zone, so capacity never cuts a log short. The written end is
// where the zone's writes ended, or past it: every block the device
// wrote is data in the file (a punched failed write read as zeros
// anyway), and what a zone held before its last reset is never punched,
// so it may lie past the real end. An over-estimate costs a reader that
// checks what it reads (the engine's records carry their file, offset,
// version and checksums) nothing but damage reported in that stale
// tail; an under-estimate would hide written records. A file system
// that reports no holes shows every zone written whole. Every sequential
// zone is read-only: the device refuses each write, reset, finish and
// open, and a Flush has nothing to write. Nothing is written here.
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
		rel, wp := min((end-start+bs-1)/bs*bs, e.geo.ZoneCap), int64(0)
		if rel > 0 {
			wp = e.geo.ZoneCap // it may have been finished: see above
		}
		z.wp, z.written, z.cond = e.start(i)+wp, e.start(i)+rel, CondReadOnly
	}
	e.recount()
	restartSums(e.zones)
	return nil
}
