package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
)

// Metadata records live in the two metadata zones, after the superblock
// copy that starts each. A record is a 32-byte header and a payload,
// padded to whole blocks:
//
//	magic u32, version u16, kind u16, seq u64, payload length u32,
//	file system id low u32, CRC32C u32 of the header (this field zero) and
//	payload, file system id high u32.
//
// The file system id keeps records of an earlier format of the device,
// which a finished metadata zone can expose, out of recovery.
//
// Kinds: a checkpoint (the whole namespace, every extent map and the data
// zones' write pointers, as of its sequence number), one namespace
// operation, or (format 3, superPackVersion) a pack of several namespace
// operations (see encodePack). The newest valid checkpoint plus every
// operation and data record with a higher sequence number is the file
// system. A record's checksum covers the whole of it, a pack's every
// operation: a pack that fails it is not read at all, and ends the log
// as a one-operation record that fails it does.
const (
	metaMagic = 0x544d465a // "ZFMT"
	// metaVersion 2: a checkpoint's extents name their record's header.
	metaVersion = 2
	metaHdrLen  = 32

	metaCheckpoint uint16 = 1
	metaOp         uint16 = 2
	// metaPack: several operations in one record (decodePack), numbered
	// in order; the header's number is the last one's. Only a device
	// of format superPackVersion or later holds one: in an older one
	// it is damage (scanMetaHalf), since a zonefold of that format
	// reads it as a record that ends the log.
	metaPack uint16 = 3
)

// maxPackLen is the most payload bytes a pack the engine writes holds:
// one block with its header. Recovery reads a longer one all the same
// (its checksum covers it whole), but a writer keeps a pack to a block
// so that a torn write tears no more than one block's operations.
const maxPackLen = BlockSize - metaHdrLen

// packOpHdr is a packed operation's own header: its number u64 and its
// payload's length u32.
const packOpHdr = 12

// Namespace operation kinds.
const (
	opCreate    uint8 = 1
	opRemove    uint8 = 2
	opRename    uint8 = 3
	opTruncate  uint8 = 4
	opZoneReset uint8 = 5 // GC reset a data zone: scan it from its start
	// opVoid: the data records numbered in voids are never replayed:
	// their appends failed (Engine.voidFailedLocked).
	opVoid uint8 = 6
)

// maxVoids is the most record numbers one opVoid carries: its record
// fits one block, the room every half keeps for one (metaVoidRoom). A
// switch writes as many as it needs in the next half.
const maxVoids = 500

// nsOp is one logged namespace operation.
type nsOp struct {
	seq  uint64
	kind uint8
	file uint64
	size int64
	zone int
	name string
	// voids: opVoid's record numbers.
	voids []uint64
}

var errCorruptMeta = errors.New("engine: corrupt metadata record")

// maxSeq bounds record numbers and file ids on the device: no device
// lives to hand out 2^62, so one at or above it is damage, and taking it
// would wrap the counter (a crafted record of number 2^64-1 made the
// next one 0, and a file created and fsynced after it was gone after a
// crash: TestH19gRecordSeqMaxWrapsAndLosesFsyncedFile).
const maxSeq = 1 << 62

// metaRecordLen is the on-device length of a record with n payload bytes.
func metaRecordLen(n int) int64 {
	return (int64(metaHdrLen+n) + BlockSize - 1) / BlockSize * BlockSize
}

// encodeMeta lays out a record in buf, which must be metaRecordLen long.
func encodeMeta(buf []byte, fs uint64, kind uint16, seq uint64, payload []byte) {
	clear(buf)
	le := binary.LittleEndian
	le.PutUint32(buf[0:], metaMagic)
	le.PutUint16(buf[4:], metaVersion)
	le.PutUint16(buf[6:], kind)
	le.PutUint64(buf[8:], seq)
	le.PutUint32(buf[16:], uint32(len(payload)))
	le.PutUint32(buf[20:], uint32(fs))
	le.PutUint32(buf[28:], uint32(fs>>32))
	copy(buf[metaHdrLen:], payload)
	le.PutUint32(buf[24:], Checksum(buf[:metaHdrLen+len(payload)]))
}

// metaHeader is a decoded record header.
type metaHeader struct {
	fs     uint64
	kind   uint16
	seq    uint64
	length int // payload bytes
	crc    uint32
}

// decodeMetaHeader reads the header at the start of buf (one block).
func decodeMetaHeader(buf []byte) (metaHeader, error) {
	var h metaHeader
	if len(buf) < metaHdrLen {
		return h, ErrNoRecord
	}
	le := binary.LittleEndian
	if le.Uint32(buf[0:]) != metaMagic {
		return h, ErrNoRecord
	}
	if le.Uint16(buf[4:]) != metaVersion {
		return h, fmt.Errorf("%w: version %d", errCorruptMeta, le.Uint16(buf[4:]))
	}
	h.kind = le.Uint16(buf[6:])
	h.seq = le.Uint64(buf[8:])
	h.length = int(le.Uint32(buf[16:]))
	h.crc = le.Uint32(buf[24:])
	h.fs = uint64(le.Uint32(buf[20:])) | uint64(le.Uint32(buf[28:]))<<32
	if h.kind != metaCheckpoint && h.kind != metaOp && h.kind != metaPack {
		return h, fmt.Errorf("%w: kind %d", errCorruptMeta, h.kind)
	}
	if h.seq >= maxSeq {
		return h, fmt.Errorf("%w: number %d", errCorruptMeta, h.seq)
	}
	return h, nil
}

