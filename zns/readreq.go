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
}

// submitRead reads buf at off from file, but only its first valid bytes:
// the rest is zeroed here. A read of nothing (or an injected failure)
// completes through a NOP, so the caller always gets one completion; with
// delay (a null device's completion_nsec) through a timer of that length.
func submitRead(ring *uring.Ring, pool *freeList[readReq], file uring.File, buf []byte, off, valid int64, injected syscall.Errno, delay *syscall.Timespec, c uring.Completion) error {
	clear(buf[valid:])
	if valid == int64(len(buf)) && injected == 0 {
		return ring.Read(file, buf, uint64(off), c)
	}
	r := pool.get()
	*r = readReq{pool: pool, c: c, n: int32(len(buf)), want: int32(valid), injected: injected}
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
	pool := r.pool
	*r = readReq{}
	pool.put(r)
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
