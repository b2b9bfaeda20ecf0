package server

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"syscall"

	"github.com/zonefold/zonefold/engine"
)

// Wire format: see docs/protocol.md, which this file implements.

// Protocol identity.
const (
	Magic = 0x444c465a // "ZFLD" in little endian
	// VersionFraming carries requests and replies as socket messages.
	VersionFraming = 1
	// VersionRings carries them in a submission and a completion ring in
	// the shared region; the socket only rings doorbells.
	VersionRings = 2
	// Version is the newest version this daemon speaks.
	Version = VersionRings
)

// Sizes of the fixed headers, in bytes.
const (
	HelloSize        = 16 // version 1
	HelloRingsSize   = 32 // version 2
	HelloReplySize   = 32 // version 1
	HelloReplyV2Size = 64 // version 2
	RequestSize      = 48
	ReplySize        = 32
)

// Limits the daemon advertises in the hello reply.
const (
	// MaxBatch is the most requests (or replies) one message carries.
	MaxBatch = 256
	// MaxInflight is the most requests a connection may have unanswered;
	// the daemon stops reading a connection that reaches it.
	MaxInflight = 512
	// MaxIO is the longest read or write.
	MaxIO = 16 << 20
	// MaxHandles is the most files one connection may hold open.
	MaxHandles = 4096
	// DefaultRegion and MaxRegion bound the shared-memory region.
	DefaultRegion = 4 << 20
	MaxRegion     = 1 << 30
)

// Op is a request's operation.
type Op uint8

// Opcodes.
const (
	OpNop      Op = 1  // nothing; answers 0
	OpOpen     Op = 2  // name → handle, size
	OpClose    Op = 3  // handle
	OpRead     Op = 4  // handle, off, region range → bytes read
	OpWrite    Op = 5  // handle, off, region range → bytes written
	OpFsync    Op = 6  // handle; handle 0: every file
	OpTruncate Op = 7  // handle, off = new size
	OpRemove   Op = 8  // name
	OpRename   Op = 9  // old name, new name
	OpStat     Op = 10 // name → size, file id
	OpFstat    Op = 11 // handle → size, file id
	OpList     Op = 12 // off = first index, region range ← entries
	OpStats    Op = 13 // region range ← engine stats as JSON
	opLimit    Op = 14
)

var opNames = [opLimit]string{"", "nop", "open", "close", "read", "write", "fsync", "truncate", "remove", "rename", "stat", "fstat", "list", "stats"}

