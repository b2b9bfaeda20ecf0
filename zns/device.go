// Package zns owns zoned devices: one Device interface, its backends (Linux
// zoned block devices, NVMe passthrough, an emulated zoned device on any
// file, and a storage-less null device), and the zone rules they all obey.
//
// Invariants (the contract every backend passes in the conformance suite):
//
//   - A sequential zone is written only at its write pointer; the write
//     pointer advances by every byte written; a write elsewhere fails with
//     ErrNotAtWP and changes nothing.
//   - A zone accepts at most its capacity (which may be less than its size);
//     a write past it fails with ErrZoneFull or ErrBeyondCapacity.
//   - Conditions move as in ZBC/ZNS: empty -> implicitly open (by a write) or
//     explicitly open (by OpenZone) -> closed (by CloseZone) -> full (by
//     reaching capacity, or by FinishZone) -> empty (by ResetZone).
//   - At most MaxOpen zones are open and at most MaxActive are open or
//     closed (0: no limit); an operation that would exceed a limit fails with
//     ErrTooManyOpen or ErrTooManyActive and changes nothing.
//   - All offsets and lengths are bytes, multiples of the logical block size.
//     A Read stays inside one zone (ErrOutOfRange otherwise).
//   - Rule violations the backend can see are returned by the call and
//     change nothing. What only the device can decide (a real device's
//     open/active limits, media errors) arrives in the completion: Append's
//     error, or a Write's Result, which CompletionErr maps to the same
//     typed errors. Write and Read Results report the bytes the caller
//     asked for on success, on every backend.
//   - Append is the engine's write path on every backend: the device (or
//     the backend, for devices without native append) chooses the offset and
//     reports it. Backends without native append serialize each zone's
//     appends, so at most one write per zone is in flight.
//   - No append lands behind a failed write. Once a write to a zone fails
//     on a real device (the zone may hold a torn write), every append
//     queued behind it fails with ErrZoneFailed (an EIO), and so does every later
//     append until the zone is reset or finished; on NVMe, appends that
//     were in flight with it and complete after it are reported failed too
//     (their records may lie past the torn one). The caller writes that
//     data elsewhere and finishes the zone. Writes name their offset and
//     are checked against the write pointer as always.
//
// Lock order: an Emu takes its flushMu before its zone table's mu (see
// Emu); a Flush holds only flushMu while it syncs, so I/O goes on. A
// null device with zone_serial queues a write under the zone table's mu
// and then its serialZones' mu; completions and the dispatcher take the
// serialZones' mu alone.
package zns

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/zonefold/zonefold/uring"
)

// Type is a zone's type.
type Type uint8

const (
	TypeConventional Type = 1 // writable anywhere
	TypeSeqRequired  Type = 2 // sequential write required
	TypeSeqPreferred Type = 3 // sequential write preferred
)

