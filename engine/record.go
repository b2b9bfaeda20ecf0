package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// BlockSize is the engine's unit of allocation and of record headers.
const BlockSize = 4096

// Record kinds.
const (
	// KindData is a client write: every extent's version is the record's
	// sequence number.
	KindData uint16 = 1
	// KindGC is data relocated by the garbage collector: extents keep the
	// version of the write that produced them, so that replaying a
	// relocation never overrides a newer client write.
	KindGC uint16 = 2
	// KindPad fills a zone tail too short for a record: no extents, and
	// its data, if any, is zeros.
	KindPad uint16 = 3
)

const (
	recordMagic = 0x4b52465a // "ZFRK"
	// recordVersion 2: a CRC32C per data block in the header, where
	// version 1 had one CRC32C of all the data.
	recordVersion = 2
	// recHdrFixed is the fixed part of a header; extents follow it, then
	// the data blocks' checksums.
	recHdrFixed = 48
	recExtSize  = 24
	recSumSize  = 4
	recFSOffset = BlockSize - 16
	// MaxRecordBlocks is the most data blocks one record carries: the
	// header holds a checksum for each.
	MaxRecordBlocks = 256
	// MaxRecordExtents is how many extents one header describes beside
	// MaxRecordBlocks checksums.
	MaxRecordExtents = (recFSOffset - recHdrFixed - MaxRecordBlocks*recSumSize) / recExtSize
	// SizeUnknown is the file size a pad record carries, and a data
	// record of a file whose failed truncate's undo owes its commit
	// (file.recordSize): recovery holds such a record's extents back
	// until a later record or truncate of its file sets a size, and
	// drops them if none does (Engine.replayRecord). Other data and GC
	// records carry the file's size when they were built: after GC
	// resets the zones of a file's data records, its GC records may be
	// all that recovery finds of it.
	SizeUnknown = ^uint64(0)
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum is CRC32C, as every on-device structure uses.
func Checksum(p []byte) uint32 { return crc32.Checksum(p, castagnoli) }

// RecordExtent is one run of a file's bytes carried by a record; the data
// of a record is its extents' bytes back to back, in header order.
type RecordExtent struct {
	FileOff int64
	Len     uint32
	// Version is the sequence number of the write that produced the
	// bytes: the record's own for KindData.
	Version uint64
}

// RecordHeader is the first block of every append: it makes the record
// self-describing, so that GC and recovery need no other index.
//
// Layout (little endian): magic u32, version u16, kind u16, seq u64,
// file u64, size u64, extent count u32, data length u32, reserved u64,
// then extents of {file offset u64, version u64, length u32, reserved
// u32}, then the CRC32C of each data block (none for a pad, whose data
// is zeros), zero padding, the file system id u64 at byte 4080, and the
// CRC32C of the first 4092 bytes.
type RecordHeader struct {
	// FS is the id of the file system that wrote the record (from the
	// superblock's UUID): a record left over from an earlier format of
	// the device is not one of ours.
	FS      uint64
	Kind    uint16
	Seq     uint64
	File    uint64
	Size    uint64 // file size when the record was built, or SizeUnknown
	DataLen uint32
	Extents []RecordExtent
	// Sums is the CRC32C of each BlockSize block of the data, in order
	// (empty for a pad). A GC record copies the sums of the blocks it
	// moves, so that a block that went bad stays detectably bad.
	Sums []uint32
}

// Errors from DecodeHeader.
var (
	ErrNoRecord      = errors.New("engine: no record here")
	ErrCorruptRecord = errors.New("engine: corrupt record header")
)

// inRange reports whether h's numbers and size are ones the engine
// writes (see maxSeq; a size past MaxFileSize reached a checkpoint its
// decoder refuses: TestH19gRecordSizePastMaxFileSizeBricksDevice).
// EncodeHeader and DecodeHeader hold headers to it alike.
func (h *RecordHeader) inRange() bool {
	return h.Seq < maxSeq && h.File < maxSeq && (h.Size == SizeUnknown || h.Size <= MaxFileSize)
}

// valid reports whether e covers whole blocks at a file offset, with a
// version the engine hands out.
func (e RecordExtent) valid() bool {
	return e.FileOff >= 0 && e.Len != 0 && e.FileOff%BlockSize == 0 && e.Len%BlockSize == 0 && e.Version < maxSeq
}

// EncodeHeader writes h into the BlockSize bytes of buf.
func EncodeHeader(h *RecordHeader, buf []byte) error {
	if len(buf) < BlockSize {
		return fmt.Errorf("engine: header buffer of %d bytes", len(buf))
	}
	if (len(h.Extents) == 0) != (h.Kind == KindPad) || len(h.Extents) > MaxRecordExtents {
		return fmt.Errorf("engine: record with %d extents (1..%d)", len(h.Extents), MaxRecordExtents)
	}
	if h.DataLen%BlockSize != 0 {
		return fmt.Errorf("engine: record of %d data bytes: not whole blocks", h.DataLen)
	}
	// Nothing DecodeHeader refuses is written: recovery would take the
	// header for a torn one and end its zone's scan there, losing the
	// records behind it. GC copies what a checkpoint maps, and a damaged
	// or crafted one could map anything
	// (TestH19hGCRecordOfCraftedExtentHidesIntactFile).
	if !h.inRange() {
		return fmt.Errorf("engine: record %d of file %d, size %d: out of range", h.Seq, h.File, h.Size)
	}
	for i, e := range h.Extents {
		if !e.valid() {
			return fmt.Errorf("engine: record extent %d at %d+%d of version %d: not whole blocks, or out of range", i, e.FileOff, e.Len, e.Version)
		}
	}
	if h.Kind != KindPad && (len(h.Sums) != int(h.DataLen/BlockSize) || len(h.Sums) > MaxRecordBlocks) {
		return fmt.Errorf("engine: record of %d data bytes with %d block checksums (at most %d blocks)", h.DataLen, len(h.Sums), MaxRecordBlocks)
	}
	buf = buf[:BlockSize]
	clear(buf)
	le := binary.LittleEndian
	le.PutUint32(buf[0:], recordMagic)
	le.PutUint16(buf[4:], recordVersion)
	le.PutUint16(buf[6:], h.Kind)
	le.PutUint64(buf[8:], h.Seq)
	le.PutUint64(buf[16:], h.File)
	le.PutUint64(buf[24:], h.Size)
	le.PutUint32(buf[32:], uint32(len(h.Extents)))
	le.PutUint32(buf[36:], h.DataLen)
	var total uint64
	for i, e := range h.Extents {
		p := buf[recHdrFixed+i*recExtSize:]
		le.PutUint64(p[0:], uint64(e.FileOff))
		le.PutUint64(p[8:], e.Version)
		le.PutUint32(p[16:], e.Len)
		total += uint64(e.Len)
	}
	if total != uint64(h.DataLen) && h.Kind != KindPad {
		return fmt.Errorf("engine: extents carry %d bytes, header says %d", total, h.DataLen)
	}
	if h.Kind != KindPad {
		sums := buf[recHdrFixed+len(h.Extents)*recExtSize:]
		for i, s := range h.Sums {
			le.PutUint32(sums[i*recSumSize:], s)
		}
	}
	le.PutUint64(buf[recFSOffset:], h.FS)
	le.PutUint32(buf[BlockSize-4:], Checksum(buf[:BlockSize-4]))
	return nil
}

// DecodeHeader parses the header block in buf into h, reusing the storage
// of h.Extents and h.Sums. A block that does not start with the magic is
// ErrNoRecord (an unwritten or foreign block); one that does but fails
// its checks is ErrCorruptRecord.
func DecodeHeader(buf []byte, h *RecordHeader) error {
	if len(buf) < BlockSize {
		return fmt.Errorf("%w: %d bytes", ErrNoRecord, len(buf))
	}
	le := binary.LittleEndian
	if le.Uint32(buf[0:]) != recordMagic {
		return ErrNoRecord
	}
	if got, want := Checksum(buf[:BlockSize-4]), le.Uint32(buf[BlockSize-4:]); got != want {
		return fmt.Errorf("%w: checksum %#x, want %#x", ErrCorruptRecord, got, want)
	}
	if v := le.Uint16(buf[4:]); v != recordVersion {
		return fmt.Errorf("%w: version %d", ErrCorruptRecord, v)
	}
	h.FS = le.Uint64(buf[recFSOffset:])
	h.Kind = le.Uint16(buf[6:])
	if h.Kind != KindData && h.Kind != KindGC && h.Kind != KindPad {
		return fmt.Errorf("%w: kind %d", ErrCorruptRecord, h.Kind)
	}
	h.Seq = le.Uint64(buf[8:])
	h.File = le.Uint64(buf[16:])
	h.Size = le.Uint64(buf[24:])
	if !h.inRange() {
		return fmt.Errorf("%w: record %d of file %d, size %d", ErrCorruptRecord, h.Seq, h.File, h.Size)
	}
	n := le.Uint32(buf[32:])
	h.DataLen = le.Uint32(buf[36:])
	if (n == 0) != (h.Kind == KindPad) || n > MaxRecordExtents {
		return fmt.Errorf("%w: %d extents", ErrCorruptRecord, n)
	}
	if h.DataLen%BlockSize != 0 || (h.Kind != KindPad && h.DataLen > MaxRecordBlocks*BlockSize) {
		return fmt.Errorf("%w: %d data bytes", ErrCorruptRecord, h.DataLen)
	}
	h.Extents = h.Extents[:0]
	var total uint64
	for i := range int(n) {
		p := buf[recHdrFixed+i*recExtSize:]
		e := RecordExtent{FileOff: int64(le.Uint64(p[0:])), Version: le.Uint64(p[8:]), Len: le.Uint32(p[16:])}
		if !e.valid() {
			return fmt.Errorf("%w: extent %d at %d+%d", ErrCorruptRecord, i, e.FileOff, e.Len)
		}
		total += uint64(e.Len)
		h.Extents = append(h.Extents, e)
	}
	if total != uint64(h.DataLen) && h.Kind != KindPad {
		return fmt.Errorf("%w: extents carry %d bytes, header says %d", ErrCorruptRecord, total, h.DataLen)
	}
	h.Sums = h.Sums[:0]
	if h.Kind != KindPad {
		sums := buf[recHdrFixed+int(n)*recExtSize:]
		for i := range int(h.DataLen / BlockSize) {
			h.Sums = append(h.Sums, le.Uint32(sums[i*recSumSize:]))
		}
	}
	return nil
}

// appendSums appends the CRC32C of each BlockSize block of p (whole
// blocks) to sums.
func appendSums(sums []uint32, p []byte) []uint32 {
	for len(p) >= BlockSize {
		sums = append(sums, Checksum(p[:BlockSize]))
		p = p[BlockSize:]
	}
	return sums
}

// badBlock is the index of the first block of data whose CRC32C differs
// from sums, or -1 when all hold.
func badBlock(data []byte, sums []uint32) int {
	for i := 0; i*BlockSize < len(data); i++ {
		if i >= len(sums) || Checksum(data[i*BlockSize:(i+1)*BlockSize]) != sums[i] {
			return i
		}
	}
	return -1
}
