package zns

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math"
	"os"
	"slices"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/uring"
)

// Emu is an emulated zoned device on a regular file or a block device. The
// zone rules are enforced in software (see zoneTable); data goes through
// the ring to the file, page-aligned appends with O_DIRECT where the file
// system takes it (see openDirect).
//
// On-disk layout: two header slots at the start of the file, then the
// zones. A slot holds the geometry, a sequence number, every zone's write
// pointer, condition and (for a finished zone) how many bytes below it
// were never written, and a CRC-32C; Flush writes the slot the previous
// Flush did not, so a torn header write leaves the other one valid, and
// Open takes the valid slot with the higher sequence number. A slot with
// emuFlagSums also holds, past its CRC, the CRC-32C of the data each zone
// got since the Flush before (a block with its own CRC, which binds it to
// the slot's sequence number). Zone i's data is at dataOff + i*ZoneSize
// (dataOff is 1 MiB aligned).
//
// Durability: Flush makes completed writes and the zone table durable:
// everything that completed before Flush was called survives a power cut
// after it returns. It copies the zone table under the table's mutex
// (the write pointers move as writes are submitted: the copy claims the
// writes in flight too), then releases it and, with only flushMu held,
// waits for the writes in flight at the copy, writes the copy to a slot
// and fdatasyncs once: data and table at once. Writes, reads and zone management go on
// meanwhile; they count as coming after the Flush. A power cut during
// that sync may keep the slot and lose some of the data it claims (the
// disk may write its cache in any order): the slot carries the checksums
// of that data, computed as it was written (zoneState.sum), and Open
// puts a zone whose data does not match back where the Flush before left
// it (verifySums), so no table exposes data that did not reach the
// media. The same check takes a zone back when that data was damaged
// at rest after a Flush that returned: no byte tells the two apart, so
// the device says which zones it took back (Rollbacks, a
// RollbackReporter), and the engine reports them as possible loss of
// acknowledged data. Open reads back all the data those checksums cover (what the
// newest slot's Flush added: up to the device's size after one big
// fill), again at every Open until a Flush writes the table. Where the
// checksums do not fit in the slot, or a Flush failed
// and the checksums no longer reach back to the flushed table, a Flush
// syncs the data first, then writes and syncs the slot (the disk here
// has no FUA: ordering two writes costs two cache flushes, which is what
// made a Flush twice the cost of the kernel's fdatasync). A write the
// file did not take (the host's file system full, an I/O error: its
// completion reports the error) still moved its zone's write pointer
// and running checksum; a Flush sums such a zone from the file instead
// (sumFailed), so that the appends around the failed one, which
// completed, are as durable as any: with the running checksum, Open
// took the zone back as far as the checksum started, appends an
// acknowledged Flush had claimed among them. The failed range reads as
// zeros (its writer was told it failed): the write's completion zeroes
// it in the file (zeroRange: a punched hole, else zeros written) before
// it reports the failure, and a Flush or a cut that would claim a range
// not zeroed yet tries again and fails if it cannot. A zoned drive's
// write pointer never moves over a write it failed, and a reset zone's
// blocks read as zeros until written: the range used to read as
// whatever the file held there, a reset zone's old data included, whose
// whole records (an engine's, numbered above its checkpoint) recovery
// could replay as new. A reset need not zero its zone then (every byte
// below a write pointer was written since the zone's reset, or zeroed;
// reads at or past it return zeros), so it punches nothing: a punch of
// a 4 MiB zone cost each reset about 1.7 ms more on ext4. A zone
// reset is durable when ResetZone returns, and makes nothing else
// durable: it writes the flushed table with the zone emptied to the next
// slot and syncs it (see ResetZone). "The flushed table" is thus the
// last Flush's, with the zones reset since then empty: what Open, a
// PowerCut and TearLastWrite restore.
//
// A Flush does only what changed since the last one needs: no data sync if no write came in between (what the
// table claims was synced by an earlier Flush), no table write and sync
// if no write pointer, written end or condition changed and no zone was
// reset and written again up to where it was (the flushed slot's data
// checksums would no longer match); a Flush with nothing new costs no
// I/O.
//
// FlushCut (CutFlusher) tells its caller when the Flush copies the zone
// table, its cut: a write that completed before then is covered, though
// it completed after the call, and the engine's group commit lets a sync
// that comes before the cut share the flush rather than wait for it and
// run another.
//
// Lock order: flushMu, then the zone table's mu, then whatever a
// FlushCut's cut takes (the engine's flush group's mutex, a leaf).
// soft.failedMu is a leaf too.
// flushMu serialises Flush, ResetZone, PowerCut, TearLastWrite and Close, so a power
// cut or a close that comes while a Flush syncs waits for it, as it would have to for the mutex the
// Flush used to hold throughout.
//
// Close does not flush: a reopened Emu has the zone table of the last
// Flush, conditions included (an explicitly opened zone stays open, as on
// a device that kept power while its user restarted), and reads at or past
// a write pointer, or in the unwritten rest of a finished zone, return
// zeros whatever the file holds there (as a ZNS device reads unwritten
// blocks): bytes that reached the file but were lost to a power cut never
// become readable. Data in conventional zones is never reverted. PowerCut and TearLastWrite also
// close the open zones, as a power cycle does.
//
// Fault injection (for crash and error-path tests), all precise:
//   - FailWrite(n): the n-th Write or Append from now fails with EIO.
//   - FailRead(n): the n-th Read from now fails with EIO.
//   - FailReadBad(n): so does the n-th, and every Read from then on that
//     touches its range (bad media), until the next FailRead(Bad).
//   - FailFlush(n): the n-th Flush from now fails with EIO, persisting
//     nothing.
//   - PowerCut(): everything not flushed is lost, at once (a zone reset
//     is durable when ResetZone returns, and flushes nothing else).
//   - TearLastWrite(keep): a power cut during the last write, of which only
//     the first keep bytes reached the media.
type Emu struct {
	soft
	f       *os.File
	slotLen int64
	// flushMu guards what follows (see the lock order above).
	flushMu sync.Mutex
	seq     uint64 // sequence number of the newest valid header slot
	// flushed is the durable zone table: as of the last Flush, with
	// the zones reset since emptied (ResetZone).
	flushed []zoneState
	snap    []zoneState // the table a Flush persists, copied at its start
	// flushedGen is soft.gen as of the last Flush's copy, snapGen as of
	// the running one's: equal, no write came in between.
	flushedGen, snapGen uint64
	// stale: a header slot was damaged at Open, so the next Flush
	// writes the table even if it did not change (to repair it).
	stale bool
	// flushIO counts what Flushes did (tests, and a debug line at Close).
	flushIO struct{ flushes, syncs, tableWrites int }
	// twoSync: a Flush failed after it restarted the data checksums, so
	// they do not cover all the next Flush claims: it syncs twice.
	twoSync bool
	hdr     []byte // one slot, reused by every Flush
	// testHookFlushSync, if set, runs in Flush just before it syncs the
	// data: tests hold a flush there.
	testHookFlushSync func()
	// testHookSync, if set, runs before every fdatasync of a Flush; an
	// error it returns is that sync's (tests of a failed Flush).
	testHookSync func() error
	// df is the file opened again with O_DIRECT, nil where the file
	// system refuses it (see openDirect).
	df *os.File
	fd int // f's descriptor (zeroRange)
	// rollbacks are the zones Open took back (verifySums), until a
	// table is written (persist). Under flushMu.
	rollbacks []Rollback
	// inferred: the zone table was lost and Open inferred it from the
	// data, read-only (Options.InferLostTable, inferZones).
	inferred bool
	// fallback: Open took the older header slot, the newest being
	// damaged (SlotFallback), until a table is written (persist).
	// Under flushMu.
	fallback *SlotFallback
}

// SlotFallback implements SlotFallbackReporter: whether this Open took
// the older header slot because the other one was damaged, and what it
// found past the older table's write pointers (see SlotFallback). None
// once a Flush, a reset or a cut has written the table since: that
// write repaired the damaged slot, and whatever the lost table held is
// no longer anywhere.
func (e *Emu) SlotFallback() (SlotFallback, bool) {
	e.flushMu.Lock()
	defer e.flushMu.Unlock()
	if e.fallback == nil {
		return SlotFallback{}, false
	}
	f := *e.fallback
	f.DataPast = slices.Clone(f.DataPast)
	return f, true
}

