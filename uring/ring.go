// Package uring is zonefold's only path to the kernel for data I/O: a thin
// layer over io_uring (through giouring) with plugging, batching, registered
// buffers and files, and NVMe passthrough commands.
//
// Invariants:
//
//   - Every operation occupies one request slot from submission until its
//     completion has been delivered. There are as many slots as completion
//     queue entries, so the completion queue can never overflow.
//   - A slot keeps the buffers of its operation reachable until the
//     operation completes; callers must not reuse a buffer before then.
//   - Completions are delivered on the ring's reaper goroutine, one call of
//     Completion.Complete per operation, exactly once. Complete must not
//     block: it hands the result on and returns.
//   - Plugging belongs to the ring, as the kernel's belongs to the task:
//     while any plug is held, prepared SQEs stay in the submission queue
//     and are entered into the kernel together when the last plug is
//     released, when the queue fills, or when someone waits (Flush, Wait,
//     or a submitter blocking for a free slot) — the kernel likewise flushes
//     a task's plug when it sleeps, so waiting under a plug cannot deadlock.
//     A goroutine that submits and does not wait itself (a dispatcher)
//     must Flush after its Unplug: someone else's plug may be holding its
//     SQEs while that someone waits for them.
//   - The submission queue is guarded by one mutex; the completion queue is
//     read only by the reaper. Nothing on the submit or complete path
//     allocates.
package uring

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/pawelgaczynski/giouring"
)

// Result is the outcome of one operation, as the kernel reported it.
type Result struct {
	// Res is the CQE result: bytes transferred, or a negated errno.
	Res int32
	// Flags are the CQE flags.
	Flags uint32
	// Big is the extra 16 bytes of a 32-byte CQE (rings made with
	// Options.Big); for NVMe passthrough Big[0] is the command's result,
	// e.g. the LBA that a Zone Append wrote.
	Big [2]uint64
}

// Err returns the operation's error, wrapped with its name, or nil.
func (r Result) Err(op string) error {
	if r.Res >= 0 {
		return nil
	}
	return &OpError{Op: op, Errno: syscall.Errno(-r.Res)}
}

// Completion receives the result of an operation. It is called once, on the
// reaper goroutine, and must not block.
type Completion interface {
	Complete(Result)
}

// OpError is a failed operation: its name and the errno the kernel returned.
// errors.Is(err, syscall.EIO) and friends work through Unwrap.
type OpError struct {
	Op    string
	Errno syscall.Errno
}

func (e *OpError) Error() string { return "uring: " + e.Op + ": " + e.Errno.Error() }
func (e *OpError) Unwrap() error { return e.Errno }

// ErrClosed is returned for operations submitted to a closed ring.
var ErrClosed = errors.New("uring: ring is closed")

// Options configure a ring.
type Options struct {
	// Entries is the submission queue size (a power of two is used); the
	// completion queue, and so the number of operations in flight, is
	// twice that. Default 256.
	Entries uint32
	// Big makes a ring with 128-byte SQEs and 32-byte CQEs, as NVMe
	// passthrough (URING_CMD) needs.
	Big bool
}

// Stats are cumulative counters of a ring.
type Stats struct {
	SQEs         uint64 `json:"sqes"`          // operations submitted to the kernel
	SubmitEnters uint64 `json:"submit_enters"` // io_uring_enter calls that submitted SQEs
	WaitEnters   uint64 `json:"wait_enters"`   // io_uring_enter calls that only waited for completions
	Completions  uint64 `json:"completions"`   // completions delivered
}

// SQEsPerEnter is the mean batch size: SQEs per submitting kernel entry.
func (s Stats) SQEsPerEnter() float64 {
	if s.SubmitEnters == 0 {
		return 0
	}
	return float64(s.SQEs) / float64(s.SubmitEnters)
}

// Sub returns the counters accumulated since an earlier snapshot.
func (s Stats) Sub(earlier Stats) Stats {
	return Stats{
		SQEs:         s.SQEs - earlier.SQEs,
		SubmitEnters: s.SubmitEnters - earlier.SubmitEnters,
		WaitEnters:   s.WaitEnters - earlier.WaitEnters,
		Completions:  s.Completions - earlier.Completions,
	}
}

// closeUserData marks the NOP that tells the reaper to stop.
const closeUserData = ^uint64(0)

// maxInlineIovecs is how many iovecs a slot holds without growing.
const maxInlineIovecs = 8

