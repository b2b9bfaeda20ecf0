package zns

import (
	"syscall"

	"github.com/zonefold/zonefold/uring"
)

// readReq completes a Read whose tail (at or past the zone's write
// pointer) was zeroed in memory instead of read: the ring transfers want
// bytes and the caller is told n. Devices keep them in a free list.
type readReq struct {
	pool     *freeList[readReq]
	c        uring.Completion
	n, want  int32
	injected syscall.Errno
	// retry, if set, reads the range again alone when the ring's read
	// fails with EIO (see Block.retryRead): buf[:want] at off.
	retry func(buf []byte, off int64, c uring.Completion, n int32)
	buf   []byte
	off   int64
}

// submitRead reads buf at off from file, but only its first valid bytes:
// the rest is zeroed here. A read of nothing (or an injected failure)
// completes through a NOP, so the caller always gets one completion; with
// delay (a null device's completion_nsec) through a timer of that length.
//
// retry, if not nil, is told a read the ring failed with EIO, to read
// it again (Block.retryRead); it then completes c.
func submitRead(ring *uring.Ring, pool *freeList[readReq], file uring.File, buf []byte, off, valid int64, injected syscall.Errno, delay *syscall.Timespec, c uring.Completion,
	retry func([]byte, int64, uring.Completion, int32)) error {
	clear(buf[valid:])
	if valid == int64(len(buf)) && injected == 0 && retry == nil {
		return ring.Read(file, buf, uint64(off), c)
	}
	r := pool.get()
	*r = readReq{pool: pool, c: c, n: int32(len(buf)), want: int32(valid), injected: injected, retry: retry, buf: buf[:valid], off: off}
	var err error
	switch {
	case (valid == 0 || injected != 0) && delay != nil:
		err = ring.Timeout(delay, r)
	case valid == 0 || injected != 0:
		err = ring.Nop(r)
	default:
		err = ring.Read(file, buf[:valid], uint64(off), r)
	}
	if err != nil {
		*r = readReq{}
		pool.put(r)
	}
	return err
}

// Complete implements uring.Completion.
func (r *readReq) Complete(res uring.Result) {
	c, n, want, inj := r.c, r.n, r.want, r.injected
	pool, retry, buf, off := r.pool, r.retry, r.buf, r.off
	*r = readReq{}
	pool.put(r)
	if retry != nil && inj == 0 && res.Res == -int32(syscall.EIO) && want > 0 {
		retry(buf, off, c, n)
		return
	}
	switch {
	case inj != 0:
		res.Res = -int32(inj)
	case res.Res >= 0 && res.Res != want:
		res.Res = -int32(syscall.EIO)
	case res.Res >= 0:
		res.Res = n
	}
	if c != nil {
		c.Complete(res)
	}
}