// dataPast lists the sequential zones, neither full nor finished, whose
// block at the write pointer holds anything but zeros in the file: data
// a table newer than the one loaded claimed, or writes no Flush made
// durable (see SlotFallback). One block read per such zone.
func (e *Emu) dataPast() ([]int, error) {
	bs := e.geo.BlockSize
	b := make([]byte, bs)
	var past []int
	for i, z := range e.zones {
		if z.typ == TypeConventional || finishedCond(z.cond) || z.wp-e.start(i) >= e.geo.ZoneCap {
			continue
		}
		if _, err := e.f.ReadAt(b, e.dataOff+z.wp); err != nil {
			return nil, fmt.Errorf("read zone %d at its write pointer: %w", i, err)
		}
		if indexNonZero(b) >= 0 {
			past = append(past, i)
		}
	}
	return past, nil
}

// Rollbacks implements RollbackReporter: the zones this Open took back
// to the flush before the last, because the data the last one claimed
// there did not match the checksums its slot carries (see Emu): a power
// cut during that flush, or damage at rest to what it made durable.
// None once a Flush, a reset or a cut has written the table since: the
// device has moved on from them (a format, say).
func (e *Emu) Rollbacks() []Rollback {
	e.flushMu.Lock()
	defer e.flushMu.Unlock()
	return slices.Clone(e.rollbacks)
}

const (
	emuMagic      = "ZFEMU\x00v1"
	emuVersion    = 1
	emuHdrFixed   = 64
	emuEntryLen   = 16
	emuDataAlign  = 1 << 20
	emuSlotAlign  = 4096
	emuFlagStrict = 1
	// emuFlagSums: the slot was written by a one-sync Flush and is
	// followed, past its CRC, by the checksums of the data it claims.
	emuFlagSums = 2
	emuSumLen   = 24 // zone u32, CRC u32, from u64, to u64 (relative)
	// emuMaxSeq bounds a slot's sequence number. A Flush writes seq+1:
	// past 2^64-1 it wraps to 0, a slot no Open takes, and the table that
	// Flush made durable is lost to the older slot. No device flushes
	// 2^62 times (a Flush a nanosecond for 146 years): a larger number is
	// corruption.
	emuMaxSeq = 1 << 62
)

var crc32c = crc32.MakeTable(crc32.Castagnoli)

func emuSlotLen(zones int) int64 {
	n := int64(emuHdrFixed + emuEntryLen*zones + 4)
	return (n + emuSlotAlign - 1) / emuSlotAlign * emuSlotAlign
}

func emuDataOff(zones int) int64 {
	return (2*emuSlotLen(zones) + emuDataAlign - 1) / emuDataAlign * emuDataAlign
}

// emuHeader is a decoded header slot.
type emuHeader struct {
	seq  uint64
	geo  Geometry
	conv int
	slot int // 0 or 1: where it was read, seq%2
	// otherDamaged: the other slot is not valid (the next Flush
	// repairs it).
	otherDamaged bool
	// otherOverwritten: the damaged other slot does not even start with
	// the emu magic.
	otherOverwritten bool
	raw              []byte // the whole slot, zone entries included
	// sums is the records of the data checksum block after the entries,
	// if the slot has one (emuFlagSums).
	sums []byte
	// magic, of a file with no valid slot whose first page reads as
	// zeros: a slot 1 still starts with the emu magic (checkLostTable).
	magic bool
}

func openEmu(sp spec, opts Options) (*Emu, error) {
	// Refuse what is not storage before opening it: opening a FIFO
	// blocks until a writer comes.
	st, err := os.Stat(sp.path)
	exists := err == nil
	if exists {
		if err := checkEmuMode(sp.path, st.Mode()); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("zns: emu: %w", err)
	}
	flags := os.O_RDWR
	create := sp.zoneSize > 0 && sp.zones > 0 && !opts.Existing
	if create && !exists {
		flags |= os.O_CREATE | os.O_EXCL
	}
	f, err := os.OpenFile(sp.path, flags, 0o644)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("zns: emu %s does not exist; give zone_size and zones to create it: %w", sp.path, err)
		}
		return nil, fmt.Errorf("zns: emu: %w", err)
	}
	e, err := newEmu(f, sp, opts)
	if err != nil {
		f.Close()
		if flags&os.O_CREATE != 0 {
			os.Remove(sp.path) // a refused create leaves no file behind
		}
		return nil, err
	}
	return e, nil
}

// emuTooSmall is the refusal of a file (with no valid zone table) or a
// block device of size bytes when the geometry sp gives needs more; nil
// if it does not, or sp gives none.
func emuTooSmall(sp spec, size int64, isBlock bool) error {
	g, err := softGeometry(sp)
	if err != nil {
		return nil
	}
	need := satAdd(emuDataOff(g.Zones), satMul(int64(g.Zones), g.ZoneSize))
	switch {
	case size >= need:
		return nil
	case isBlock:
		return fmt.Errorf("zns: emu %s: the device has %d bytes, the geometry given (%d zones of %d bytes) needs %d: give the device's own (nothing was read or written)",
			sp.path, size, g.Zones, g.ZoneSize, need)
	}
	return fmt.Errorf("zns: emu %s: the file has %d bytes, the geometry given (%d zones of %d bytes) needs %d, and neither header slot holds a valid zone table (the first page reads as zeros): "+
		"a blank file is no device yet (`zonefold format DEVICE` makes one of it); if it is a device whose zone table is lost, so is its geometry: give zone_size and zones (and zone_cap, conv) as the device was formatted; "+
		"or the file was truncated (restore it); nothing was read past its header, nor written",
		sp.path, size, g.Zones, g.ZoneSize, need)
}

// checkEmuMode accepts a regular file or a block device.
func checkEmuMode(path string, m os.FileMode) error {
	if m.IsRegular() || m&os.ModeDevice != 0 && m&os.ModeCharDevice == 0 {
		return nil
	}
	kind := "special file"
	switch {
	case m.IsDir():
		kind = "directory"
	case m&os.ModeNamedPipe != 0:
		kind = "FIFO"
	case m&os.ModeSocket != 0:
		kind = "socket"
	case m&os.ModeCharDevice != 0:
		kind = "character device"
	}
	return fmt.Errorf("zns: emu %s is a %s, not a regular file or a block device", path, kind)
}