type slot struct {
	c Completion
	// keep and iov keep the operation's memory reachable (and its iovec
	// array stable) until completion.
	keep []byte
	bufs [][]byte
	iov  []syscall.Iovec
	// armed publishes the fields above to the reaper. The kernel orders
	// the submitter's writes before the completion, but the race detector
	// cannot see through the kernel; this atomic makes that edge explicit.
	armed atomic.Uint32
}

// Ring is an io_uring instance shared by any number of goroutines.
type Ring struct {
	ring *giouring.Ring
	big  bool

	sqMu       sync.Mutex
	plugDepth  int
	pending    uint32 // SQEs prepared but not yet entered
	closed     bool
	inflight   sync.WaitGroup
	reaperDone chan struct{}

	slots []slot
	free  chan uint32 // indices of free slots

	sqes, submitEnters, waitEnters, completions atomic.Uint64

	reapErr  atomic.Pointer[error]
	dispatch func(*giouring.CompletionQueueEvent)
	reaped   uint32 // CQEs seen in the current pass (reaper only)
	stop     bool   // the stop marker was seen (reaper only)
}

// New creates a ring and starts its reaper. A ring that cannot be created
// (io_uring disabled, too old a kernel, out of memory) is a clear error.
func New(opts Options) (*Ring, error) {
	entries := opts.Entries
	if entries == 0 {
		entries = 256
	}
	var flags uint32
	if opts.Big {
		flags |= giouring.SetupSQE128 | giouring.SetupCQE32
	}
	gr := giouring.NewRing()
	if err := gr.QueueInit(entries, flags); err != nil {
		hint := ""
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.ENOSYS) {
			hint = " (is io_uring disabled? see /proc/sys/kernel/io_uring_disabled)"
		}
		return nil, fmt.Errorf("uring: create ring with %d entries%s: %w", entries, hint, err)
	}
	// QueueInit rounds entries up to a power of two; the CQ is twice that.
	sq := uint32(1)
	for sq < entries {
		sq <<= 1
	}
	nslots := 2 * sq
	r := &Ring{
		ring:       gr,
		big:        opts.Big,
		slots:      make([]slot, nslots),
		free:       make(chan uint32, nslots),
		reaperDone: make(chan struct{}),
	}
	for i := range nslots {
		r.free <- uint32(i)
	}
	r.dispatch = r.dispatchCQE
	go r.reap()
	return r, nil
}

// Slots is how many operations can be in flight at once.
func (r *Ring) Slots() int { return len(r.slots) }

// Big reports whether the ring has 128-byte SQEs and 32-byte CQEs.
func (r *Ring) Big() bool { return r.big }

// Stats returns a snapshot of the ring's counters.
func (r *Ring) Stats() Stats {
	return Stats{
		SQEs:         r.sqes.Load(),
		SubmitEnters: r.submitEnters.Load(),
		WaitEnters:   r.waitEnters.Load(),
		Completions:  r.completions.Load(),
	}
}

// Plug starts a batch: until the matching Unplug, prepared operations wait
// in the submission queue instead of entering the kernel one by one. Plugs
// nest; only the outermost Unplug submits.
func (r *Ring) Plug() {
	r.sqMu.Lock()
	r.plugDepth++
	r.sqMu.Unlock()
}

// Unplug ends a batch; the outermost Unplug submits everything prepared
// under the plug with one kernel entry.
func (r *Ring) Unplug() error {
	r.sqMu.Lock()
	defer r.sqMu.Unlock()
	if r.plugDepth == 0 {
		return errors.New("uring: Unplug without Plug")
	}
	r.plugDepth--
	if r.plugDepth > 0 {
		return nil
	}
	return r.enterLocked()
}

// Flush submits whatever is prepared, plugged or not. Call it before
// blocking on a completion that a plugged operation will deliver.
func (r *Ring) Flush() error {
	r.sqMu.Lock()
	defer r.sqMu.Unlock()
	return r.enterLocked()
}

// enterLocked enters every prepared SQE into the kernel. Interrupted or
// momentarily refused entries are retried: the reaper keeps draining
// completions meanwhile.
func (r *Ring) enterLocked() error {
	if r.pending == 0 {
		return nil
	}
	for {
		n, err := r.ring.Submit()
		if err == nil {
			r.submitEnters.Add(1)
			r.sqes.Add(uint64(n))
			if uint32(n) >= r.pending {
				r.pending = 0
				return nil
			}
			r.pending -= uint32(n)
			continue
		}
		if errors.Is(err, syscall.EINTR) || errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EBUSY) {
			continue
		}
		return fmt.Errorf("uring: submit %d SQEs: %w", r.pending, err)
	}
}