// verifyMeta checks a whole record (header block and payload).
func verifyMeta(rec []byte, h metaHeader) ([]byte, error) {
	if len(rec) < metaHdrLen+h.length {
		return nil, fmt.Errorf("%w: short record", errCorruptMeta)
	}
	le := binary.LittleEndian
	saved := le.Uint32(rec[24:])
	le.PutUint32(rec[24:], 0)
	sum := Checksum(rec[:metaHdrLen+h.length])
	le.PutUint32(rec[24:], saved)
	if sum != h.crc {
		return nil, fmt.Errorf("%w: checksum", errCorruptMeta)
	}
	return rec[metaHdrLen : metaHdrLen+h.length], nil
}

// enc appends little-endian values to a byte slice.
type enc struct{ b []byte }

func (e *enc) u8(v uint8)   { e.b = append(e.b, v) }
func (e *enc) u32(v uint32) { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *enc) u64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *enc) str(s string) { e.u32(uint32(len(s))); e.b = append(e.b, s...) }

// dec reads what enc wrote; the first error sticks and later reads
// return zeros, so callers check err once at the end.
type dec struct {
	b   []byte
	err error
}

func (d *dec) need(n int) bool {
	if d.err != nil {
		return false
	}
	if n < 0 || len(d.b) < n {
		d.err = fmt.Errorf("%w: truncated payload", errCorruptMeta)
		return false
	}
	return true
}