func newEmu(f *os.File, sp spec, opts Options) (*Emu, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("zns: emu: %w", err)
	}
	if err := checkEmuMode(sp.path, st.Mode()); err != nil {
		return nil, err
	}
	isBlock := !st.Mode().IsRegular()
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, fmt.Errorf("zns: emu %s: size: %w", sp.path, err)
	}
	if isBlock {
		// A block device does not grow: one too small for the geometry
		// given is refused before anything of it is read.
		if err := emuTooSmall(sp, size, true); err != nil {
			return nil, err
		}
	}
	hdr, found, err := readEmuHeader(f, size, sp)
	inferred := false
	var dh *damagedHeader
	damaged := errors.As(err, &dh)
	if !found && opts.Existing && err == nil && size > 0 {
		// Nor does Existing grow a file: one whose first page reads as
		// zeros, too small for the geometry given, is refused before
		// checkLostTable reads it (a file of zeros, whole). An empty
		// one is refused as such below. Garbage in
		// the slots (damaged) costs a block per zone start to tell a
		// file that is no device, which checkDamagedHeader says.
		if err := emuTooSmall(sp, size, false); err != nil {
			return nil, err
		}
	}
	if damaged {
		// Garbage in both slots: a device that lost its table, or a
		// file that is no device (never written, whatever opts say).
		var lost bool
		lost, err = checkDamagedHeader(f, size, sp, dh.magic)
		switch {
		case !lost:
		case opts.ReplaceLostTable:
			err = nil // a new device, as over a table of zeros
		case opts.InferLostTable:
			err, inferred = nil, true
		}
	}
	if err != nil {
		return nil, err
	}
	if !found && !damaged && !sp.format && size > 0 {
		// Blank, damaged, or no device? Only a file of the device
		// string's geometry is ever written as a new device, and never
		// one that holds data that is no device's (ReplaceLostTable
		// starts over a device, not any file).
		if g, err := softGeometry(sp); err == nil {
			budget := int64(math.MaxInt64)
			if opts.Existing && !opts.InferLostTable {
				// Refused whatever the file holds: read only
				// enough to say what it likely is.
				budget = fsckScanBudget
			}
			if err := checkLostTable(f, size, g, sp, hdr.magic, budget); err != nil {
				switch {
				case !errors.Is(err, ErrLostZoneTable):
					return nil, err
				case opts.ReplaceLostTable:
				case opts.InferLostTable:
					inferred = true // read-only salvage: inferZones
				default:
					return nil, err
				}
			}
		}
	}
	if !found && opts.Existing && size == 0 {
		return nil, fmt.Errorf("zns: emu %s is empty: device is not formatted by zonefold (run `zonefold format DEVICE`)", sp.path)
	}
	if !found && opts.Existing && !inferred {
		return nil, fmt.Errorf("zns: emu %s has no zone table (blank, or both header slots read as zeros): not opening it as a new device, which writes an empty one over it", sp.path)
	}
	var g Geometry
	if found && !sp.format {
		if err := hdr.matches(sp); err != nil {
			return nil, fmt.Errorf("zns: emu %s: %w", sp.path, err)
		}
		g = hdr.geo
		sp.conv = hdr.conv
	} else if g, err = softGeometry(sp); err != nil {
		if !found && !sp.format && sp.zoneSize == 0 && size == 0 {
			// A blank file (empty, or zeros) is formatted when the
			// geometry is given; say so rather than name a parameter.
			return nil, fmt.Errorf("zns: emu %s is blank (no device yet): give zone_size and zones to create one: %w", sp.path, err)
		}
		if !found && !sp.format && sp.zoneSize == 0 {
			// Without the geometry, zeros in the first page do not
			// tell a blank file from a device whose table is lost
			// (checkLostTable needs it).
			return nil, fmt.Errorf("zns: emu %s has no zone table (its first page reads as zeros): a blank file, or a device whose zone table was lost; "+
				"give zone_size and zones to create a device on a blank file (a file that holds data is refused): %w", sp.path, err)
		}
		return nil, fmt.Errorf("zns: emu %s: %w", sp.path, err)
	}
	dataOff := emuDataOff(g.Zones)
	if g.ZoneSize > (math.MaxInt64-dataOff)/int64(g.Zones) {
		return nil, fmt.Errorf("zns: emu %s: %d zones of %d bytes do not fit in a file", sp.path, g.Zones, g.ZoneSize)
	}
	need := dataOff + int64(g.Zones)*g.ZoneSize
	if size < need {
		switch {
		case isBlock:
			return nil, fmt.Errorf("zns: emu %s: the device has %d bytes, the geometry needs %d", sp.path, size, need)
		case inferred:
			// The geometry is the device string's alone.
			return nil, fmt.Errorf("zns: emu %s: the file has %d bytes, the geometry given (%d zones of %d bytes) needs %d: its zone table is lost, and with it the device's geometry: give zone_size and zones (and zone_cap, conv) as the device was formatted; or the file was truncated (restore it)",
				sp.path, size, g.Zones, g.ZoneSize, need)
		case found && !sp.format:
			// Zones past the cut would read as zeros, silently.
			return nil, fmt.Errorf("zns: emu %s: the file has %d bytes, its geometry needs %d: it was truncated (restore it; format=1 erases it and starts over)", sp.path, size, need)
		}
		if err := f.Truncate(need); err != nil {
			return nil, fmt.Errorf("zns: emu %s: %d zones of %d bytes need a %d-byte file: %w", sp.path, g.Zones, g.ZoneSize, need, err)
		}
	}
	e := &Emu{f: f, slotLen: emuSlotLen(g.Zones)}
	if err := e.init(g, sp, opts, true); err != nil {
		return nil, err
	}
	e.file = uring.FD(int(f.Fd()))
	e.dataOff = dataOff
	e.hdr = make([]byte, e.slotLen)
	if found && !sp.format {
		e.seq, e.stale = hdr.seq, hdr.otherDamaged
		err := e.loadZones(hdr.raw)
		if err == nil {
			err = e.verifySums(hdr.sums)
		}
		if err != nil {
			e.ring.Close()
			return nil, fmt.Errorf("zns: emu %s: %w", sp.path, err)
		}
		restartSums(e.zones)
		if hdr.otherDamaged {
			// Only now that the slot is known good and the file holds its
			// geometry: a truncated file is one error, not a warning too.
			past, err := e.dataPast()
			if err != nil {
				e.ring.Close()
				return nil, fmt.Errorf("zns: emu %s: header slot %d is damaged: %w", sp.path, 1-hdr.slot, err)
			}
			e.fallback = &SlotFallback{DamagedSlot: 1 - hdr.slot, OpenedSlot: hdr.slot, Seq: hdr.seq, DataPast: past, Overwritten: hdr.otherOverwritten}
			log := slog.Warn
			if len(past) > 0 && hdr.otherOverwritten {
				// Written over at rest, not torn by a crash
				// (SlotFallback.Overwritten): what a flush made
				// durable may be lost.
				log = slog.Error
			}
			log("zns: emu header slot is damaged; opened from the other one, which the next flush copies over it: "+e.fallback.String(),
				"path", sp.path, "damaged_slot", 1-hdr.slot, "opened_slot", hdr.slot, "seq", hdr.seq)
		}
	} else if inferred {
		e.inferred = true
		if err := e.inferZones(int(f.Fd()), size); err != nil {
			e.ring.Close()
			return nil, fmt.Errorf("zns: emu %s: %w", sp.path, err)
		}
	}
	e.sums = true
	e.flushed = make([]zoneState, g.Zones)
	e.snap = make([]zoneState, g.Zones)
	copy(e.flushed, e.zones)
	if (!found && !inferred) || sp.format {
		// A new device: write its table to both slots now, so that it
		// reopens as formatted and slot 0 (where Open looks for the zone
		// count) is never blank again. Nothing else uses it yet.
		err := e.persist(e.zones, true, false)
		if err == nil {
			err = e.persist(e.zones, true, false)
		}
		if err != nil {
			e.ring.Close()
			return nil, fmt.Errorf("zns: emu %s: format: %w", sp.path, err)
		}
	}
	if e.df = openDirect(f); e.df != nil {
		e.direct, e.hasDirect = uring.FD(int(e.df.Fd())), true
	}
	e.fd = int(f.Fd())
	e.zero = e.zeroRange
	return e, nil
}

// zeroRange makes device range [off, off+n) of the file read as zeros:
// it punches a hole there (a regular file's blocks are freed; a block
// device discards them if that guarantees zeros), or, where the file
// system or device does not punch, has it zero the range
// (FALLOC_FL_ZERO_RANGE: a block device writes zeros itself), or else
// writes zeros. It makes nothing durable: the sync of the Flush that
// claims the range does (see Emu).
func (e *Emu) zeroRange(off, n int64) error {
	at := e.dataOff + off
	err := unix.Fallocate(e.fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, at, n)
	if err == nil {
		return nil
	}
	if unix.Fallocate(e.fd, unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE, at, n) == nil {
		return nil
	}
	zeros := make([]byte, min(n, 1<<20))
	for n > 0 {
		k, werr := unix.Pwrite(e.fd, zeros[:min(n, int64(len(zeros)))], at)
		if werr != nil {
			return fmt.Errorf("zero [%d,+%d) of the file: punch: %v; write zeros: %w", at, n, err, werr)
		}
		at, n = at+int64(k), n-int64(k)
	}
	return nil
}