// acquire takes a free slot, flushing prepared SQEs before it blocks so
// that the slots it waits for can complete.
func (r *Ring) acquire() (uint32, error) {
	select {
	case i := <-r.free:
		return i, nil
	default:
	}
	if err := r.Flush(); err != nil {
		return 0, err
	}
	return <-r.free, nil
}

// submit is the one submit path: take a slot, fill an SQE from o, and
// enter it at once unless plugged.
func (r *Ring) submit(c Completion, o *op) error {
	idx, err := r.acquire()
	if err != nil {
		return err
	}
	s := &r.slots[idx]
	s.c, s.keep, s.bufs = c, o.keep, o.bufs

	r.sqMu.Lock()
	if r.closed {
		r.sqMu.Unlock()
		r.release(idx)
		return ErrClosed
	}
	sqe := r.ring.GetSQE()
	if sqe == nil {
		// The SQ is full of plugged SQEs: submit them and retry.
		if err := r.enterLocked(); err != nil {
			r.sqMu.Unlock()
			r.release(idx)
			return err
		}
		sqe = r.ring.GetSQE()
	}
	r.fill(sqe, s, o)
	sqe.UserData = uint64(idx)
	s.armed.Store(1)
	r.inflight.Add(1)
	r.pending++
	var enterErr error
	if r.plugDepth == 0 {
		enterErr = r.enterLocked()
	}
	r.sqMu.Unlock()
	return enterErr
}

func (r *Ring) release(idx uint32) {
	s := &r.slots[idx]
	s.c, s.keep, s.bufs = nil, nil, nil
	r.free <- idx
}

// sqeBytes is the whole SQE: 128 bytes on a big ring.
func (r *Ring) sqeBytes(sqe *giouring.SubmissionQueueEntry) []byte {
	n := 64
	if r.big {
		n = 128
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(sqe)), n)
}

// reap delivers completions until Close.
func (r *Ring) reap() {
	defer close(r.reaperDone)
	for {
		r.reaped = 0
		r.ring.ForEachCQE(r.dispatch)
		if r.reaped > 0 {
			r.ring.CQAdvance(r.reaped)
		}
		if r.stop {
			return
		}
		if r.reaped > 0 {
			continue
		}
		_, err := r.ring.Enter(0, 1, giouring.EnterGetEvents, nil)
		r.waitEnters.Add(1)
		if err != nil && !errors.Is(err, syscall.EINTR) && !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EBUSY) {
			e := fmt.Errorf("uring: wait for completions: %w", err)
			r.reapErr.Store(&e)
			return
		}
	}
}

func (r *Ring) dispatchCQE(cqe *giouring.CompletionQueueEvent) {
	r.reaped++
	if cqe.UserData == closeUserData {
		r.stop = true
		return
	}
	res := Result{Res: cqe.Res, Flags: cqe.Flags}
	if r.big {
		big := (*[2]uint64)(unsafe.Add(unsafe.Pointer(cqe), 16))
		res.Big = *big
	}
	idx := uint32(cqe.UserData)
	r.slots[idx].armed.Load()
	c := r.slots[idx].c
	r.release(idx)
	r.completions.Add(1)
	r.inflight.Done()
	if c != nil {
		c.Complete(res)
	}
}

// Close waits for every operation in flight to complete, stops the reaper
// and releases the ring. Operations submitted after Close fail with
// ErrClosed.
func (r *Ring) Close() error {
	r.sqMu.Lock()
	if r.closed {
		r.sqMu.Unlock()
		return nil
	}
	r.closed = true
	err := r.enterLocked()
	r.sqMu.Unlock()
	if err != nil {
		return err
	}
	r.inflight.Wait()

	r.sqMu.Lock()
	sqe := r.ring.GetSQE()
	if sqe == nil {
		r.sqMu.Unlock()
		return errors.New("uring: close: no free SQE for the stop marker")
	}
	clear(r.sqeBytes(sqe))
	sqe.OpCode = giouring.OpNop
	sqe.UserData = closeUserData
	r.pending++
	err = r.enterLocked()
	r.sqMu.Unlock()
	if err != nil {
		return err
	}
	<-r.reaperDone
	r.ring.QueueExit()
	if p := r.reapErr.Load(); p != nil {
		return *p
	}
	return nil
}