func (d *dec) u8() uint8 {
	if !d.need(1) {
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *dec) u32() uint32 {
	if !d.need(4) {
		return 0
	}
	v := binary.LittleEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *dec) u64() uint64 {
	if !d.need(8) {
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *dec) str() string {
	n := int(d.u32())
	if n > MaxNameLen || !d.need(n) {
		if d.err == nil {
			d.err = fmt.Errorf("%w: name of %d bytes", errCorruptMeta, n)
		}
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func encodeOp(op nsOp) []byte {
	var e enc
	e.u8(op.kind)
	e.u64(op.file)
	e.u64(uint64(op.size))
	e.u32(uint32(op.zone))
	e.str(op.name)
	if op.kind == opVoid {
		e.u32(uint32(len(op.voids)))
		for _, s := range op.voids {
			e.u64(s)
		}
	}
	return e.b
}

func decodeOp(seq uint64, p []byte) (nsOp, error) {
	d := dec{b: p}
	op := nsOp{seq: seq, kind: d.u8(), file: d.u64(), size: int64(d.u64()), zone: int(d.u32()), name: d.str()}
	if op.kind == opVoid {
		n := int(d.u32())
		if n > maxVoids {
			return op, fmt.Errorf("%w: %d voided records", errCorruptMeta, n)
		}
		for range n {
			op.voids = append(op.voids, d.u64())
		}
	}
	if d.err != nil {
		return op, d.err
	}
	// A size past MaxFileSize would reach a checkpoint that
	// decodeCheckpoint refuses: after one Open and Close, neither half
	// held a checkpoint recovery takes
	// (TestH19gTruncateOpPastMaxFileSizeBricksDevice).
	if op.kind < opCreate || op.kind > opVoid || op.size < 0 || op.size > MaxFileSize || op.file >= maxSeq {
		return op, fmt.Errorf("%w: operation %d", errCorruptMeta, op.kind)
	}
	for _, v := range op.voids {
		if v >= maxSeq {
			return op, fmt.Errorf("%w: voided record %d", errCorruptMeta, v)
		}
	}
	return op, nil
}

// encodePack is the payload of a pack (metaPack) of ops, numbered (seq
// set) in increasing order: the count u32, then for each operation its
// number u64, its payload's length u32 and the payload (encodeOp). The
// pack's header carries the last operation's number.
func encodePack(ops []nsOp) []byte {
	var e enc
	e.u32(uint32(len(ops)))
	for _, op := range ops {
		p := encodeOp(op)
		e.u64(op.seq)
		e.u32(uint32(len(p)))
		e.b = append(e.b, p...)
	}
	return e.b
}

// packLen is the bytes op adds to a pack's payload.
func packLen(op nsOp) int { return packOpHdr + len(encodeOp(op)) }

// decodePack parses a pack's payload whose header carries number seq.
// Anything but at least one operation, each of which decodes (decodeOp,
// its payload wholly read), numbered in increasing order up to seq, and
// nothing after the last, is errCorruptMeta: a checksum-valid pack that
// does not decode is damage, as a one-operation record is, and none of
// its operations is replayed.
func decodePack(seq uint64, p []byte) ([]nsOp, error) {
	d := dec{b: p}
	n := int(d.u32())
	if d.err == nil && (n == 0 || n > len(p)/packOpHdr) {
		return nil, fmt.Errorf("%w: pack of %d operations in %d bytes", errCorruptMeta, n, len(p))
	}
	ops := make([]nsOp, 0, n)
	var prev uint64
	for range n {
		s, l := d.u64(), int(d.u32())
		if !d.need(l) {
			break
		}
		body := d.b[:l]
		d.b = d.b[l:]
		if s <= prev || s > seq {
			return nil, fmt.Errorf("%w: packed operation %d after %d, in a pack numbered %d", errCorruptMeta, s, prev, seq)
		}
		prev = s
		op, err := decodeOp(s, body)
		if err != nil {
			return nil, err
		}
		if l != len(encodeOp(op)) {
			return nil, fmt.Errorf("%w: packed operation %d of %d bytes reads as %d", errCorruptMeta, s, l, len(encodeOp(op)))
		}
		ops = append(ops, op)
	}
	if d.err != nil {
		return nil, d.err
	}
	if len(d.b) != 0 || prev != seq {
		return nil, fmt.Errorf("%w: pack numbered %d ends with operation %d and %d bytes after it", errCorruptMeta, seq, prev, len(d.b))
	}
	return ops, nil
}

// checkpoint is the decoded form of a checkpoint record.
type checkpointState struct {
	seq    uint64
	nextID uint64
	files  []ckptFile
	// zoneWP maps a data zone to the bytes allocated in it at the
	// checkpoint: recovery scans for newer records from there.
	zoneWP map[int]int64
	// owed are the undo states (file.undo) the snapshot saw owing
	// their commits, not encoded: the checkpoint, once durable, saves
	// each such file whole and ends its state (endOwed).
	owed []owedUndo
}

// owedUndo is a file and the undo state it owed at a snapshot.
type owedUndo struct {
	f *file
	u *undoState
}

// ckptExtSize is an extent's bytes in a checkpoint: file offset,
// length, device offset, version and record header offset.
const ckptExtSize = 40

type ckptFile struct {
	id   uint64
	name string
	size int64
	ext  []extent
}

func encodeCheckpoint(c *checkpointState) []byte {
	var e enc
	e.u64(c.seq)
	e.u64(c.nextID)
	e.u32(uint32(len(c.files)))
	for _, f := range c.files {
		e.u64(f.id)
		e.str(f.name)
		e.u64(uint64(f.size))
		e.u32(uint32(len(f.ext)))
		for _, x := range f.ext {
			e.u64(uint64(x.off))
			e.u64(uint64(x.len))
			e.u64(uint64(x.dev))
			e.u64(x.ver)
			e.u64(uint64(x.hdr))
		}
	}
	zones := make([]int, 0, len(c.zoneWP))
	for z := range c.zoneWP {
		zones = append(zones, z)
	}
	sort.Ints(zones)
	e.u32(uint32(len(zones)))
	for _, z := range zones {
		e.u32(uint32(z))
		e.u64(uint64(c.zoneWP[z]))
	}
	return e.b
}

func decodeCheckpoint(p []byte) (*checkpointState, error) {
	d := dec{b: p}
	c := &checkpointState{seq: d.u64(), nextID: d.u64(), zoneWP: map[int]int64{}}
	// nextID is at most maxSeq: a file of id maxSeq-1 leaves no id to
	// hand out (Create refuses), and its checkpoint must still decode.
	if c.seq >= maxSeq || c.nextID > maxSeq {
		d.err = fmt.Errorf("%w: checkpoint number %d, next file id %d", errCorruptMeta, c.seq, c.nextID)
	}
	nf := d.u32()
	for i := uint32(0); i < nf && d.err == nil; i++ {
		f := ckptFile{id: d.u64(), name: d.str(), size: int64(d.u64())}
		ne := d.u32()
		if !d.need(int(ne) * ckptExtSize) {
			break
		}
		// Extents are decoded as they stand: one that no record can
		// hold is damage recovery leaves out (loadCheckpoint,
		// Engine.extentFault), not a reason to refuse the rest.
		f.ext = make([]extent, ne)
		for j := range f.ext {
			f.ext[j] = extent{off: int64(d.u64()), len: int64(d.u64()), dev: int64(d.u64()), ver: d.u64(), hdr: int64(d.u64())}
		}
		if f.size < 0 || f.size > MaxFileSize || f.id >= maxSeq {
			d.err = fmt.Errorf("%w: file id %d, size %d", errCorruptMeta, f.id, f.size)
		}
		c.files = append(c.files, f)
	}
	nz := d.u32()
	for i := uint32(0); i < nz && d.err == nil; i++ {
		c.zoneWP[int(d.u32())] = int64(d.u64())
	}
	if d.err != nil {
		return nil, d.err
	}
	return c, nil
}