// zeroFailed zeroes again the ranges of the failed writes accepted up
// to gen upTo that could not be zeroed when they failed (failedWrite.
// dirty): a table that claims one must not be written while the file
// may hold older bytes there. Caller holds flushMu.
func (e *Emu) zeroFailed(upTo uint64) error {
	e.failedMu.Lock()
	defer e.failedMu.Unlock()
	for i := range e.failed {
		f := &e.failed[i]
		if !f.dirty || f.gen > upTo {
			continue
		}
		if err := e.zero(f.off, f.n); err != nil {
			return fmt.Errorf("zone %d: the range of a failed write does not read as zeros: %w", f.zone, err)
		}
		f.dirty = false
	}
	return nil
}

// openDirect opens f's file again with O_DIRECT, or returns nil if its
// file system does not take it (tmpfs before Linux 6.6).
//
// Appends, page-aligned as the engine makes them (its header blocks and
// its cache's folios are), go through it: the data goes from the
// caller's buffer to the disk as it is written, as it would to a zoned
// drive, rather than into the page cache, to be copied there once more
// and written to the disk only by the next Flush's fdatasync, all at
// once and from the one goroutine that flushes. A Flush's fdatasync
// still follows (the disk's volatile cache, and the block allocation of
// the file's holes), so nothing is durable earlier than before. Reads and
// the header slots keep the buffered descriptor; the kernel keeps the two
// coherent (a direct write drops the cached pages it overwrites).
func openDirect(f *os.File) *os.File {
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), unix.O_RDWR|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	return os.NewFile(uintptr(fd), f.Name())
}

// readEmuHeader finds the newest valid header slot. found is false when
// there is none and the first block is all zeros (a new file or a blank
// device); anything else that holds no valid slot is an error (a
// *damagedHeader, which newEmu looks into), so that Open never formats
// over data it does not understand (format=1 does that on purpose,
// ReplaceLostTable to a device that lost its table). One damaged slot
// is not: the device opens from the other, with a warning, and its next
// Flush rewrites the damaged one.
func readEmuHeader(f *os.File, size int64, sp spec) (emuHeader, bool, error) {
	first := make([]byte, emuSlotAlign)
	if _, err := f.ReadAt(first, 0); err != nil && !errors.Is(err, io.EOF) {
		return emuHeader{}, false, fmt.Errorf("zns: emu %s: read header: %w", sp.path, err)
	}
	if sp.format {
		return emuHeader{}, false, nil
	}
	var slots [2]*emuHeader
	// Slot 0 gives the slot length, hence where slot 1 is.
	slotLen := int64(0)
	if zones, ok := emuHeaderZones(first); ok {
		slotLen = emuSlotLen(zones)
		slots[0] = readEmuSlot(f, size, 0, slotLen)
	}
	magic := bytes.HasPrefix(first, []byte(emuMagic))
	if slots[0] != nil {
		slots[1] = readEmuSlot(f, size, slotLen, slotLen)
	} else {
		// Slot 0 is damaged: look for slot 1 where each zone count
		// would put it (it starts with the magic and names that count).
		for off := int64(emuSlotAlign); off <= emuSlotLen(MaxSoftZones) && off < size && slots[1] == nil; off += emuSlotAlign {
			var fixed [emuHdrFixed]byte
			if _, err := f.ReadAt(fixed[:], off); err != nil {
				break
			}
			if zones, ok := emuHeaderZones(fixed[:]); ok && emuSlotLen(zones) == off {
				slots[1] = readEmuSlot(f, size, off, off)
				magic = true
			}
		}
	}
	var best *emuHeader
	for _, h := range slots {
		if h != nil && (best == nil || h.seq > best.seq) {
			best = h
		}
	}
	switch {
	case best != nil:
		// newEmu warns of the damaged one once the device opens.
		best.otherDamaged = slots[1-best.slot] == nil
		if best.otherDamaged {
			// A write of a slot that a crash tears leaves its first
			// block, which starts with the magic, old or new: without
			// the magic, the slot was written over (SlotFallback).
			other := first
			if best.slot == 0 {
				other = make([]byte, len(emuMagic))
				if _, err := f.ReadAt(other, slotLen); err != nil && !errors.Is(err, io.EOF) {
					return emuHeader{}, false, fmt.Errorf("zns: emu %s: read header slot 1: %w", sp.path, err)
				}
			}
			best.otherOverwritten = !bytes.HasPrefix(other, []byte(emuMagic))
		}
		return *best, true, nil
	case bytes.Count(first, []byte{0}) == len(first):
		return emuHeader{magic: magic}, false, nil
	case bytes.HasPrefix(first, []byte(emuMagic)) && size < 2*slotLen:
		return emuHeader{}, false, fmt.Errorf("zns: emu %s: the file has %d bytes, too few for its header: it was truncated (restore it; format=1 erases it and starts over)", sp.path, size)
	}
	// newEmu tells a device that lost its table from a file that is
	// no device (checkDamagedHeader).
	return emuHeader{}, false, &damagedHeader{path: sp.path, magic: magic}
}

// damagedHeader is readEmuHeader finding garbage in both slots: no slot
// valid, and the first page not zeros.
type damagedHeader struct {
	path string
	// magic: a slot still starts with the emu magic.
	magic bool
}

func (d *damagedHeader) Error() string {
	return fmt.Sprintf("zns: emu %s: neither header slot holds a valid zone table", d.path)
}

// emuHeaderZones is the zone count the fixed part of a slot names, if it
// has the magic and a plausible count.
func emuHeaderZones(b []byte) (int, bool) {
	if !bytes.HasPrefix(b, []byte(emuMagic)) || len(b) < emuHdrFixed {
		return 0, false
	}
	zones := int(binary.LittleEndian.Uint32(b[24:]))
	return zones, zones > 0 && zones <= MaxSoftZones
}

// readEmuSlot reads and decodes the slot of slotLen bytes at off in a
// file of size bytes; nil if it is not valid. A slot the file cannot
// hold is not read: its length comes from the file (up to 16 MiB), and
// nothing is allocated for bytes that are not there.
func readEmuSlot(f *os.File, size, off, slotLen int64) *emuHeader {
	if off+slotLen > size {
		return nil
	}
	b := make([]byte, slotLen)
	if _, err := f.ReadAt(b, off); err != nil {
		return nil
	}
	h, ok := decodeEmuHeader(b)
	// Flush writes sequence number s to slot s%2.
	if !ok || h.seq%2 != uint64(off/slotLen) {
		return nil
	}
	h.slot = int(off / slotLen)
	return &h
}

// decodeEmuHeader decodes a slot. b may be anything (it comes from a
// file): the fixed part is checked to be there before any field is read.
func decodeEmuHeader(b []byte) (emuHeader, bool) {
	le := binary.LittleEndian
	zones, ok := emuHeaderZones(b)
	if !ok || le.Uint32(b[8:]) != emuVersion || emuSlotLen(zones) != int64(len(b)) {
		return emuHeader{}, false
	}
	end := emuHdrFixed + emuEntryLen*zones
	if crc32.Checksum(b[:end], crc32c) != le.Uint32(b[end:]) {
		return emuHeader{}, false
	}
	h := emuHeader{seq: le.Uint64(b[16:]), conv: int(le.Uint32(b[28:])), raw: b}
	h.geo = Geometry{
		Zones:     zones,
		BlockSize: int(le.Uint32(b[12:])),
		ZoneSize:  int64(le.Uint64(b[32:])),
		ZoneCap:   int64(le.Uint64(b[40:])),
		MaxOpen:   int(le.Uint32(b[48:])),
		MaxActive: int(le.Uint32(b[52:])),
		MaxAppend: int(le.Uint32(b[56:])),
	}
	// The geometry obeys what a device string would have to; a slot is
	// written at seq's parity.
	g, err := softGeometry(spec{zones: zones, zoneSize: h.geo.ZoneSize, zoneCap: h.geo.ZoneCap,
		blockSize: h.geo.BlockSize, maxOpen: h.geo.MaxOpen, maxActive: h.geo.MaxActive,
		maxAppend: h.geo.MaxAppend, conv: h.conv})
	if err != nil || g != h.geo || h.seq == 0 || h.seq >= emuMaxSeq {
		return emuHeader{}, false
	}
	if le.Uint32(b[60:])&emuFlagSums != 0 {
		// A slot torn in its checksum block is no valid slot: the other
		// one, from a Flush that completed, is.
		if h.sums, ok = decodeEmuSums(b, end+4); !ok {
			return emuHeader{}, false
		}
	}
	return h, true
}

