package zns

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ErrLostZoneTable: an emu file's header slots read as zeros, so its zone
// table is lost, but the file holds data: a damaged device, not a blank
// file, and Open refuses to make a new device of it (an empty table
// written over the old one would lose every zone's write pointer, and
// with it all the data), unless Options.ReplaceLostTable or format=1
// says to start it over.
var ErrLostZoneTable = errors.New("its zone table is lost")

// lostTableSample is how much of each zone checkLostTable reads.
const lostTableSample = 4096

// checkLostTable tells a blank file, which Open makes a device of g,
// from a device that lost its zone table (ErrLostZoneTable): readEmuHeader
// found no valid slot and the file's first page reads as zeros. The file
// is blank if its header area (the slots and the padding up to the
// zones) reads as zeros and so does each zone's first data: the first
// block of it the file system holds (SEEK_DATA: a hole reads as zeros
// and is skipped), which for a zone written through the device is
// where its data starts, its first append. It reads the header area's
// data extents (at most 2 slots of 16 MiB, for a million zones) and at
// most one 4 KiB block a zone, whatever the file's size: a 64 GiB
// sparse file that holds nothing costs two lseeks. A file system that
// does not report holes shows the whole file as data, and costs the
// whole header area and a block a zone.
func checkLostTable(f *os.File, size int64, g Geometry, path string) error {
	dataOff := emuDataOff(g.Zones)
	at, err := firstNonZero(f, 0, min(dataOff, size))
	if err != nil {
		return fmt.Errorf("zns: emu %s: check the blank file for data: %w", path, err)
	}
	if at >= 0 {
		return lostTableError(path, at, "in the header")
	}
	fd := int(f.Fd())
	for zone := 0; zone < g.Zones; {
		start := dataOff + int64(zone)*g.ZoneSize
		if start >= size {
			break
		}
		data, more, err := seekData(fd, start)
		if err != nil {
			return fmt.Errorf("zns: emu %s: check the blank file for data: %w", path, err)
		}
		if !more {
			break
		}
		zone = int((data - dataOff) / g.ZoneSize)
		if zone >= g.Zones {
			break
		}
		end := min(dataOff+int64(zone+1)*g.ZoneSize, data+lostTableSample, size)
		at, err := firstNonZero(f, data, end)
		if err != nil {
			return fmt.Errorf("zns: emu %s: check the blank file for data: %w", path, err)
		}
		if at >= 0 {
			return lostTableError(path, at, fmt.Sprintf("zone %d", zone))
		}
		zone++
	}
	return nil
}

func lostTableError(path string, at int64, where string) error {
	return fmt.Errorf("zns: emu %s: %w: both header slots read as zeros, but the file holds data (byte %d, %s), so it is a damaged device, not a blank file; "+
		"not writing an empty zone table over it (nothing was written): keep a copy of the file; "+
		"`zonefold fsck DEVICE --copy-to DIR` copies its files off without writing it (the zone table inferred from the data), "+
		"or `zonefold format --force DEVICE` erases it and starts over", path, ErrLostZoneTable, at, where)
}

// seekData is where the file's first data at or after off starts, and
// false if there is none (the rest is a hole). A file system that does
// not report holes has data everywhere.
func seekData(fd int, off int64) (int64, bool, error) {
	data, err := unix.Seek(fd, off, unix.SEEK_DATA)
	switch {
	case errors.Is(err, unix.ENXIO):
		return 0, false, nil
	case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP):
		return off, true, nil
	case err != nil:
		return 0, false, fmt.Errorf("seek data at %d: %w", off, err)
	}
	return data, true, nil
}

// firstNonZero is the offset of the first byte in [off, end) of f that
// is not zero, or -1. It reads only the file's data extents.
func firstNonZero(f *os.File, off, end int64) (int64, error) {
	if end <= off {
		return -1, nil
	}
	fd := int(f.Fd())
	buf := make([]byte, min(end-off, 1<<20))
	for off < end {
		data, more, err := seekData(fd, off)
		if err != nil {
			return -1, err
		}
		if !more || data >= end {
			return -1, nil
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			hole = end
		}
		hole = min(hole, end)
		for off = data; off < hole; {
			b := buf[:min(hole-off, int64(len(buf)))]
			n, err := f.ReadAt(b, off)
			for i, c := range b[:n] {
				if c != 0 {
					return off + int64(i), nil
				}
			}
			if err != nil {
				return -1, fmt.Errorf("read at %d: %w", off+int64(n), err)
			}
			off += int64(n)
		}
	}
	return -1, nil
}