func (o Op) String() string {
	if o > 0 && o < opLimit {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Open flags.
const (
	OpenCreate = 1 << 0 // create the file if it does not exist
	OpenTrunc  = 1 << 1 // empty it
	OpenExcl   = 1 << 2 // with OpenCreate: fail with EEXIST if it exists
	// OpenDeferSync, with OpenCreate: a creation is durable from the
	// device's next flush (the file's own fsync, any other fsync, or a
	// namespace change), not when the reply arrives, as a file created
	// with open(2) on a kernel file system is durable from the fsync of
	// it or its directory. The reply does not wait for the metadata
	// log's flush (engine.ODeferSync); a crash before a flush loses the
	// file. Daemons older than this flag answer EINVAL.
	OpenDeferSync = 1 << 3
	openFlags     = OpenCreate | OpenTrunc | OpenExcl | OpenDeferSync
)

// Truncate flags.
const (
	// TruncateGrow only grows the file: one already at least off bytes
	// long is left as it is, even if another client extended it since
	// the caller last saw its size (a layout that never cuts).
	TruncateGrow = 1 << 0
)

// List flags.
const (
	// ListAfter pages by name, not by index: the request's range starts
	// with a cursor name of off bytes (0 to engine.MaxNameLen; none: the
	// first page), and the daemon writes over the range the entries
	// whose names sort after it. A client that passes the last name it
	// got sees every file that exists, unchanged, for the whole listing,
	// once, whatever others create or remove meanwhile (by index, a
	// remove before the position made the next page skip a name).
	// Daemons older than the flag answer EINVAL.
	ListAfter = 1 << 0
)

// Remove flags.
const (
	// RemoveUnused removes the file at once only if no handle has it
	// open (any client's); otherwise the reply is EBUSY and the close
	// of its last handle removes it, unless it is opened again first
	// (engine.RemoveUnused). Daemons older than this flag answer EINVAL.
	RemoveUnused = 1 << 0
)

// Status is a reply's result: 0 or a Linux errno value, so that a C
// client can hand it to its caller as is.
type Status uint32

// Status codes (docs/protocol.md lists when each is returned).
const (
	StatusOK          Status = 0
	StatusNotExist    Status = Status(syscall.ENOENT)
	StatusBusy        Status = Status(syscall.EBUSY) // remove with RemoveUnused of an open file
	StatusIO          Status = Status(syscall.EIO)
	StatusTooBig      Status = Status(syscall.E2BIG)        // length above MaxIO
	StatusBadHandle   Status = Status(syscall.EBADF)        // handle not open on this connection
	StatusFault       Status = Status(syscall.EFAULT)       // region range outside the region
	StatusExist       Status = Status(syscall.EEXIST)       // the file exists
	StatusReserved    Status = Status(syscall.EPERM)        // a rename onto a temporary's name (TempPrefix)
	StatusInvalid     Status = Status(syscall.EINVAL)       // malformed request
	StatusTooMany     Status = Status(syscall.EMFILE)       // MaxHandles open; hello: the daemon is out of descriptors
	StatusFileTooBig  Status = Status(syscall.EFBIG)        // offset or size past engine.MaxFileSize
	StatusNoSpace     Status = Status(syscall.ENOSPC)       // device full
	StatusNameTooLong Status = Status(syscall.ENAMETOOLONG) // name above engine.MaxNameLen
	StatusNoOp        Status = Status(syscall.ENOSYS)       // unknown opcode
	StatusOverflow    Status = Status(syscall.EOVERFLOW)    // output range too small
	StatusVersion     Status = Status(syscall.EPROTONOSUPPORT)
	StatusShutdown    Status = Status(syscall.ESHUTDOWN) // daemon stopping; request not done
	StatusCanceled    Status = Status(syscall.ECANCELED) // connection closing; request not done
	// Hello refusals for a daemon at its caps.
	StatusTooManyClients Status = Status(syscall.EUSERS) // MaxConns clients connected
	StatusNoMemory       Status = Status(syscall.ENOMEM) // the region does not fit the shared-memory budget
)

// Error is a non-zero Status as a Go error: the errno's text, without a
// prefix (the callers that wrap it say what failed). It unwraps to the
// errno and, where one fits, to the io/fs error, so errors.Is(err,
// fs.ErrNotExist) works on the client side.
func (s Status) Error() string {
	return syscall.Errno(s).Error() // the caller's wrapping says where it came from
}

// Is makes errors.Is match the errno and the matching fs error.
func (s Status) Is(target error) bool {
	if e, ok := target.(syscall.Errno); ok {
		return uint32(e) == uint32(s)
	}
	switch target {
	case fs.ErrNotExist:
		return s == StatusNotExist
	case fs.ErrExist:
		return s == StatusExist
	case fs.ErrInvalid:
		return s == StatusInvalid
	case fs.ErrClosed:
		return s == StatusBadHandle || s == StatusShutdown
	}
	return false
}

// Err is nil for StatusOK, else the Status as an error.
func (s Status) Err() error {
	if s == StatusOK {
		return nil
	}
	return s
}

// statusOf maps an engine error onto a status code. A device error
// (EIO) anywhere in err wins over the rest: an operation that ran out of
// space or was shut down and then failed on the device (a short write
// whose size record failed) may have left the file other than those say.
func statusOf(err error) Status {
	var st Status
	switch {
	case err == nil || errors.Is(err, io.EOF):
		return StatusOK
	case errors.As(err, &st):
		return st
	case errors.Is(err, syscall.EIO):
		return StatusIO
	case errors.Is(err, fs.ErrNotExist):
		return StatusNotExist
	case errors.Is(err, engine.ErrInUse):
		return StatusBusy
	case errors.Is(err, fs.ErrExist):
		return StatusExist
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, engine.ErrNoSpace):
		return StatusNoSpace
	case errors.Is(err, fs.ErrClosed):
		return StatusShutdown
	case errors.Is(err, fs.ErrInvalid):
		return StatusInvalid
	}
	return StatusIO
}

// Hello is the client's first message.
//
//	0 magic u32 · 4 version u16 · 6 flags u16 · 8 region u64
//	version 2 only: 16 entries u32 · 20 reserved u32 · 24 reserved u64
type Hello struct {
	Magic   uint32
	Version uint16
	Flags   uint16 // 0
	Region  uint64 // bytes of shared memory asked for; 0: DefaultRegion
	Entries uint32 // VersionRings: ring entries asked for; 0: DefaultRingEntries
}

// HelloReply answers Hello; on StatusOK the message carries the region's
// memfd (SCM_RIGHTS).
//
//	0 magic u32 · 4 version u16 · 6 reserved u16 · 8 status u32
//	12 max_batch u32 · 16 region u64 · 24 max_inflight u32 · 28 max_io u32
//	version 2 only: 32 ring_off u64 · 40 map_size u64 · 48 entries u32
//	52 sq_off u32 · 56 cq_off u32 · 60 reserved u32
type HelloReply struct {
	Magic       uint32
	Version     uint16
	Status      Status
	MaxBatch    uint32
	Region      uint64 // bytes granted for data and names: requests' ranges lie in [0, Region)
	MaxInflight uint32
	MaxIO       uint32
	// VersionRings: where the rings are.
	RingOff uint64 // start of the ring area; Region rounded up to a page
	MapSize uint64 // bytes to map: RingOff + the ring area
	Entries uint32 // of each ring, a power of two
	SQOff   uint32 // submission entries, from RingOff
	CQOff   uint32 // completion entries, from RingOff
}

var le = binary.LittleEndian

// Encode writes h into b: HelloSize bytes for version 1, HelloRingsSize
// for version 2 and later.
func (h *Hello) Encode(b []byte) {
	_ = b[HelloSize-1]
	le.PutUint32(b[0:], h.Magic)
	le.PutUint16(b[4:], h.Version)
	le.PutUint16(b[6:], h.Flags)
	le.PutUint64(b[8:], h.Region)
	if h.Version >= VersionRings {
		_ = b[HelloRingsSize-1]
		le.PutUint32(b[16:], h.Entries)
		le.PutUint32(b[20:], 0)
		le.PutUint64(b[24:], 0)
	}
}

// helloSize is the size of a hello of version v.
func helloSize(v uint16) int {
	if v >= VersionRings {
		return HelloRingsSize
	}
	return HelloSize
}

// ParseHello decodes and checks a hello message. The status says which
// reply a bad hello gets: StatusVersion for a version this daemon does
// not speak (the reply then names the newest it does), StatusInvalid for
// anything else malformed.
func ParseHello(b []byte) (Hello, Status, error) {
	var h Hello
	if len(b) < 8 {
		return h, StatusInvalid, fmt.Errorf("hello is %d bytes, want %d or %d", len(b), HelloSize, HelloRingsSize)
	}
	h.Magic = le.Uint32(b[0:])
	h.Version = le.Uint16(b[4:])
	h.Flags = le.Uint16(b[6:])
	switch {
	case h.Magic != Magic:
		return h, StatusInvalid, fmt.Errorf("hello magic %#x, want %#x", h.Magic, uint32(Magic))
	case h.Version != VersionFraming && h.Version != VersionRings:
		return h, StatusVersion, fmt.Errorf("protocol version %d, this daemon speaks %d and %d",
			h.Version, VersionFraming, VersionRings)
	case len(b) != helloSize(h.Version):
		return h, StatusInvalid, fmt.Errorf("version %d hello is %d bytes, want %d", h.Version, len(b), helloSize(h.Version))
	}
	h.Region = le.Uint64(b[8:])
	if h.Version >= VersionRings {
		h.Entries = le.Uint32(b[16:])
		if le.Uint32(b[20:]) != 0 || le.Uint64(b[24:]) != 0 {
			return h, StatusInvalid, errors.New("hello reserved fields set")
		}
	}
	switch {
	case h.Flags != 0:
		return h, StatusInvalid, fmt.Errorf("hello flags %#x, want 0", h.Flags)
	case h.Region > MaxRegion:
		return h, StatusInvalid, fmt.Errorf("region of %d bytes asked for, at most %d", h.Region, MaxRegion)
	case h.Entries > MaxRingEntries:
		return h, StatusInvalid, fmt.Errorf("rings of %d entries asked for, at most %d", h.Entries, MaxRingEntries)
	}
	return h, StatusOK, nil
}

// Encode writes r into b: HelloReplySize bytes, and the version 2
// fields too if b has room for them (HelloReplyV2Size).
func (r *HelloReply) Encode(b []byte) {
	_ = b[HelloReplySize-1]
	le.PutUint32(b[0:], r.Magic)
	le.PutUint16(b[4:], r.Version)
	le.PutUint16(b[6:], 0)
	le.PutUint32(b[8:], uint32(r.Status))
	le.PutUint32(b[12:], r.MaxBatch)
	le.PutUint64(b[16:], r.Region)
	le.PutUint32(b[24:], r.MaxInflight)
	le.PutUint32(b[28:], r.MaxIO)
	if len(b) >= HelloReplyV2Size {
		le.PutUint64(b[32:], r.RingOff)
		le.PutUint64(b[40:], r.MapSize)
		le.PutUint32(b[48:], r.Entries)
		le.PutUint32(b[52:], r.SQOff)
		le.PutUint32(b[56:], r.CQOff)
		le.PutUint32(b[60:], 0)
	}
}

// size is the encoded size of r.
func (r *HelloReply) size() int {
	if r.Version >= VersionRings {
		return HelloReplyV2Size
	}
	return HelloReplySize
}

// ParseHelloReply decodes a hello reply.
func ParseHelloReply(b []byte) (HelloReply, error) {
	var r HelloReply
	if len(b) != HelloReplySize && len(b) != HelloReplyV2Size {
		return r, fmt.Errorf("hello reply is %d bytes, want %d or %d", len(b), HelloReplySize, HelloReplyV2Size)
	}
	r.Magic = le.Uint32(b[0:])
	r.Version = le.Uint16(b[4:])
	r.Status = Status(le.Uint32(b[8:]))
	r.MaxBatch = le.Uint32(b[12:])
	r.Region = le.Uint64(b[16:])
	r.MaxInflight = le.Uint32(b[24:])
	r.MaxIO = le.Uint32(b[28:])
	if r.Magic != Magic {
		return r, fmt.Errorf("hello reply magic %#x, want %#x", r.Magic, uint32(Magic))
	}
	if len(b) == HelloReplyV2Size {
		r.RingOff = le.Uint64(b[32:])
		r.MapSize = le.Uint64(b[40:])
		r.Entries = le.Uint32(b[48:])
		r.SQOff = le.Uint32(b[52:])
		r.CQOff = le.Uint32(b[56:])
	}
	return r, nil
}

// Request is one request header.
//
//	0 tag u64 · 8 op u8 · 9 flags u8 · 10 reserved u16 · 12 handle u32
//	16 off u64 · 24 addr u64 · 32 len u32 · 36 len2 u32 · 40 reserved u64
type Request struct {
	Tag    uint64 // echoed in the reply
	Op     Op
	Flags  uint8
	Handle uint32
	Off    uint64 // file offset; new size for OpTruncate; first index for OpList (cursor length with ListAfter)
	Addr   uint64 // region offset of data, name(s) or output
	Len    uint32 // bytes at Addr
	Len2   uint32 // OpRename: bytes of the new name, right after the old one
}

// Encode writes q into b (RequestSize bytes).
func (q *Request) Encode(b []byte) {
	_ = b[RequestSize-1]
	le.PutUint64(b[0:], q.Tag)
	b[8] = byte(q.Op)
	b[9] = q.Flags
	le.PutUint16(b[10:], 0)
	le.PutUint32(b[12:], q.Handle)
	le.PutUint64(b[16:], q.Off)
	le.PutUint64(b[24:], q.Addr)
	le.PutUint32(b[32:], q.Len)
	le.PutUint32(b[36:], q.Len2)
	le.PutUint64(b[40:], 0)
}

// ParseRequest decodes one header and checks what can be checked without
// the connection's state: the opcode, flags, reserved fields, lengths,
// file offsets, and that the region range [Addr, Addr+Len+Len2) lies
// within a region of regionLen bytes. A request that fails gets the
// returned status as its reply; its tag is always decoded.
func ParseRequest(b []byte, regionLen uint64) (Request, Status) {
	var q Request
	if len(b) != RequestSize {
		return q, StatusInvalid
	}
	q.Tag = le.Uint64(b[0:])
	q.Op = Op(b[8])
	q.Flags = b[9]
	q.Handle = le.Uint32(b[12:])
	q.Off = le.Uint64(b[16:])
	q.Addr = le.Uint64(b[24:])
	q.Len = le.Uint32(b[32:])
	q.Len2 = le.Uint32(b[36:])
	if le.Uint16(b[10:]) != 0 || le.Uint64(b[40:]) != 0 {
		return q, StatusInvalid
	}
	if q.Op == 0 || q.Op >= opLimit {
		return q, StatusNoOp
	}
	// Every operation but open, truncate, remove and list takes no flags.
	if q.Flags != 0 && !(q.Op == OpOpen && q.Flags&^openFlags == 0 || q.Op == OpTruncate && q.Flags&^TruncateGrow == 0 ||
		q.Op == OpRemove && q.Flags&^RemoveUnused == 0 || q.Op == OpList && q.Flags&^ListAfter == 0) {
		return q, StatusInvalid
	}
	if q.Len2 != 0 && q.Op != OpRename {
		return q, StatusInvalid
	}
	switch q.Op {
	case OpRead, OpWrite:
		if q.Len > MaxIO {
			return q, StatusTooBig
		}
		if q.Off > engine.MaxFileSize || q.Off+uint64(q.Len) > engine.MaxFileSize {
			return q, StatusFileTooBig
		}
	case OpTruncate:
		if q.Off > engine.MaxFileSize {
			return q, StatusFileTooBig
		}
	case OpOpen, OpRemove, OpStat:
		if st := checkNameLen(q.Len); st != StatusOK {
			return q, st
		}
	case OpList:
		if q.Flags&ListAfter != 0 && (q.Off > engine.MaxNameLen || q.Off > uint64(q.Len)) {
			return q, StatusInvalid
		}
	case OpRename:
		if st := checkNameLen(q.Len); st != StatusOK {
			return q, st
		}
		if st := checkNameLen(q.Len2); st != StatusOK {
			return q, st
		}
	}
	// Len and Len2 are u32, so the sum cannot overflow a u64; Addr can.
	end := q.Addr + uint64(q.Len) + uint64(q.Len2)
	if end < q.Addr || end > regionLen {
		return q, StatusFault
	}
	return q, StatusOK
}

func checkNameLen(n uint32) Status {
	switch {
	case n == 0:
		return StatusInvalid
	case n > engine.MaxNameLen:
		return StatusNameTooLong
	}
	return StatusOK
}

// Reply is one reply header.
//
//	0 tag u64 · 8 status u32 · 12 reserved u32 · 16 val u64 · 24 val2 u64
type Reply struct {
	Tag    uint64
	Status Status
	Val    uint64
	Val2   uint64
}

// Encode writes r into b (ReplySize bytes).
func (r *Reply) Encode(b []byte) {
	_ = b[ReplySize-1]
	le.PutUint64(b[0:], r.Tag)
	le.PutUint32(b[8:], uint32(r.Status))
	le.PutUint32(b[12:], 0)
	le.PutUint64(b[16:], r.Val)
	le.PutUint64(b[24:], r.Val2)
}

// ParseReply decodes one reply header.
func ParseReply(b []byte) (Reply, error) {
	if len(b) != ReplySize {
		return Reply{}, fmt.Errorf("zonefold: reply is %d bytes, want %d", len(b), ReplySize)
	}
	return Reply{Tag: le.Uint64(b[0:]), Status: Status(le.Uint32(b[8:])),
		Val: le.Uint64(b[16:]), Val2: le.Uint64(b[24:])}, nil
}

// List entries, as OpList writes them into the region back to back:
// size u64, name length u16, name.
const listEntryHeader = 10

// AppendListEntry appends one entry to b if it fits within limit bytes.
func appendListEntry(b []byte, limit int, size int64, name string) ([]byte, bool) {
	if len(b)+listEntryHeader+len(name) > limit {
		return b, false
	}
	b = le.AppendUint64(b, uint64(size))
	b = le.AppendUint16(b, uint16(len(name)))
	return append(b, name...), true
}

// ListEntry is one file in a listing.
type ListEntry struct {
	Name string
	Size int64
}

// ParseList decodes n entries written by OpList.
func ParseList(b []byte, n int) ([]ListEntry, error) {
	out := make([]ListEntry, 0, n)
	for range n {
		if len(b) < listEntryHeader {
			return out, fmt.Errorf("zonefold: listing truncated after %d entries", len(out))
		}
		size := int64(le.Uint64(b))
		nl := int(le.Uint16(b[8:]))
		b = b[listEntryHeader:]
		if len(b) < nl {
			return out, fmt.Errorf("zonefold: listing truncated in entry %d", len(out))
		}
		out = append(out, ListEntry{Name: string(b[:nl]), Size: size})
		b = b[nl:]
	}
	return out, nil
}