// The checksum block of a one-sync Flush's slot, at off (past the slot's
// CRC): a count, the records (zone, CRC-32C of its data from one
// relative offset to another), and a CRC-32C over the slot's sequence
// number and all that, so that a block left from an older slot does not
// pass.
func emuSumsCRC(b []byte, off, n int) uint32 {
	return crc32.Update(crc32.Checksum(b[16:24], crc32c), crc32c, b[off:off+4+n*emuSumLen])
}

// decodeEmuSums returns the records of the checksum block at off.
func decodeEmuSums(b []byte, off int) ([]byte, bool) {
	le := binary.LittleEndian
	if off+8 > len(b) {
		return nil, false
	}
	n := int(le.Uint32(b[off:]))
	if n > (len(b)-off-8)/emuSumLen {
		return nil, false
	}
	end := off + 4 + n*emuSumLen
	if emuSumsCRC(b, off, n) != le.Uint32(b[end:]) {
		return nil, false
	}
	return b[off+4 : end], true
}

// encodeEmuSums writes the checksum block of zones at off in slot b: a
// record for every sequential zone written since its checksum started.
// It reports false if the block does not fit.
func encodeEmuSums(b []byte, off int, zones []zoneState, start func(int) int64) bool {
	le := binary.LittleEndian
	n := 0
	for i, z := range zones {
		if z.typ == TypeConventional || z.written <= z.sumFrom {
			continue
		}
		r := off + 4 + n*emuSumLen
		if r+emuSumLen+4 > len(b) {
			return false
		}
		le.PutUint32(b[r:], uint32(i))
		le.PutUint32(b[r+4:], z.sum)
		le.PutUint64(b[r+8:], uint64(z.sumFrom-start(i)))
		le.PutUint64(b[r+16:], uint64(z.written-start(i)))
		n++
	}
	if off+8+n*emuSumLen > len(b) {
		return false
	}
	le.PutUint32(b[off:], uint32(n))
	le.PutUint32(b[off+4+n*emuSumLen:], emuSumsCRC(b, off, n))
	return true
}

// verifySums checks the data a one-sync Flush's slot claims against its
// checksums. A Flush that a power cut interrupted may have left its slot
// on the media but not all of that data: such a zone goes back to where
// the checksum started, which the Flush before it made durable (or its
// start, after a reset), and the next Flush rewrites the table. Caller
// owns the device (Open).
func (e *Emu) verifySums(sums []byte) error {
	le := binary.LittleEndian
	var buf []byte
	for r := 0; r+emuSumLen <= len(sums); r += emuSumLen {
		i, sum := int(le.Uint32(sums[r:])), le.Uint32(sums[r+4:])
		from, to := int64(le.Uint64(sums[r+8:])), int64(le.Uint64(sums[r+16:]))
		// from becomes the zone's write pointer if the data does not
		// match: it must be one (block aligned, as to, the written end).
		bs := int64(e.geo.BlockSize)
		if i >= len(e.zones) || e.zones[i].typ == TypeConventional || from < 0 || from > to || to > e.geo.ZoneCap || from%bs != 0 || to%bs != 0 {
			return fmt.Errorf("corrupt data checksum for zone %d [+%d,+%d)", i, from, to)
		}
		z, start := &e.zones[i], e.start(i)
		if z.written != start+to {
			return fmt.Errorf("data checksum for zone %d ends at +%d, its data at +%d", i, to, z.written-start)
		}
		got, err := e.fileSum(start+from, start+to, &buf)
		if err != nil {
			return fmt.Errorf("verify zone %d: %w", i, err)
		}
		if got == sum {
			continue
		}
		slog.Warn("zns: emu zone lost data its last flush claimed (a power cut during the flush, or damage at rest after it); back to what the flush before made durable",
			"path", e.f.Name(), "zone", i, "claimed", to, "kept", from)
		e.rollbacks = append(e.rollbacks, Rollback{Zone: i, From: from, To: to})
		z.written = start + from
		if z.cond != CondFull {
			z.wp = z.written
			if z.wp == start && (z.cond == CondImpOpen || z.cond == CondClosed) {
				z.cond = CondEmpty
			}
		}
		e.stale = true
	}
	e.recount()
	return nil
}

// fileSum is the CRC-32C of what the file holds for device offsets
// [from, to), read in pieces of at most 1 MiB into *buf (grown as
// needed).
func (e *Emu) fileSum(from, to int64, buf *[]byte) (uint32, error) {
	sum := uint32(0)
	for off := from; off < to; {
		n := min(to-off, 1<<20)
		if int64(len(*buf)) < n {
			*buf = make([]byte, n)
		}
		if _, err := e.f.ReadAt((*buf)[:n], e.dataOff+off); err != nil {
			return 0, err
		}
		sum = crc32.Update(sum, crc32c, (*buf)[:n])
		off += n
	}
	return sum, nil
}

// sumFailed sets, in zones (a Flush's copy of the zone table, copied at
// gen upTo, the writes it claims landed), the data checksum of each zone
// that a failed write the copy covers lies in (soft.failed) to what the
// file holds over the range the checksum covers: the running checksum
// includes data the file never took, and Open would find it wrong and
// take back the zone's appends that completed (see Emu). A zone reset
// since the copy keeps its running checksum: the file may hold its new
// data there. Caller holds flushMu, not mu.
func (e *Emu) sumFailed(zones []zoneState, upTo uint64) error {
	e.failedMu.Lock()
	var zs []int
	for _, f := range e.failed {
		z := &zones[f.zone]
		if f.gen <= upTo && z.typ != TypeConventional && f.off < z.written && f.off+f.n > z.sumFrom && !slices.Contains(zs, f.zone) {
			zs = append(zs, f.zone)
		}
	}
	e.failedMu.Unlock()
	var buf []byte
	for _, i := range zs {
		z := &zones[i]
		sum, err := e.fileSum(z.sumFrom, z.written, &buf)
		if err != nil {
			return fmt.Errorf("sum zone %d after a failed write: %w", i, err)
		}
		e.mu.Lock()
		reset := e.zones[i].sumFrom < z.written
		e.mu.Unlock()
		if !reset {
			z.sum = sum
		}
	}
	return nil
}

// pruneFailed forgets the failed writes a Flush whose copy was taken at
// gen upTo made durable (as the file holds them), or that a power cut
// took back (upTo ^0). Caller holds flushMu.
func (e *Emu) pruneFailed(upTo uint64) {
	e.failedMu.Lock()
	e.failed = slices.DeleteFunc(e.failed, func(f failedWrite) bool { return f.gen <= upTo })
	e.failedMu.Unlock()
}

// matches checks that what the device string gives agrees with the header.
func (h emuHeader) matches(sp spec) error {
	g := h.geo
	for _, c := range []struct {
		name      string
		given, is int64
	}{
		{"zone_size", sp.zoneSize, g.ZoneSize},
		{"zones", int64(sp.zones), int64(g.Zones)},
		{"zone_cap", sp.zoneCap, g.ZoneCap},
		{"block_size", int64(sp.blockSize), int64(g.BlockSize)},
		{"max_open", int64(sp.maxOpen), int64(g.MaxOpen)},
		{"max_active", int64(sp.maxActive), int64(g.MaxActive)},
		{"max_append", int64(sp.maxAppend), int64(g.MaxAppend)},
		{"conv", int64(sp.conv), int64(h.conv)},
	} {
		if c.given != 0 && c.given != c.is {
			return fmt.Errorf("%s=%d but the device was made with %d (add format=1 to start over)", c.name, c.given, c.is)
		}
	}
	return nil
}

