package zns

import (
	"errors"
	"fmt"
	"math"
	"os"

	"golang.org/x/sys/unix"
)

// ErrLostZoneTable: an emu file's header slots hold no valid zone table
// (its first page reads as zeros), so its table is lost, but the file
// holds data: a damaged device, not a blank
// file, and Open refuses to make a new device of it (an empty table
// written over the old one would lose every zone's write pointer, and
// with it all the data), unless Options.ReplaceLostTable or format=1
// says to start it over.
var ErrLostZoneTable = errors.New("its zone table is lost")

// lostTableSample is how much of a sequential zone checkLostTable reads.
const lostTableSample = 4096

// checkLostTable tells a blank file, which Open makes a device of sp's
// geometry g, from a device that lost its zone table (ErrLostZoneTable):
// readEmuHeader found no valid slot and the file's first page reads as
// zeros. The file is blank if
//   - its header area (the two slots and the padding up to the zones)
//     reads as zeros, but for what the first format of g writes to slot
//     1 (sequence number 1) before anything else: a power cut during
//     that write leaves any part of it, over zeros, and nothing else yet;
//   - each sequential zone's first data reads as zeros: the first
//     block of it the file system holds (SEEK_DATA: a hole reads as zeros
//     and is skipped), which for a zone written through the device is
//     where its data starts, its first append;
//   - each conventional zone's data reads as zeros (it is written
//     anywhere);
//   - and so does the first data of each zone-sized stretch past g's
//     zones: a smaller geometry than the lost device's must not make a
//     new device of a file whose data lies past it.
//
// A sparse file costs an lseek or two per stretch of data: a 64 GiB file
// that holds nothing, two. A file every block of which is allocated (a
// file system without hole reporting, a block device, a file of written
// zeros) costs its header area, a 4 KiB block per zone-sized stretch and
// its conventional zones whole, never its sequential zones whole.
func checkLostTable(f *os.File, size int64, g Geometry, sp spec) error {
	path := sp.path
	checkErr := func(err error) error {
		return fmt.Errorf("zns: emu %s: check the blank file for data: %w", path, err)
	}
	slotLen, dataOff := emuSlotLen(g.Zones), emuDataOff(g.Zones)
	for _, r := range [][2]int64{{0, slotLen}, {2 * slotLen, dataOff}} {
		at, err := firstNonZero(f, r[0], min(r[1], size))
		if err != nil {
			return checkErr(err)
		}
		if at >= 0 {
			return lostTableError(path, at, "in the header")
		}
	}
	at, err := firstUnformatted(f, slotLen, min(2*slotLen, size), g, sp)
	if err != nil {
		return checkErr(err)
	}
	if at >= 0 {
		return lostTableError(path, at, "in the header")
	}
	fd := int(f.Fd())
	for zone := int64(0); ; {
		start := satAdd(dataOff, satMul(zone, g.ZoneSize))
		if start >= size {
			return nil
		}
		data, more, err := seekData(fd, start)
		if err != nil {
			return checkErr(err)
		}
		if !more {
			return nil
		}
		zone = (data - dataOff) / g.ZoneSize
		zoneEnd := min(satAdd(dataOff, satMul(zone+1, g.ZoneSize)), size)
		end := min(satAdd(data, lostTableSample), zoneEnd)
		if zone < int64(sp.conv) {
			end = zoneEnd
		}
		at, err := firstNonZero(f, data, end)
		if err != nil {
			return checkErr(err)
		}
		if at >= 0 {
			where := fmt.Sprintf("zone %d", zone)
			if zone >= int64(g.Zones) {
				where = fmt.Sprintf("past the %d zones given", g.Zones)
			}
			return lostTableError(path, at, where)
		}
		zone++
	}
}

// firstUnformatted is the offset of the first byte in [off, end) of f,
// slot 1 of geometry g (end <= off+its length), that reads as neither
// zero nor what the first format of sp writes there, or -1.
func firstUnformatted(f *os.File, off, end int64, g Geometry, sp spec) (int64, error) {
	at, err := firstNonZero(f, off, end)
	if at < 0 || err != nil {
		return at, err
	}
	t := newZoneTable(g, sp.conv, sp.strictOpen)
	want := make([]byte, emuSlotLen(g.Zones))
	t.encodeEmuSlot(want, t.zones, 1, false)
	got := make([]byte, end-at)
	if n, err := f.ReadAt(got, at); n < len(got) {
		return -1, fmt.Errorf("read at %d: %w", at+int64(n), err)
	}
	for i, c := range got {
		if c != 0 && c != want[at-off+int64(i)] {
			return at + int64(i), nil
		}
	}
	return -1, nil
}

// satAdd and satMul are a+b and a*b of non-negative a and b, or
// math.MaxInt64 where that overflows.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func satMul(a, b int64) int64 {
	if b != 0 && a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

func lostTableError(path string, at int64, where string) error {
	return fmt.Errorf("zns: emu %s: %w: neither header slot holds a valid one (the first page reads as zeros), but the file holds data (byte %d, %s), so it is a damaged device, not a blank file; "+
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