func (t Type) String() string {
	switch t {
	case TypeConventional:
		return "conventional"
	case TypeSeqRequired:
		return "seq-write-required"
	case TypeSeqPreferred:
		return "seq-write-preferred"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Cond is a zone's condition; the values are those of BLK_ZONE_COND_*.
type Cond uint8

const (
	CondNotWP    Cond = 0x0
	CondEmpty    Cond = 0x1
	CondImpOpen  Cond = 0x2
	CondExpOpen  Cond = 0x3
	CondClosed   Cond = 0x4
	CondReadOnly Cond = 0xd
	CondFull     Cond = 0xe
	CondOffline  Cond = 0xf
)

func (c Cond) String() string {
	switch c {
	case CondNotWP:
		return "not-wp"
	case CondEmpty:
		return "empty"
	case CondImpOpen:
		return "implicit-open"
	case CondExpOpen:
		return "explicit-open"
	case CondClosed:
		return "closed"
	case CondReadOnly:
		return "read-only"
	case CondFull:
		return "full"
	case CondOffline:
		return "offline"
	}
	return fmt.Sprintf("cond(%#x)", uint8(c))
}

// Open reports whether the condition counts against the open limit.
func (c Cond) Open() bool { return c == CondImpOpen || c == CondExpOpen }

// Active reports whether the condition counts against the active limit.
func (c Cond) Active() bool { return c.Open() || c == CondClosed }

// Zone is one zone as reported by the device, in bytes.
type Zone struct {
	Start int64 // first byte of the zone
	Len   int64 // zone size
	Cap   int64 // writable bytes from Start (Cap <= Len)
	WP    int64 // write pointer, absolute; Start+Cap when full
	Type  Type
	Cond  Cond
}

// Geometry describes a device.
type Geometry struct {
	Zones     int   // number of zones
	ZoneSize  int64 // bytes per zone (a power of two on Linux devices)
	ZoneCap   int64 // writable bytes per sequential zone
	BlockSize int   // logical block size in bytes
	MaxOpen   int   // max open zones, 0 = no limit
	MaxActive int   // max open+closed zones, 0 = no limit
	// MaxAppend is the largest single Append or Write in bytes.
	MaxAppend int
	// NativeAppend is true when the device itself picks the append offset
	// (NVMe Zone Append); many appends per zone may then be in flight.
	NativeAppend bool
}

// Capacity is the writable bytes of the whole device.
func (g Geometry) Capacity() int64 { return int64(g.Zones) * g.ZoneCap }

// AppendCompletion receives the outcome of an Append: the absolute byte
// offset the data landed at, or an error. It is called once, possibly on
// the ring's reaper goroutine, and must not block.
type AppendCompletion interface {
	Appended(off int64, err error)
}

// Device is a zoned device. Data operations are asynchronous through the
// device's ring, so callers can Plug and batch them; zone management and
// Flush are synchronous.
type Device interface {
	Geometry() Geometry
	// Ring is the io_uring the device submits through: Plug/Unplug it to
	// batch a set of operations into one kernel entry.
	Ring() *uring.Ring

	// Report fills zones with the state of zones first, first+1, ... and
	// returns how many it filled.
	Report(first int, zones []Zone) (int, error)
	ResetZone(zone int) error
	OpenZone(zone int) error
	CloseZone(zone int) error
	FinishZone(zone int) error
	// ResetAll resets every sequential zone.
	ResetAll() error

	// Append writes bufs, in order, at zone's write pointer. The total
	// length must be a non-zero multiple of the block size and at most
	// MaxAppend. The bytes of bufs must not change until the completion
	// (of Write too): the device may read them any time until then, and
	// the emu checksums them at submission (a write whose bytes changed
	// meanwhile may be taken back at the next Open, see Emu).
	Append(zone int, bufs [][]byte, c AppendCompletion) error
	// Write writes bufs at off, which must be zone's write pointer (any
	// offset in a conventional zone). Callers must not have two writes to
	// one zone in flight unless NativeAppend; Append is the engine's path.
	Write(zone int, off int64, bufs [][]byte, c uring.Completion) error
	// Read reads len(buf) bytes at the absolute offset off. Bytes at or
	// past a zone's write pointer read as zeros.
	Read(off int64, buf []byte, c uring.Completion) error
	// Flush makes every completed write durable.
	Flush() error
	Close() error
}

// Rollback is a zone a device took back when it opened: the data its
// last flush claimed in bytes [From, To) of the zone (relative to its
// start) did not read back as that flush wrote it, and the zone's write
// pointer is back at From, where the flush before left it.
type Rollback struct {
	Zone     int
	From, To int64
}

// RollbackReporter is a Device that can take zones back to an older
// flush when it opens (the emulator: see Emu), and says which it did,
// until it writes its zone table again (a flush, a reset: then what it
// took back is settled, and erased by a format).
// Such a rollback is what a power cut during that flush leaves (the
// flush never returned, so nothing it claimed was acknowledged), but
// also what damage at rest to the flushed data leaves, after a flush
// that returned: acknowledged data lost. The device cannot tell the
// two apart, so its user reports it (the engine: Open's log, fsck).
type RollbackReporter interface {
	Rollbacks() []Rollback
}

// SlotFallback is a device (the emulator) that opened from one of its
// two zone table copies (header slots) because the other failed its
// checksum. Which of the two was the newer, the damaged slot no longer
// says. Damage to the older copy loses nothing; a power cut tearing the
// slot write of a Flush or reset loses nothing acknowledged either (it
// never returned); but damage at rest to the newest copy, after the
// Flush that wrote it returned, leaves the writes that Flush made
// durable past the opened table's write pointers, unreadable, and the
// next write to such a zone destroys them for good (an acknowledged
// file rename, say, back to what the older table had). Only a slot
// that lost even the emu magic (Overwritten) is surely not torn; for
// one that keeps it, no byte tells the torn slot from the damaged one,
// and the lost slot's checksums of the data it claimed are gone with
// it. What tells a lost table that
// claimed writes is DataPast: a Flush's slot claims only writes past
// the slot before's write pointers (a reset writes its own slot), and
// what it claimed reached the media before the slot could, so a zone
// whose block at the opened table's write pointer reads as zeros got
// nothing durable there (nor, for an engine, whose every write starts
// with a record header, anything at all).
type SlotFallback struct {
	DamagedSlot, OpenedSlot int
	Seq                     uint64 // the opened slot's sequence number
	// DataPast lists the zones (neither full nor finished) whose block
	// at the opened table's write pointer is not zeros: data a lost
	// newer table claimed, or writes no Flush made durable (a crash
	// left them in the file), or what the zone held before its last
	// reset (a reset punches nothing: reads past the write pointer
	// return zeros), so on a device whose zones were reset and written
	// short of where they were it is seldom empty, whichever slot was
	// lost. Empty, no write past the opened table is lost (at most a
	// zone reset or finish it recorded).
	DataPast []int
	// Overwritten: the damaged slot does not start with the emu magic.
	// A crash tearing the slot's write leaves its first block (the
	// magic, the sequence number) old or new, both with the magic: a
	// kill -9 tears a write between pages, written in order, and a
	// drive's 4 KiB block is written whole. So a slot without it was
	// written over at rest (zeroed, dd), not torn, and its Flush had
	// returned (a new device's table is written to both slots).
	Overwritten bool
}

func (f SlotFallback) String() string {
	s := fmt.Sprintf("one copy of the zone table (header slot %d) is damaged, and the device opened from the other (slot %d, sequence number %d)",
		f.DamagedSlot, f.OpenedSlot, f.Seq)
	if len(f.DataPast) == 0 {
		return s + "; no zone holds data past its write pointers, so no write a newer table claimed is lost (at most a zone reset or finish it recorded)"
	}
	return s + fmt.Sprintf("; zones %v hold data past its write pointers: the damaged copy may have been the newer, claiming that data (else it is writes no flush made durable, or what the zone held before its last reset, which erases nothing). "+
		"A power cut during the flush that wrote it (which never returned) loses nothing acknowledged; damage to it after that flush returned loses what the flush made durable there (fsynced file data, logged operations such as renames), and the next write to those zones destroys it for good", f.DataPast)
}

// SlotFallbackReporter is a Device that can open from an older copy of
// its zone table (see SlotFallback), and says so until it writes its
// table again (which repairs the damaged copy).
type SlotFallbackReporter interface {
	SlotFallback() (SlotFallback, bool)
}

// CutFlusher is a Device whose Flush covers every write that completed
// before a point inside it, its cut, rather than only those before the
// call: the emulator's Flush copies its zone table, waits for the writes
// in flight at the copy, and persists that copy. A caller whose
// write completed while a flush had not reached its cut yet is served by
// that flush: it need not wait for it to end and run another (the
// engine's group commit, which a WAL's sync otherwise waits on twice).
type CutFlusher interface {
	// FlushCut is Flush, calling cut once it has taken its cut: a write
	// completing after cut starts is not covered. cut runs at most once,
	// with the device's locks held (it must not call the device), and
	// not at all if the Flush fails before its cut.
	FlushCut(cut func()) error
}

// Zone-rule violations. Backends wrap them with the zone and offset.
var (
	ErrNotAtWP        = errors.New("zns: write not at the write pointer")
	ErrZoneFull       = errors.New("zns: zone is full")
	ErrBeyondCapacity = errors.New("zns: write crosses the zone capacity")
	ErrTooManyOpen    = errors.New("zns: too many open zones")
	ErrTooManyActive  = errors.New("zns: too many active zones")
	ErrOutOfRange     = errors.New("zns: out of range")
	ErrMisaligned     = errors.New("zns: offset or length not block aligned")
	ErrTooLarge       = errors.New("zns: I/O larger than the max append size")
	ErrConventional   = errors.New("zns: operation not valid on a conventional zone")
	ErrReadOnly       = errors.New("zns: zone is read-only or offline")
	ErrNotZoned       = errors.New("zns: device is not zoned")
	// ErrBadTransition is a zone management request that the zone's
	// condition does not allow (closing an empty or a full zone).
	ErrBadTransition = errors.New("zns: invalid zone condition transition")
	// ErrZoneFailed is an append refused because an earlier write to the
	// zone failed: the zone takes no more appends until reset or finish.
	// It is an I/O error (errors.Is(err, syscall.EIO)), as the write it
	// follows was: the device failed the data, not the caller's request,
	// and users of a device with bad blocks are told EIO for both
	// (TestThrottledWriterOnFailedZonesGetsEIO in engine).
	ErrZoneFailed = fmt.Errorf("zns: an earlier write to the zone failed: %w", syscall.EIO)
)