// loadZones loads the zone entries of a decoded slot into the table.
func (e *Emu) loadZones(slot []byte) error {
	le := binary.LittleEndian
	for i := range e.zones {
		ent := slot[emuHdrFixed+emuEntryLen*i:]
		z := &e.zones[i]
		rel, cond := int64(le.Uint64(ent)), Cond(ent[8])
		unwritten := int64(le.Uint64(ent[8:]) >> 8)
		if z.typ == TypeConventional {
			continue
		}
		// Every write and finish moves a write pointer by whole blocks:
		// one between blocks is corruption, and a device that took it
		// would refuse every write to the zone (misaligned at the WP).
		bs := int64(e.geo.BlockSize)
		if rel < 0 || rel > e.geo.ZoneCap || rel%bs != 0 || unwritten%bs != 0 || !validSeqCond(cond) || !condAt(cond, rel, e.geo.ZoneCap) ||
			unwritten > rel || (unwritten > 0 && !finishedCond(cond)) {
			return fmt.Errorf("corrupt entry for zone %d (wp +%d, %d unwritten, %s)", i, rel, unwritten, cond)
		}
		z.wp, z.cond = e.start(i)+rel, cond
		z.written = z.wp - unwritten
	}
	e.recount()
	// The table never opens more zones than the limits allow (it closes
	// an implicitly open one, or refuses): more is corruption, and the
	// counts would stay over the limits, which nothing expects.
	if g := e.geo; (g.MaxOpen > 0 && e.nOpen > g.MaxOpen) || (g.MaxActive > 0 && e.nAct > g.MaxActive) {
		return fmt.Errorf("corrupt zone table: %d open and %d active zones, the limits are %d and %d", e.nOpen, e.nAct, g.MaxOpen, g.MaxActive)
	}
	return nil
}

// condAt reports whether a sequential zone of capacity zcap can be in
// condition c with its write pointer rel bytes in, as the zone rules
// leave zones: an empty one at its start, an implicitly open or a
// closed one past its start (closing an unwritten zone empties it) and
// short of its capacity (a write up to it fills the zone), an
// explicitly open one short of its capacity, a full one at it. A
// read-only or offline zone failed wherever its write pointer was.
func condAt(c Cond, rel, zcap int64) bool {
	switch c {
	case CondEmpty:
		return rel == 0
	case CondImpOpen, CondClosed:
		return rel > 0 && rel < zcap
	case CondExpOpen:
		return rel < zcap
	case CondFull:
		return rel == zcap
	}
	return true
}

// finishedCond reports whether a zone of condition c can have been
// finished with part of it unwritten: a full one, or one that failed
// (read-only, offline) after its finish.
func finishedCond(c Cond) bool {
	return c == CondFull || c == CondReadOnly || c == CondOffline
}

func validSeqCond(c Cond) bool {
	switch c {
	case CondEmpty, CondImpOpen, CondExpOpen, CondClosed, CondFull, CondReadOnly, CondOffline:
		return true
	}
	return false
}

// persist writes zones (a copy of the zone table taken after every write
// it covers completed) to the next header slot and makes it the flushed
// table, with the data written so far durable first if syncData.
//
// With oneSync it does that with one fdatasync, after the slot write: the
// slot then carries the checksums of the data it claims that the last
// Flush did not (see zoneState.sum), and Open takes back what a power cut
// during the sync kept from the media (see verifySums). Otherwise, or if
// the checksums do not fit in the slot, it syncs the data, then writes
// and syncs the slot: the slot never reaches the media before the data.
//
// Caller holds flushMu and not mu, unless nothing else can use the device
// meanwhile.
func (e *Emu) persist(zones []zoneState, syncData, oneSync bool) error {
	b := e.hdr
	oneSync = e.encodeEmuSlot(b, zones, e.seq+1, oneSync && syncData)
	if syncData && !oneSync {
		if err := e.syncData(); err != nil {
			return err
		}
	}
	if _, err := e.ring.WriteAt(e.file, b, int64((e.seq+1)%2)*e.slotLen); err != nil {
		return fmt.Errorf("write zone table: %w", err)
	}
	if err := e.fsync(); err != nil {
		return fmt.Errorf("sync zone table: %w", err)
	}
	e.flushIO.syncs++
	e.flushIO.tableWrites++
	e.seq++
	copy(e.flushed, zones)
	// The table written holds the zones taken back where they are:
	// what Open took back is settled, no longer to be reported to a
	// user who opens on this device after now (a format's, whose
	// flush erased it: TestH40eRollbackNotReportedAfterFormat).
	e.rollbacks = nil
	e.fallback = nil
	return nil
}

// encodeEmuSlot writes to b, a slot, the table of t's geometry holding
// zones, with sequence number seq; with sums, the checksum block of the
// zones' data too if it fits (emuFlagSums), which it reports.
func (t *zoneTable) encodeEmuSlot(b []byte, zones []zoneState, seq uint64, sums bool) bool {
	le := binary.LittleEndian
	clear(b)
	copy(b, emuMagic)
	g := t.geo
	le.PutUint32(b[8:], emuVersion)
	le.PutUint32(b[12:], uint32(g.BlockSize))
	le.PutUint64(b[16:], seq)
	le.PutUint32(b[24:], uint32(g.Zones))
	conv := 0
	for conv < len(zones) && zones[conv].typ == TypeConventional {
		conv++
	}
	le.PutUint32(b[28:], uint32(conv))
	le.PutUint64(b[32:], uint64(g.ZoneSize))
	le.PutUint64(b[40:], uint64(g.ZoneCap))
	le.PutUint32(b[48:], uint32(g.MaxOpen))
	le.PutUint32(b[52:], uint32(g.MaxActive))
	le.PutUint32(b[56:], uint32(g.MaxAppend))
	for i, z := range zones {
		ent := b[emuHdrFixed+emuEntryLen*i:]
		le.PutUint64(ent, uint64(z.wp-t.start(i)))
		le.PutUint64(ent[8:], uint64(z.wp-z.written)<<8|uint64(z.cond))
	}
	end := emuHdrFixed + emuEntryLen*len(zones)
	sums = sums && encodeEmuSums(b, end+4, zones, t.start)
	var flags uint32
	if t.strict {
		flags |= emuFlagStrict
	}
	if sums {
		flags |= emuFlagSums
	} else {
		clear(b[end:])
	}
	le.PutUint32(b[60:], flags)
	le.PutUint32(b[end:], crc32.Checksum(b[:end], crc32c))
	return sums
}

// Flush implements Device: completed writes and the zone table become
// durable. Writes in flight are waited for first, so the persisted write
// pointers never cover data that has not landed; the syncs run without
// the zone table's mutex, so I/O is not held up by them (see Emu).
func (e *Emu) Flush() error { return e.FlushCut(nil) }

// FlushCut implements CutFlusher: the cut is the copy of the zone table
// (snapshot). cut, if not nil,
// runs with the table's mutex still held: no write is submitted, so none
// completes, between the copy and cut.
func (e *Emu) FlushCut(cut func()) error {
	e.flushMu.Lock()
	defer e.flushMu.Unlock()
	if err := e.snapshot(cut); err != nil {
		return err
	}
	if e.testHookFlushSync != nil {
		e.testHookFlushSync()
	}
	// Only what changed since the last Flush costs I/O: the data sync
	// if a write came in between (what the table claims beyond that
	// was synced by an earlier Flush), the table if an entry it stores
	// differs. A Flush with nothing new does none.
	syncData := e.snapGen != e.flushedGen
	if !e.stale && sameTable(e.snap, e.flushed) && !rewritten(e.snap) {
		if syncData {
			err := e.zeroFailed(e.snapGen)
			if err == nil {
				err = e.syncData()
			}
			if err != nil {
				e.twoSync = true
				return fmt.Errorf("zns: emu flush: %w", err)
			}
		}
	} else {
		var err error
		if syncData {
			err = e.zeroFailed(e.snapGen)
		}
		if err == nil && syncData && !e.twoSync {
			err = e.sumFailed(e.snap, e.snapGen)
		}
		if err == nil {
			err = e.persist(e.snap, syncData, !e.twoSync)
		}
		if err != nil {
			// The checksums this Flush started afresh (snapshot) no
			// longer reach back to the flushed table: the next Flush
			// syncs twice.
			e.twoSync = true
			return fmt.Errorf("zns: emu flush: %w", err)
		}
	}
	e.pruneFailed(e.snapGen)
	e.flushedGen, e.stale, e.twoSync = e.snapGen, false, false
	e.flushIO.flushes++
	return nil
}

