package zns

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// ErrLostZoneTable: an emu file's header slots hold no valid zone table
// (its first page reads as zeros, or both slots hold garbage), so its
// table is lost, but the file holds data (checkLostTable), or the emu
// magic or a DataSignature shows it was a device (checkDamagedHeader):
// a damaged device, not a blank file or one that is no device, and
// Open refuses to make a new device of it (an empty table
// written over the old one would lose every zone's write pointer, and
// with it all the data), unless Options.ReplaceLostTable or format=1
// says to start it over.
var ErrLostZoneTable = errors.New("its zone table is lost")

// checkLostTable tells a blank file, which Open makes a device of sp's
// geometry g, from a device that lost its zone table (ErrLostZoneTable)
// and from a file that is no device at all (refused, whatever Open is
// told): readEmuHeader found no valid slot and the file's first page
// reads as zeros (magic: a slot 1 still starts with the emu magic). The
// file is blank if
//   - its header area (the two slots and the padding up to the zones)
//     reads as zeros, but for what the first format of g writes to slot
//     1 (sequence number 1) before anything else: a power cut during
//     that write leaves any part of it, over zeros, and nothing else yet;
//   - and so does all the file past it, g's zones and what lies past
//     them (a smaller geometry than the lost device's must not make a
//     new device of a file whose data lies past it); SEEK_DATA: a hole
//     reads as zeros and is skipped.
//
// A file that holds data is a device only if something of a device
// shows: the emu magic in slot 1 (with data: a torn first format
// leaves the magic and nothing else), a registered
// DataSignature at a zone start of g (the engine's superblock, which
// starts each metadata zone, or a record header, which starts each
// data zone it wrote: findSignature), or where the file's first data
// starts, past the header or in it (a device's structures start
// blocks, and its first data starts one: so with a geometry other than
// the device's too, one of more zones having a larger header over the
// device's first zones). Data in the header area decides alone: the
// zones are not read past it. Data alone tells nothing: a disk image whose first 4 KiB are
// zeros, a tarball written at an offset, a sparse VM image were taken
// for devices that lost their table, and `format --force`
// (ReplaceLostTable) wrote a device over them.
//
// The search for data stops at the first byte that is not zero: a
// device's data mostly shows in its first zone's first block. Only
// each sequential zone's first 4 KiB of data used to be read: a zone
// whose data starts with a block of zeros (data that does, a write that
// failed and was zeroed) was taken for empty, and a file whose data all
// lay in such zones for blank, and formatted over.
//
// A sparse file costs an lseek or two per stretch of data and its
// written zeros: a 64 GiB file that holds nothing, two lseeks, and so
// does a fallocate'd one (unwritten extents are holes to SEEK_DATA, as
// long as the check's reads leave none of their pages cached:
// firstNonZero). A blank
// file every block of which is allocated (a file system without hole
// reporting, a block device, a file of written zeros) is read whole,
// once, when it first becomes a device (and on each Open with
// InferLostTable while it is blank: fsck --copy-to): no fewer bytes
// tell that none of them is data. An Open with Existing alone (fsck),
// which refuses the file whatever it holds, reads no more than budget
// (fsckScanBudget) of its data: enough to tell most files apart. Past scanLogAfter bytes read it says
// so in the log (a 16 GiB file took 29 s here), naming format=1, which
// skips the check.
//
// budget bounds what it reads of the file's data past the header (an
// Open that refuses the file whatever the check finds: fsck); a file
// whose first budget bytes of data read as zeros, with nothing of a
// device in its header or at its zone starts, is refused saying so.
func checkLostTable(f *os.File, size int64, g Geometry, sp spec, magic bool, budget int64) error {
	path := sp.path
	checkErr := func(err error) error {
		return fmt.Errorf("zns: emu %s: check the blank file for data: %w", path, err)
	}
	slotLen, dataOff := emuSlotLen(g.Zones), emuDataOff(g.Zones)
	var err error
	// hdrAt is the first byte of the header area that is data: slot 1
	// is looked at in its place (a device of fewer zones may start its
	// zones there, and what lies past it is further into them).
	hdrAt := int64(-1)
	for i, r := range [][2]int64{{0, slotLen}, {slotLen, 2 * slotLen}, {2 * slotLen, dataOff}} {
		var at int64
		if i == 1 {
			at, err = firstUnformatted(f, r[0], min(r[1], size), g, sp)
		} else {
			at, err = firstNonZero(f, r[0], min(r[1], size))
		}
		if err != nil {
			return checkErr(err)
		}
		if at >= 0 {
			hdrAt = at
			break
		}
	}
	if hdrAt >= 0 && magic {
		return lostTableError(path, fmt.Sprintf("the emu magic still reads in slot 1 and the file holds data (byte %d, in the header)", hdrAt))
	}
	name, sigAt, zones, err := findSignature(f, size, g)
	if err != nil {
		return checkErr(err)
	}
	if name != "" {
		return lostTableError(path, fmt.Sprintf("the file holds data: %s starts zone %d (byte %d)", name, (sigAt-dataOff)/g.ZoneSize, sigAt))
	}
	// The first data is in the header area of g (a device of fewer
	// zones, a smaller header, has zones there), or else in the zones:
	// read for it only then (data in the header decides, and a file of
	// written zeros past it was read whole for nothing).
	at, where, stopped := hdrAt, "in the header", int64(-1)
	if hdrAt < 0 {
		at, where, stopped, err = firstZoneData(f, size, g, budget)
		if err != nil {
			return checkErr(err)
		}
		if at >= 0 && magic {
			return lostTableError(path, fmt.Sprintf("the emu magic still reads in slot 1 and the file holds data (byte %d, %s)", at, where))
		}
	}
	if at >= 0 {
		name, err := matchSignature(f, size, at&^(signatureLen-1))
		if err != nil {
			return checkErr(err)
		}
		if name != "" {
			return lostTableError(path, fmt.Sprintf("the file holds data (byte %d, %s), which starts with %s", at, where, name))
		}
	}
	switch {
	case at < 0 && stopped >= 0:
		return fmt.Errorf("zns: emu %s has no zone table (both header slots read as zeros), %s, and its data up to byte %d (the first %d MiB of it) reads as zeros: "+
			"a blank file, a file that is no device, or a device of another geometry whose zone table was lost; read no further, as an existing device (fsck) it is refused whatever the rest holds: "+
			"`zonefold fsck DEVICE --copy-to DIR` reads it all, and formatting it refuses a file that holds data",
			path, noSignature(zones, ""), stopped, budget>>20)
	case at < 0:
		return nil // blank
	}
	return fmt.Errorf("zns: emu %s is not an emu device: neither header slot holds a zone table or the emu magic (the first page reads as zeros), "+
		"and the file holds data (byte %d, %s) but %s; refusing it (nothing was written): "+
		"if it is a device whose zone table was lost, give the geometry it was formatted with; format=1 makes a device of it, erasing what it holds",
		path, at, where, noSignature(zones, "nor does its first data start with one"))
}

