package uring

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"github.com/pawelgaczynski/giouring"
)

// File names the file an operation targets: a plain descriptor, or an index
// into the ring's registered files (which saves the kernel a file lookup per
// operation).
type File struct {
	n     int32
	fixed bool
}

// FD is a plain file descriptor as a File.
func FD(fd int) File { return File{n: int32(fd)} }

// CmdSize is the size of a URING_CMD command area in a 128-byte SQE.
const CmdSize = 80

// cmdOffset is where the command area starts in a 128-byte SQE.
const cmdOffset = 48

const (
	opUringCmd = giouring.OpUringCmd
	// fsyncDatasync is IORING_FSYNC_DATASYNC.
	fsyncDatasync = 1
)

// op describes one SQE. It lives on the caller's stack.
type op struct {
	code     uint8
	file     File
	addr     uint64
	length   uint32
	off      uint64
	opFlags  uint32
	bufIndex uint16
	fixedBuf bool
	cmdOp    uint32
	cmd      *[CmdSize]byte
	keep     []byte
	bufs     [][]byte // readv/writev: turned into the slot's iovecs
	// again lets a URING_CMD be submitted again after a kernel cancel.
	again bool
}

func (r *Ring) fill(sqe *giouring.SubmissionQueueEntry, s *slot, o *op) {
	clear(r.sqeBytes(sqe))
	sqe.OpCode = o.code
	sqe.Fd = o.file.n
	if o.file.fixed {
		sqe.Flags |= giouring.SqeFixedFile
	}
	sqe.Addr = o.addr
	sqe.Len = o.length
	sqe.Off = o.off
	sqe.OpcodeFlags = o.opFlags
	if o.fixedBuf {
		sqe.BufIG = o.bufIndex
	}
	if o.bufs != nil {
		s.iov = s.iov[:0]
		for _, b := range o.bufs {
			var v syscall.Iovec
			if len(b) > 0 {
				v.Base = &b[0]
			}
			v.SetLen(len(b))
			s.iov = append(s.iov, v)
		}
		if len(s.iov) > 0 {
			sqe.Addr = uint64(uintptr(unsafe.Pointer(&s.iov[0])))
		}
		sqe.Len = uint32(len(s.iov))
	}
	if o.code == opUringCmd {
		// cmd_op is the low 32 bits of the off field; the command area
		// runs from byte 48 into the second half of the 128-byte SQE.
		sqe.Off = uint64(o.cmdOp)
		area := r.sqeBytes(sqe)[cmdOffset : cmdOffset+CmdSize]
		copy(area, o.cmd[:])
	}
}

func bufAddr(b []byte) uint64 {
	if len(b) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(&b[0])))
}

// Nop submits an operation that does nothing; it completes with Res 0.
func (r *Ring) Nop(c Completion) error {
	return r.submit(c, &op{code: giouring.OpNop})
}

// Timeout submits an operation that completes with Res 0 once d has
// passed since the kernel took it (IORING_OP_TIMEOUT with no completion
// count: a kernel timer, nothing burns CPU meanwhile; the kernel's -ETIME
// for an expired timer is reported as 0). The ring keeps d reachable
// until the completion; it must not change before the operation is
// entered (the kernel reads it then), so callers share one per delay.
func (r *Ring) Timeout(d *syscall.Timespec, c Completion) error {
	b := unsafe.Slice((*byte)(unsafe.Pointer(d)), unsafe.Sizeof(*d))
	return r.submit(c, &op{code: giouring.OpTimeout, addr: uint64(uintptr(unsafe.Pointer(d))), length: 1, keep: b})
}

// Read reads len(buf) bytes at off into buf.
func (r *Ring) Read(f File, buf []byte, off uint64, c Completion) error {
	return r.submit(c, &op{code: giouring.OpRead, file: f, addr: bufAddr(buf), length: uint32(len(buf)), off: off, keep: buf})
}

// Write writes buf at off.
func (r *Ring) Write(f File, buf []byte, off uint64, c Completion) error {
	return r.submit(c, &op{code: giouring.OpWrite, file: f, addr: bufAddr(buf), length: uint32(len(buf)), off: off, keep: buf})
}

// Readv reads into bufs, in order, starting at off.
func (r *Ring) Readv(f File, bufs [][]byte, off uint64, c Completion) error {
	return r.submit(c, &op{code: giouring.OpReadv, file: f, off: off, bufs: bufs})
}