// Unflushed reports whether a write was accepted since the last Flush:
// a power cut now would lose it. Crash tests use it to check ordering,
// that what must be durable before a later write is.
func (e *Emu) Unflushed() bool {
	e.flushMu.Lock()
	defer e.flushMu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.gen != e.flushedGen
}

// syncData makes the data written so far durable. Caller holds flushMu.
func (e *Emu) syncData() error {
	if err := e.fsync(); err != nil {
		return fmt.Errorf("sync data: %w", err)
	}
	e.flushIO.syncs++
	return nil
}

// fsync fdatasyncs the file (data and table alike). Caller holds flushMu.
func (e *Emu) fsync() error {
	if e.testHookSync != nil {
		if err := e.testHookSync(); err != nil {
			return err
		}
	}
	return e.ring.Sync(e.file, true)
}

// sameTable reports whether two copies of the zone table agree on what a
// header slot stores of each zone: write pointer, written end, condition.
func sameTable(a, b []zoneState) bool {
	for i := range a {
		if a[i].wp != b[i].wp || a[i].written != b[i].written || a[i].cond != b[i].cond {
			return false
		}
	}
	return true
}

// rewritten reports whether a sequential zone of a table copied by
// snapshot got data since its checksum started, though its entry did not
// change: a zone reset and written again up to the same write pointer.
// The flushed slot may carry checksums of the data it had before, which
// Open would find wrong: the slot must be written again.
func rewritten(zones []zoneState) bool {
	for _, z := range zones {
		if z.typ != TypeConventional && z.written > z.sumFrom {
			return true
		}
	}
	return false
}

// snapshot copies the zone table into snap, what a Flush persists, and
// calls cut, if not nil (see FlushCut), under the table's mutex; then,
// without it, waits for the writes in flight at the copy (the table
// moved each write pointer as its write was submitted, so the copy
// claims them). Writes submitted meanwhile are not waited for: a
// Flush used to hold the mutex until every write in flight had landed,
// and every writer and reader of the device waited with it (bench lsm:
// 5.4 ms mean, p99 105 ms, a WAL's writeback held behind a table's).
// Caller holds flushMu.
func (e *Emu) snapshot(cut func()) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return fmt.Errorf("zns: flush: %w", uring.ErrClosed)
	}
	if hit(&e.faults.flushIn) {
		err := e.drain()
		e.mu.Unlock()
		if err != nil {
			return err
		}
		return fmt.Errorf("zns: emu flush: %w", syscall.EIO)
	}
	wait, err := e.endEpoch()
	if err != nil {
		e.mu.Unlock()
		return err
	}
	copy(e.snap, e.zones)
	restartSums(e.zones)
	e.snapGen = e.gen
	if cut != nil {
		cut()
	}
	e.mu.Unlock()
	// The writes the copy claims land before the sync; later ones, and
	// reads, go on meanwhile.
	wait()
	return nil
}

// Close implements Device. It does not flush (see Emu); a Flush in
// progress completes first.
func (e *Emu) Close() error {
	e.flushMu.Lock()
	defer e.flushMu.Unlock()
	err := e.closeRing()
	if e.f != nil {
		slog.Debug("zns: emu closed", "path", e.f.Name(), "flushes", e.flushIO.flushes,
			"syncs", e.flushIO.syncs, "table_writes", e.flushIO.tableWrites)
	}
	if e.df != nil {
		if cerr := e.df.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("zns: emu close: %w", cerr)
		}
		e.df = nil
	}
	if e.f != nil {
		if cerr := e.f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("zns: emu close: %w", cerr)
		}
		e.f = nil
	}
	return err
}

// Path is the file or device the emulated device lives on.
func (e *Emu) Path() string { return e.f.Name() }

// FailWrite arms a fault: the n-th Write or Append submitted from now
// (n = 1: the next one) fails. It is checked against the zone rules first
// (a rule violation is returned as usual and does not count); then nothing
// is written, the write pointer and condition stay as they were, and its
// completion reports EIO (Append: an error wrapping syscall.EIO). n <= 0
// disarms.
func (e *Emu) FailWrite(n int) {
	e.mu.Lock()
	e.faults.writeIn = max(n, 0)
	e.mu.Unlock()
}

// FailWrites makes every Write and Append submitted from now fail as
// FailWrite's does, until it is called with false: a device that stopped
// taking writes.
func (e *Emu) FailWrites(on bool) {
	e.mu.Lock()
	e.faults.writeAll = on
	e.mu.Unlock()
}

// FailRead arms a fault: the n-th valid Read submitted from now fails with
// EIO and leaves the buffer's content unspecified. n <= 0 disarms, and
// heals the ranges FailReadBad made bad.
func (e *Emu) FailRead(n int) {
	e.mu.Lock()
	e.faults.readIn = max(n, 0)
	e.faults.readBad = false
	e.faults.bad = nil
	e.mu.Unlock()
}

// FailReadBad is FailRead whose failed read finds bad media: its device
// range stays bad, and every Read that touches it from then on fails
// with EIO too (a read again, alone or block by block, as the engine
// reads a failed read before the failure is the reader's), until
// FailRead or FailReadBad is called again. n <= 0 disarms and heals.
func (e *Emu) FailReadBad(n int) {
	e.mu.Lock()
	e.faults.readIn = max(n, 0)
	e.faults.readBad = n > 0
	e.faults.bad = nil
	e.mu.Unlock()
}

// FailFlush arms a fault: the n-th Flush from now fails with EIO after
// the writes in flight complete, and makes nothing durable (a power cut
// after it loses them). n <= 0 disarms.
func (e *Emu) FailFlush(n int) {
	e.mu.Lock()
	e.faults.flushIn = max(n, 0)
	e.mu.Unlock()
}

// FailFinish arms a fault: the n-th FinishZone from now fails with EIO
// and leaves the zone as it was (open, active, its write pointer where it
// was). n <= 0 disarms.
func (e *Emu) FailFinish(n int) {
	e.mu.Lock()
	e.faults.finishIn = max(n, 0)
	e.mu.Unlock()
}

// FinishZone implements Device: the zone table's, unless FailFinish
// armed a fault for it.
func (e *Emu) FinishZone(zone int) error {
	e.mu.Lock()
	fail := hit(&e.faults.finishIn)
	e.mu.Unlock()
	if fail {
		return fmt.Errorf("zns: emu finish zone %d: %w", zone, syscall.EIO)
	}
	return e.soft.FinishZone(zone)
}

// ResetZone implements Device: the zone table's reset, durable when it
// returns, and nothing else with it. A reset durable only with the next
// Flush let a power cut before it reopen the zone at its flushed write
// pointer over whatever of the data written since the reset reached the
// media, some blocks new and some old: the newest slot's checksums cover
// only the data its Flush added, so nothing caught a zone whose old data
// predated it (TestEmuCutDuringOneSyncFlush/reset-of-data-older-than-F1),
// and a record header that landed without its data made recovery map the
// file's range to blocks that fail their checksums. A zoned drive's
// write pointer never stands above data that did not reach the media.
//
// But a drive with a volatile write cache makes its reset durable
// without flushing what the cache holds for other zones, so neither
// does this: it writes the flushed table (the last Flush's, with the
// zones reset since emptied) with this zone emptied to the next slot
// and syncs it, and every other zone's entry stays where the last Flush
// left it, its writes since as undurable as before (a power cut drops
// them, TearLastWrite can tear the last). It used to run a Flush, which
// made them all durable: that hid any ordering a caller owed a real
// drive (data it must make durable before a reset) and made a failed
// append durable ahead of what was to void it (docs/engine.md). The slot
// carries no data checksums: all it claims beyond the reset the last
// Flush synced; the sync that makes it durable makes file data durable
// too, which no table claims until a Flush does (and verifies). A zone
// the flushed table already has empty costs no I/O.
//
// A reset that fails to persist leaves the zone reset in the table, and
// the error says its reset may not survive a power cut.
func (e *Emu) ResetZone(zone int) error {
	e.flushMu.Lock()
	defer e.flushMu.Unlock()
	if err := e.soft.ResetZone(zone); err != nil {
		return err
	}
	// The zone's failed writes are gone with its data: their ranges
	// take new data now, which zeroFailed must not zero.
	e.failedMu.Lock()
	e.failed = slices.DeleteFunc(e.failed, func(f failedWrite) bool { return f.zone == zone })
	e.failedMu.Unlock()
	z := e.flushed[zone]
	if z.wp == e.start(zone) && z.written == z.wp && z.cond == CondEmpty {
		return nil
	}
	// snap is the Flush's scratch copy, free under flushMu.
	copy(e.snap, e.flushed)
	r := &e.snap[zone]
	r.wp, r.written, r.cond = e.start(zone), e.start(zone), CondEmpty
	if err := e.persist(e.snap, false, false); err != nil {
		return fmt.Errorf("zns: emu reset zone %d: make it durable: %w", zone, err)
	}
	return nil
}