// firstZoneData is where the first byte that is not zero past the
// header of an emu file of geometry g lies, and where that is ("zone
// 3", "past the 8 zones given"); -1 if none is. It reads the file's
// data extents only, and no more than budget bytes of them: stopped is
// where it stopped short for that (-1 if it did not).
func firstZoneData(f *os.File, size int64, g Geometry, budget int64) (at int64, where string, stopped int64, err error) {
	dataOff := emuDataOff(g.Zones)
	at, stopped, err = scanNonZero(f, dataOff, size, budget)
	if at < 0 || err != nil {
		return -1, "", stopped, err
	}
	if zone := (at - dataOff) / g.ZoneSize; zone < int64(g.Zones) {
		return at, fmt.Sprintf("zone %d", zone), -1, nil
	}
	return at, fmt.Sprintf("past the %d zones given", g.Zones), -1, nil
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

func lostTableError(path, evidence string) error {
	return lostError(path, "the first page reads as zeros", evidence)
}

// lostError is the refusal of an emu file whose zone table is lost:
// why its slots are not valid (state), and what shows it is a device
// that held data (evidence).
func lostError(path, state, evidence string) error {
	return fmt.Errorf("zns: emu %s: %w: neither header slot holds a valid one (%s), but %s, so it is a damaged device, not a blank file; "+
		"not writing an empty zone table over it (nothing was written): keep a copy of the file; "+
		"`zonefold fsck DEVICE --copy-to DIR` copies its files off without writing it (the zone table inferred from the data), "+
		"or `zonefold format --force DEVICE` erases it and starts over", path, ErrLostZoneTable, state, evidence)
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
// is not zero, or -1. It reads only the file's data extents, with no
// readahead, and drops what it read from the page cache: a page of an
// unwritten extent (fallocate'd, which reads as zeros) that is in the
// page cache is data to SEEK_DATA (ext4), so readahead past each read
// made the next stretch of a fallocate'd file data, and the whole of it
// was read (and left cached).
func firstNonZero(f *os.File, off, end int64) (int64, error) {
	at, _, err := scanNonZero(f, off, end, math.MaxInt64)
	return at, err
}

// scanNonZero is firstNonZero reading no more than budget bytes: stopped
// is where it stopped short for that, -1 if it did not.
func scanNonZero(f *os.File, off, end, budget int64) (at, stopped int64, err error) {
	if end <= off {
		return -1, -1, nil
	}
	fd := int(f.Fd())
	// Advice only: a file that takes none is read as before. Clean
	// pages cached before (by readahead, whose marks would start more)
	// go first: of an unwritten extent, they are zeros.
	_ = unix.Fadvise(fd, 0, 0, unix.FADV_RANDOM)
	defer unix.Fadvise(fd, 0, 0, unix.FADV_NORMAL)
	_ = unix.Fadvise(fd, off, end-off, unix.FADV_DONTNEED)
	buf := make([]byte, min(end-off, 8<<20))
	read := int64(0)
	for off < end {
		data, more, err := seekData(fd, off)
		if err != nil {
			return -1, -1, err
		}
		if !more || data >= end {
			return -1, -1, nil
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			hole = end
		}
		hole = min(hole, end)
		for off = data; off < hole; {
			if read >= budget {
				return -1, off, nil
			}
			b := buf[:min(hole-off, int64(len(buf)), budget-read)]
			n, err := f.ReadAt(b, off)
			_ = unix.Fadvise(fd, off, int64(n), unix.FADV_DONTNEED)
			if read < scanLogAfter && read+int64(n) >= scanLogAfter {
				// A warning: the commands log only those, and this one says
				// why a command seems to hang.
				slog.Warn("zns: emu: no valid zone table: reading the file's data for a byte that is not zero, to tell a blank file (made a device) from a device whose zone table is lost (refused); "+
					"a blank file of written zeros, or a block device, is read whole, and that takes a while (format=1 skips the check, erasing what the file holds)",
					"path", f.Name(), "read", read+int64(n), "at", off+int64(n), "end", end)
			}
			read += int64(n)
			if i := indexNonZero(b[:n]); i >= 0 {
				return off + int64(i), -1, nil
			}
			if err != nil {
				return -1, -1, fmt.Errorf("read at %d: %w", off+int64(n), err)
			}
			off += int64(n)
		}
	}
	return -1, -1, nil
}

// fsckScanBudget is how much of a file's data past its header an Open
// with Existing and without InferLostTable (fsck) reads for a byte that
// is not zero.
var fsckScanBudget int64 = 64 << 20

// scanLogAfter is how much firstNonZero reads before it says so (a
// blank file of written zeros is read whole: minutes, for a large one).
var scanLogAfter int64 = 1 << 30

// zeroPage is what indexNonZero compares with.
var zeroPage [4096]byte

// indexNonZero is the index of the first byte of b that is not zero, or
// -1. It compares a page at a time (bytes.Equal, vectorised): a byte at
// a time took 10 s of CPU for a 16 GiB file of zeros here, more than
// reading it from the page cache.
func indexNonZero(b []byte) int {
	for at := 0; at < len(b); at += len(zeroPage) {
		p := b[at:min(at+len(zeroPage), len(b))]
		if !bytes.Equal(p, zeroPage[:len(p)]) {
			return at + slices.IndexFunc(p, func(c byte) bool { return c != 0 })
		}
	}
	return -1
}

// A DataSignature recognises what a file system writes at the start of
// a zone (the engine's superblock, its record headers): Open looks for
// one in an emu file whose header slots hold garbage or read as zeros,
// to tell a device that lost its zone table from a file that is no
// device at all (checkDamagedHeader, checkLostTable): at the zone
// starts of the geometry given and, of a file whose first page reads
// as zeros, at the block where its first data starts (past the header
// of that geometry, or in it).
type DataSignature struct {
	// Name says what it is, in messages: "a zonefold superblock".
	Name string
	// Zones is how many zones, from zone 0, may start with one.
	Zones int
	// Match reports whether the first 4096 bytes of a zone are one. It
	// must not match bytes its file system did not write (a magic and
	// a checksum): a file it matches is taken for a device.
	Match func(block []byte) bool
}

// signatures are the registered DataSignatures. signaturesMu is a leaf.
var (
	signaturesMu sync.Mutex
	signatures   []DataSignature
)

// RegisterDataSignature registers s (from an init function, as
// image.RegisterFormat is used).
func RegisterDataSignature(s DataSignature) {
	signaturesMu.Lock()
	defer signaturesMu.Unlock()
	signatures = append(signatures, s)
}

// signatureLen is how much of a zone's start a DataSignature is given.
const signatureLen = 4096

// checkDamagedHeader tells, of an emu file both of whose header slots
// hold garbage (not zeros; readEmuHeader found neither valid: a stray
// dd over the file's start, bit rot that fails both checksums), a
// device that lost its zone table from a file that is no device at all
// (a file the device string named by mistake). It is a device if
//   - a slot still starts with the emu magic (magic: the checksums
//     fail, not the magic), or
//   - a zone start of the device string's geometry holds what a file
//     system writes there (a registered DataSignature: the engine's
//     superblock, which starts each of its metadata zones).
//
// Garbage in the slots alone tells nothing: random bytes there are
// what a stray dd leaves on a device and what any other file holds.
// lost reports a device of the geometry given (which ReplaceLostTable
// may start over, InferLostTable salvage); err is the refusal
// otherwise, ErrLostZoneTable for a device, never nil. A file that is
// no device is refused whatever Open is told: format=1 alone writes it.
func checkDamagedHeader(f *os.File, size int64, sp spec, magic bool) (lost bool, err error) {
	const state = "both hold bytes that fail their checks"
	g, gerr := softGeometry(sp)
	if gerr != nil {
		if magic {
			return false, fmt.Errorf("zns: emu %s: %w: neither header slot holds a valid one (%s; the emu magic still reads), so it is a damaged device: "+
				"give zone_size and zones (and zone_cap, conv) as the device was formatted, and `zonefold fsck DEVICE --copy-to DIR` copies its files off without writing it, "+
				"or `zonefold format --force DEVICE` erases it and starts over (nothing was written): %w", sp.path, ErrLostZoneTable, state, gerr)
		}
		return false, fmt.Errorf("zns: emu %s holds no emulated-device header: not an emu device, or one whose header was overwritten: "+
			"give zone_size and zones as it was formatted to look for a file system's data in it (nothing was written): %w", sp.path, gerr)
	}
	checkErr := func(err error) error {
		return fmt.Errorf("zns: emu %s: check the file for a device's data: %w", sp.path, err)
	}
	name, sigAt, zones, err := findSignature(f, size, g)
	if err != nil {
		return false, checkErr(err)
	}
	if !magic && name == "" {
		look := noSignature(zones, "")
		return false, fmt.Errorf("zns: emu %s is not an emu device: neither header slot holds a zone table or the emu magic, and %s; "+
			"refusing it (nothing was written): if it is a device whose header was overwritten, give the geometry it was formatted with; "+
			"format=1 makes a device of it, erasing what it holds", sp.path, look)
	}
	if name != "" {
		return true, lostError(sp.path, state, fmt.Sprintf("%s starts zone %d (byte %d)", name, (sigAt-emuDataOff(g.Zones))/g.ZoneSize, sigAt))
	}
	at, where, _, err := firstZoneData(f, size, g, math.MaxInt64)
	if err != nil {
		return false, checkErr(err)
	}
	evidence := "the emu magic still reads (its zones hold no data)"
	if at >= 0 {
		evidence = fmt.Sprintf("the emu magic still reads and the file holds data (byte %d, %s)", at, where)
	}
	return true, lostError(sp.path, state, evidence)
}

// findSignature is the name of the registered DataSignature found
// first at a zone start of geometry g in the file, and the byte it
// starts at; "" if none. zones is how many zone starts it looked at
// (those the signatures name, within g's). Zone starts in a hole read
// as zeros and are not read.
func findSignature(f *os.File, size int64, g Geometry) (name string, at int64, zones int, err error) {
	signaturesMu.Lock()
	sigs := slices.Clone(signatures)
	signaturesMu.Unlock()
	for _, s := range sigs {
		zones = max(zones, min(s.Zones, g.Zones))
	}
	dataOff := emuDataOff(g.Zones)
	buf := make([]byte, signatureLen)
	for z := int64(0); z < int64(zones); z++ {
		start := satAdd(dataOff, satMul(z, g.ZoneSize))
		if satAdd(start, signatureLen) > size {
			break
		}
		data, more, err := seekData(int(f.Fd()), start)
		if err != nil {
			return "", 0, zones, err
		}
		if !more {
			break
		}
		if data > start { // a hole: on to the first zone start in data
			z = (data-dataOff+g.ZoneSize-1)/g.ZoneSize - 1
			continue
		}
		if _, err := f.ReadAt(buf, start); err != nil {
			return "", 0, zones, fmt.Errorf("read at %d: %w", start, err)
		}
		for _, s := range sigs {
			if z < int64(s.Zones) && s.Match(buf) {
				return s.Name, start, zones, nil
			}
		}
	}
	return "", 0, zones, nil
}

// noSignature says that none of the first zones zone starts held a
// registered DataSignature, and more (if not "") when some are.
func noSignature(zones int, more string) string {
	if zones == 0 {
		return "no file system's signature is known to look for at its zone starts"
	}
	if more != "" {
		more = ", " + more
	}
	return fmt.Sprintf("none of the first %d zone starts of the geometry given holds %s%s", zones, signatureNames(), more)
}

// matchSignature is the name of the registered DataSignature that the
// block at off of the file (size bytes) is, or "".
func matchSignature(f *os.File, size, off int64) (string, error) {
	if satAdd(off, signatureLen) > size {
		return "", nil
	}
	buf := make([]byte, signatureLen)
	if _, err := f.ReadAt(buf, off); err != nil {
		return "", fmt.Errorf("read at %d: %w", off, err)
	}
	signaturesMu.Lock()
	defer signaturesMu.Unlock()
	for _, s := range signatures {
		if s.Match(buf) {
			return s.Name, nil
		}
	}
	return "", nil
}

// signatureNames names the registered DataSignatures: "a zonefold
// superblock", "a or b".
func signatureNames() string {
	signaturesMu.Lock()
	defer signaturesMu.Unlock()
	names := make([]string, len(signatures))
	for i, s := range signatures {
		names[i] = s.Name
	}
	return strings.Join(names, " or ")
}