// Writev writes bufs, in order, starting at off.
func (r *Ring) Writev(f File, bufs [][]byte, off uint64, c Completion) error {
	return r.submit(c, &op{code: giouring.OpWritev, file: f, off: off, bufs: bufs})
}

// ReadFixed reads into buf, which must lie inside registered buffer index.
func (r *Ring) ReadFixed(f File, buf []byte, off uint64, index uint16, c Completion) error {
	return r.submit(c, &op{code: giouring.OpReadFixed, file: f, addr: bufAddr(buf), length: uint32(len(buf)), off: off, fixedBuf: true, bufIndex: index, keep: buf})
}

// WriteFixed writes buf, which must lie inside registered buffer index.
func (r *Ring) WriteFixed(f File, buf []byte, off uint64, index uint16, c Completion) error {
	return r.submit(c, &op{code: giouring.OpWriteFixed, file: f, addr: bufAddr(buf), length: uint32(len(buf)), off: off, fixedBuf: true, bufIndex: index, keep: buf})
}

// Fsync flushes f to stable storage; datasync skips metadata that is not
// needed to read the data back.
func (r *Ring) Fsync(f File, datasync bool, c Completion) error {
	o := op{code: giouring.OpFsync, file: f}
	if datasync {
		o.opFlags = fsyncDatasync
	}
	return r.submit(c, &o)
}

// Cmd submits an IORING_OP_URING_CMD (e.g. NVMe passthrough) with cmdOp
// and an 80-byte command; buf, if any, is kept reachable until completion
// (the command itself carries its address). The ring must be Big. If the
// kernel cancels it on its own, the ECANCELED is its result.
func (r *Ring) Cmd(f File, cmdOp uint32, cmd *[CmdSize]byte, buf []byte, c Completion) error {
	return r.cmd(f, cmdOp, cmd, buf, c, false)
}

// IdempotentCmd is Cmd for a command that does the same if it runs twice
// (a flush, a read, a zone report): if the kernel cancels it on its own, it
// is submitted again, as reads, writes and fsyncs are.
func (r *Ring) IdempotentCmd(f File, cmdOp uint32, cmd *[CmdSize]byte, buf []byte, c Completion) error {
	return r.cmd(f, cmdOp, cmd, buf, c, true)
}

func (r *Ring) cmd(f File, cmdOp uint32, cmd *[CmdSize]byte, buf []byte, c Completion, again bool) error {
	if !r.big {
		return errors.New("uring: URING_CMD needs a ring made with Options.Big (SQE128/CQE32)")
	}
	return r.submit(c, &op{code: opUringCmd, file: f, cmdOp: cmdOp, cmd: cmd, keep: buf, again: again})
}

// RegisterBuffers registers bufs as fixed buffers; buffer i is then used
// with index i by ReadFixed and WriteFixed. The memory must stay mapped
// until UnregisterBuffers or Close.
func (r *Ring) RegisterBuffers(bufs [][]byte) error {
	iov := make([]syscall.Iovec, len(bufs))
	for i, b := range bufs {
		if len(b) == 0 {
			return fmt.Errorf("uring: register buffer %d: empty", i)
		}
		iov[i].Base = &b[0]
		iov[i].SetLen(len(b))
	}
	if _, err := r.ring.RegisterBuffers(iov); err != nil {
		return fmt.Errorf("uring: register %d buffers: %w", len(bufs), err)
	}
	return nil
}

// UnregisterBuffers drops the registered buffers.
func (r *Ring) UnregisterBuffers() error {
	if _, err := r.ring.UnregisterBuffers(); err != nil {
		return fmt.Errorf("uring: unregister buffers: %w", err)
	}
	return nil
}

// RegisterFiles registers fds and returns the Files that name them by index.
func (r *Ring) RegisterFiles(fds []int) ([]File, error) {
	if _, err := r.ring.RegisterFiles(fds); err != nil {
		return nil, fmt.Errorf("uring: register %d files: %w", len(fds), err)
	}
	files := make([]File, len(fds))
	for i := range fds {
		files[i] = File{n: int32(i), fixed: true}
	}
	return files, nil
}

// UnregisterFiles drops the registered files.
func (r *Ring) UnregisterFiles() error {
	if _, err := r.ring.UnregisterFiles(); err != nil {
		return fmt.Errorf("uring: unregister files: %w", err)
	}
	return nil
}