// ResetAll implements Device: every sequential zone that can be reset is
// (zoneTable.ResetAll), and, as with ResetZone, the failed writes in the
// zones it reset are dropped: their ranges take new data now, which a
// Flush's zeroFailed must not zero (it did, and made the zeros durable:
// TestEmuResetAllDropsFailedWrites). Like the table's, the resets are
// durable only with the next Flush.
func (e *Emu) ResetAll() error {
	e.flushMu.Lock()
	defer e.flushMu.Unlock()
	if err := e.soft.ResetAll(); err != nil {
		return err
	}
	e.mu.Lock()
	kept := make([]bool, len(e.zones)) // zones ResetAll does not reset
	for i, z := range e.zones {
		kept[i] = z.typ == TypeConventional || z.cond == CondReadOnly || z.cond == CondOffline
	}
	e.mu.Unlock()
	e.failedMu.Lock()
	e.failed = slices.DeleteFunc(e.failed, func(f failedWrite) bool { return !kept[f.zone] })
	e.failedMu.Unlock()
	return nil
}

// PowerCut simulates losing power: it waits for a Flush in progress and
// for the writes in flight to complete (their completions report success; callers cannot tell them
// from writes that were lost), then puts the zone table back to the last
// Flush (the zones reset since then empty) with every open zone closed,
// as the device would come back. The
// device stays usable, as after a reboot; reads at or past a write pointer
// return zeros, so unflushed appends are gone. Close and reopen gives the
// same state.
func (e *Emu) PowerCut() error {
	e.flushMu.Lock()
	defer e.flushMu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.drain(); err != nil {
		return err
	}
	copy(e.zones, e.flushed)
	restartSums(e.zones)
	e.pruneFailed(math.MaxUint64)
	e.powerCycle()
	e.last = lastWrite{}
	return nil
}

// PowerCutKeeping simulates losing power on a drive whose volatile
// write cache had written some of what it held to the media, zone by
// zone: each sequential zone keeps what the last Flush made durable and
// then the first keep(zone, n) bytes of the n written to it since (a
// block multiple, at most n; 0 keeps nothing, as PowerCut), in order, as
// a zone's write pointer only moves over data on the media. Zones keep
// different amounts: what was written to one zone after another is kept
// where the other's is lost. A finish since the last Flush is lost (the
// zone comes back closed at what it kept, or full if that is all of
// it), so are a zone's read-only or offline condition since, and every
// open zone is closed, as after PowerCut. The new state is made durable
// at once: a reopen sees it too. PowerCut and TearLastWrite are the
// special cases that keep nothing, or part of one zone's last write;
// this is the state a cut leaves that neither shows.
func (e *Emu) PowerCutKeeping(keep func(zone int, n int64) int64) error {
	e.flushMu.Lock()
	defer e.flushMu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.drain(); err != nil {
		return err
	}
	now := slices.Clone(e.zones)
	copy(e.zones, e.flushed)
	bs := int64(e.geo.BlockSize)
	for i := range e.zones {
		z, c := &e.zones[i], now[i]
		if z.typ == TypeConventional || z.cond == CondFull || z.cond == CondReadOnly || z.cond == CondOffline ||
			c.cond == CondReadOnly || c.cond == CondOffline || c.written <= z.wp {
			continue
		}
		n := c.written - z.wp
		k := keep(i, n)
		if k < 0 || k > n || k%bs != 0 {
			copy(e.zones, now)
			return fmt.Errorf("zns: power cut: keep %d of the %d bytes written to zone %d since the last flush: want a block multiple within them", k, n, i)
		}
		if k == 0 {
			continue
		}
		z.wp += k
		z.written = z.wp
		z.cond = CondClosed
		if z.wp == e.start(i)+e.geo.ZoneCap {
			z.cond = CondFull
		}
	}
	return e.cutDurable("power cut")
}

// TearLastWrite simulates a power cut in the middle of the most recent
// Write or Append to a sequential zone: only its first keep bytes (a block
// multiple, less than the write's length) reached the media. Afterwards
// that zone holds everything written to it before the torn write plus
// those keep bytes, its write pointer right after them; every other zone
// is back at the last Flush, as after PowerCut. The new state is made
// durable at once, so a reopen sees it too. A Flush in progress completes
// first. It fails, changing nothing, if
// there was no such write since the last power cut, if the zone was
// written, reset or finished after it, or if a Flush has made the write
// durable since (power lost after a flush cannot tear what it flushed).
func (e *Emu) TearLastWrite(keep int64) error {
	e.flushMu.Lock()
	defer e.flushMu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.drain(); err != nil {
		return err
	}
	lw := e.last
	if !lw.valid {
		return errors.New("zns: tear: no write to tear since the last power cut")
	}
	if keep < 0 || keep >= lw.n || keep%int64(e.geo.BlockSize) != 0 {
		return fmt.Errorf("zns: tear: keep %d of a %d-byte write: want a block multiple below it", keep, lw.n)
	}
	if e.zones[lw.zone].wp != lw.off+lw.n {
		return fmt.Errorf("zns: tear: zone %d changed after its last write", lw.zone)
	}
	if e.flushed[lw.zone].wp >= lw.off+lw.n {
		return fmt.Errorf("zns: tear: the last write (zone %d) was flushed", lw.zone)
	}
	copy(e.zones, e.flushed)
	torn := &e.zones[lw.zone]
	torn.wp = lw.off + keep
	torn.written = torn.wp
	torn.cond = CondClosed
	if torn.wp == e.start(lw.zone) {
		torn.cond = CondEmpty
	}
	return e.cutDurable("tear")
}

// cutDurable ends a cut that kept more than the last Flush (e.zones
// holds what it kept): the open zones close, as in a power cycle, and
// the table is made durable at once, so that a reopen sees it too.
// Caller holds flushMu and mu: holding mu through the syncs keeps I/O
// out, as a power cut would.
func (e *Emu) cutDurable(what string) error {
	e.powerCycle()
	e.last = lastWrite{}
	restartSums(e.zones)
	// What it kept may cover a failed write's range.
	if err := e.zeroFailed(math.MaxUint64); err != nil {
		return fmt.Errorf("zns: %s: %w", what, err)
	}
	e.pruneFailed(math.MaxUint64) // the table below has no checksums
	if err := e.persist(e.zones, true, false); err != nil {
		return fmt.Errorf("zns: %s: %w", what, err)
	}
	e.flushedGen = e.gen
	return nil
}

// ZoneReadOnly moves sequential zone zone to the Read Only condition, as
// a ZNS device does when a zone's media fails: its data still reads, but
// it takes no write, reset, finish or open again (ErrReadOnly). For tests
// of what a file system does with a zone it can no longer reset.
func (e *Emu) ZoneReadOnly(zone int) error {
	return e.zoneTable.failZone(zone, CondReadOnly)
}

// ZoneOffline moves sequential zone zone to the Offline condition, as a
// ZNS device does when a zone fails whole: its data no longer reads, and
// it takes no write, reset, finish or open again (ErrReadOnly). Like
// ZoneReadOnly's, the change is in the zone table the next Flush makes
// durable. For tests of what a file system does with data it can no
// longer read.
func (e *Emu) ZoneOffline(zone int) error {
	return e.zoneTable.failZone(zone, CondOffline)
}

// FileOffset is where device offset off is stored in the backing file:
// for tests that damage the medium behind the device's back.
func (e *Emu) FileOffset(off int64) int64 { return e.dataOff + off }
