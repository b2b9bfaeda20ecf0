// Package uring is zonefold's only path to the kernel for data I/O: a thin
// layer over io_uring (through giouring) with plugging, batching, registered
// buffers and files, and NVMe passthrough commands.
//
// Invariants:
//
//   - Every operation occupies one request slot from submission until its
//     completion has been delivered. There are as many slots as completion
//     queue entries, so the completion queue can never overflow. (The
//     ring's own wake-up read completes only in Close, once every slot is
//     free.)
//   - A slot keeps the buffers of its operation reachable until the
//     operation completes; callers must not reuse a buffer before then.
//   - Completions are delivered on the ring's reaper goroutine, one call of
//     Completion.Complete per operation, exactly once. Complete must not
//     block: it hands the result on and returns. With the completion
//     queue empty, the reaper waits on an eventfd the kernel signals as
//     it posts completions, in Go's netpoller like a socket's reader; a
//     completion posted between the reaper's look at the queue and its
//     wait has signaled the eventfd already, so the wait returns at once
//     (the eventfd counts, and a read resets it). Completions the kernel
//     put in its overflow list (the queue was full) signal nothing: the
//     reaper looks for the overflow flag before it parks and enters the
//     kernel to flush them. Where the kernel takes no eventfd the reaper
//     waits in io_uring_enter.
//   - Plugging belongs to the ring, as the kernel's belongs to the task:
//     while any plug is held, prepared SQEs stay in the submission queue
//     and are entered into the kernel together when the last plug is
//     released, when the queue fills, or when someone waits (Flush, Wait,
//     or a submitter blocking for a free slot) — the kernel likewise flushes
//     a task's plug when it sleeps, so waiting under a plug cannot deadlock.
//     A goroutine that submits and does not wait itself (a dispatcher)
//     must Flush after its Unplug: someone else's plug may be holding its
//     SQEs while that someone waits for them.
//   - Lock order: sqMu, the ring's one mutex, is a leaf. It guards the
//     user side of the submission queue (GetSQE, the published tail) and
//     its bookkeeping (pending, want, queued, plugDepth, closed,
//     entering). Holding it, the ring takes no other lock, blocks on
//     nothing but the entered Cond (whose Wait drops it), and never calls
//     Completion.Complete (a dying ring completes from a goroutine of its
//     own), so callers may hold locks of their own while they submit. The
//     completion queue is read only by the reaper, which never takes
//     sqMu: an entry the kernel refuses for a full completion queue is
//     retried until the reaper makes room. Nothing on the submit or
//     complete path allocates.
//   - The entering role: one goroutine at a time (entering, set under
//     sqMu) enters SQEs into the kernel, and it does so without sqMu: it
//     publishes the SQ tail under sqMu, drops sqMu for io_uring_enter
//     (which on a virtio disk dispatches inline, 20-50 µs), and takes it
//     back to account for what the kernel took. Meanwhile other
//     goroutines prepare SQEs behind the published tail and return at
//     once, leaving their SQEs to the entry in progress (flat
//     combining); nobody else enters, and nobody unmaps the ring. Before
//     its first entry the holder yields the CPU once (runtime.Gosched),
//     still holding the role, so that goroutines already runnable (a
//     batch of requests woken together) prepare theirs first and one
//     entry carries them all.
//   - Only wanted SQEs enter. want counts the oldest prepared SQEs that
//     someone asked to have entered: an unplugged submit, the last
//     Unplug, Flush (so Wait and WaitGroup), a full queue, a
//     resubmission, a watchdog's cancel, Close. The kernel is told to take
//     that many (to_submit), so an entry in progress never takes in SQEs
//     prepared under a plug that nobody released, flushed or filled.
//   - The role is bounded: its holder enters what was wanted when it took
//     the role, then at most maxEntriesForOthers more times for what
//     others wanted meanwhile; if more is wanted still, it hands that to
//     the ring's enterer goroutine and returns. So once enterLocked
//     returns, every SQE wanted so far is in the kernel, or an entry in
//     progress or the enterer goroutine will enter it without anybody's
//     further help; a failure reaches its operations through their
//     completions.
//   - sqMu is dropped inside enterLocked and while waiting for an entry in
//     progress to end; what was checked before is checked again after.
//     submit checks closed and dead in the same hold of sqMu in which it
//     takes its SQE and counts the operation in inflight, and Close sets
//     closed under sqMu before it waits for inflight: Close waits for
//     every operation it let in, and lets none in after. Close unmaps
//     the ring only once the reaper and the enterer goroutine have
//     stopped and no entry is in progress.
//   - An operation is never abandoned: every submitted operation gets
//     exactly one completion, and Wait and WaitGroup return only once it
//     arrived, whatever else fails. A ring whose kernel entry fails for a
//     reason other than an interruption is dead: the operations it could
//     not hand to the kernel complete at once with ECANCELED, those the
//     kernel holds complete as the kernel finishes them, or with ECANCELED
//     if the reaper dies too (their memory stays reachable from the ring
//     in case the kernel still writes it), and every later submission
//     fails with ErrDead.
//   - A completion with ECANCELED from the kernel is not the
//     operation's outcome: io-wq cancels work it never started when it
//     cannot get a worker thread for it, and the ring's watchdog cancels
//     work the kernel sat on (below). Such a read, write, fsync or NOP is
//     submitted again, still in its slot, up to maxKernelCancelRetries
//     times (by a goroutine of the ring's own: the reaper must not take
//     the mutex); only then does its ECANCELED reach the caller. A
//     URING_CMD is submitted twice only if it is idempotent
//     (IdempotentCmd): never a write or a Zone Append.
//   - The watchdog: an operation that may be submitted again and has been
//     in the kernel longer than Options.StuckAfter is asked to be
//     canceled (ASYNC_CANCEL by its user data, which carries the slot's
//     generation, so a slot reused meanwhile is never hit). Work the
//     kernel has not started completes with ECANCELED and goes in again;
//     work in progress is left alone. On 6.18 a buffered read of an emu
//     device's file, punted to io-wq, now and then never completed (no
//     CQE, no io-wq worker busy; recovery hung in TestPowerCutLoop).
//     Wait and WaitGroup still wait for the one completion.
package uring

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/pawelgaczynski/giouring"
	"golang.org/x/sys/unix"
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

// ErrDead is returned for operations submitted to a ring that can no longer
// enter the kernel or reap completions; the error wraps the cause too.
var ErrDead = errors.New("uring: ring failed")

// Options configure a ring.
type Options struct {
	// Entries is the submission queue size (a power of two is used); the
	// completion queue, and so the number of operations in flight, is
	// twice that. Default 256.
	Entries uint32
	// Big makes a ring with 128-byte SQEs and 32-byte CQEs, as NVMe
	// passthrough (URING_CMD) needs.
	Big bool
	// Iovecs is how many iovecs each slot holds without growing
	// (default maxInlineIovecs): a readv or writev of more buffers
	// grows its slot's array once, on the submitter, and the slot keeps
	// it. They are made at New, one array for all slots.
	Iovecs int
	// StuckAfter is how long an operation that may be submitted again
	// stays in the kernel before the watchdog asks the kernel to cancel
	// it (see the package doc). Default defaultStuckAfter.
	StuckAfter time.Duration

	// waitInKernel makes the reaper wait in io_uring_enter even where
	// the kernel takes an eventfd (tests of that path).
	waitInKernel bool
}

// defaultStuckAfter is far above any latency of a working device (an
// emu read takes microseconds, a loaded disk's hundreds of milliseconds):
// a cancel of work in progress does nothing, but a false alarm costs an
// ASYNC_CANCEL and a log line.
const defaultStuckAfter = 5 * time.Second

// Stats are cumulative counters of a ring.
type Stats struct {
	SQEs         uint64 `json:"sqes"`          // operations submitted to the kernel
	StuckCancels uint64 `json:"stuck_cancels"` // cancels the watchdog asked for
	StuckFound   uint64 `json:"stuck_found"`   // of them, work the kernel had not started (submitted again)
	SubmitEnters uint64 `json:"submit_enters"` // io_uring_enter calls that submitted SQEs
	WaitEnters   uint64 `json:"wait_enters"`   // times the reaper waited for completions (in Go's netpoller, or in io_uring_enter)
	Completions  uint64 `json:"completions"`   // completions delivered
	// KernelCancels counts operations the kernel completed with
	// ECANCELED although zonefold never canceled them (io-wq could not
	// run them); each was submitted again, up to maxKernelCancelRetries
	// times.
	KernelCancels uint64 `json:"kernel_cancels"`
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

		KernelCancels: s.KernelCancels - earlier.KernelCancels,
	}
}

// wakeUserData marks the completion of the ring's wake-up read: Close
// writes the eventfd it reads, which stops the reaper without a
// submission (a dead ring cannot submit).
const wakeUserData = ^uint64(0)

// cancelUserData marks the completion of a watchdog's ASYNC_CANCEL.
const cancelUserData = ^uint64(0) - 1

// maxKernelCancelRetries bounds how often an operation the kernel canceled
// on its own is submitted again before its ECANCELED is reported.
const maxKernelCancelRetries = 8

// noSlot stands in queued for an SQE of the ring's own (the wake-up read,
// a stop NOP), which has no slot.
const noSlot = ^uint32(0)

// maxInlineIovecs is how many iovecs a slot holds without growing.
const maxInlineIovecs = 8

type slot struct {
	c Completion
	// keep and iov keep the operation's memory reachable (and its iovec
	// array stable) until completion.
	keep []byte
	bufs [][]byte
	iov  []syscall.Iovec
	// sqe is a copy of the operation's SQE as prepared, to submit it
	// again if the kernel cancels it on its own (see resubmit), and
	// tries counts those cancels. Both belong to whoever owns the slot
	// while it is in flight: the submitter, then the reaper, then the
	// resubmitter.
	sqe   [128]byte
	tries uint8
	again bool // may be submitted again after a kernel cancel
	// fake marks an operation that fakeCancels turned into a NOP whose
	// completion reads as the kernel's ECANCELED (tests only).
	fake bool
	// gen numbers the slot's operations; the SQE's user data is the
	// slot index and gen, so that a watchdog's cancel names one
	// operation, not whichever holds the slot by then. Submitter's.
	gen uint32
	// watchUD is the user data of an operation the watchdog may cancel
	// (0: none), armedAt when it went to the kernel (Ring.clock), and
	// cancelAsked says the watchdog asked already.
	watchUD     atomic.Uint64
	armedAt     atomic.Int64
	cancelAsked atomic.Bool
	// armed is 1 while the operation is in flight. It publishes the
	// fields above to the reaper (the kernel orders the submitter's
	// writes before the completion, but the race detector cannot see
	// through the kernel) and decides, by compare-and-swap, who delivers
	// the completion: the reaper, or a dying ring failing it.
	armed atomic.Uint32
}

// Ring is an io_uring instance shared by any number of goroutines.
type Ring struct {
	ring *giouring.Ring
	big  bool

	sqMu      sync.Mutex
	plugDepth int
	pending   uint32 // SQEs prepared but not yet entered
	// want is how many of the pending SQEs, oldest first, someone asked
	// to have entered (enterLocked); only those enter the kernel, so a
	// plugged batch nobody released stays out. want <= pending.
	want uint32
	// entering is set, under sqMu, while a goroutine holds the entering
	// role: it is in the kernel entering SQEs without sqMu held
	// (enterRoleLocked). It clears entering and broadcasts entered (a
	// Cond on sqMu) after each entry.
	entering bool
	entered  sync.Cond
	// handoff wakes the enterer goroutine (enterer), to which a role
	// holder that reached its bound hands what is still wanted; it stops
	// at Close (entererStop, entererDone).
	handoff     chan struct{}
	entererStop chan struct{}
	entererDone chan struct{}
	// queued are the slots of those SQEs, in order: the kernel takes
	// SQEs in order, so after a failed entry they are the ones it never
	// saw. Under sqMu.
	queued     []uint32
	closed     bool
	inflight   sync.WaitGroup
	reaperDone chan struct{}

	slots []slot
	free  chan uint32 // indices of free slots
	// retry carries slots the kernel canceled on its own from the reaper
	// (which must not take sqMu) to the resubmitter; it holds every slot,
	// so sending never blocks.
	retry chan uint32

	sqes, submitEnters, waitEnters, completions, kernelCancels atomic.Uint64
	stuckCancels, stuckFound                                   atomic.Uint64

	// The watchdog (see the package doc).
	born       time.Time
	stuckAfter time.Duration
	watchStop  chan struct{}
	watchDone  chan struct{}

	// dead is the error that killed the ring; set once.
	dead atomic.Pointer[error]
	// orphans keeps the memory of operations failed while the kernel
	// may still hold them (written by the dying reaper only).
	orphans [][]byte

	// The wake-up read: an eventfd read always in flight, which Close
	// completes by writing the eventfd.
	wakeFd   int
	wakeBuf  [8]byte
	closing  atomic.Bool
	wakeGone atomic.Bool // the wake-up read completed before Close

	// cqEvents is an eventfd registered with the ring (the kernel adds
	// to it as it posts completions), read through Go's netpoller: the
	// reaper parks there when the completion queue is empty. nil where
	// the kernel refused it: the reaper then waits in io_uring_enter.
	// Waiting in the kernel, a blocking system call, cost the daemon a
	// fifth of its CPU on cold 4k reads at iodepth 32: the scheduler's
	// monitor took the reaper's P back each time and, seeing system
	// calls block, kept polling every 20 µs (runtime.sysmon 13% of the
	// daemon's samples, and the futex wakes of handing Ps around).
	cqEvents *os.File
	cqBuf    [8]byte
	// cqRaw is cqEvents' descriptor for the reaper's raw reads, and
	// cqRead that read as a func value, made once (see waitEvents).
	cqRaw  syscall.RawConn
	cqRead func(fd uintptr) bool
	cqErr  error

	// fakeCancels is a test-only fault injector: while positive, each
	// submission consumes one and goes to the kernel as a NOP whose
	// completion is reported as ECANCELED, exactly what an io-wq cancel
	// looks like (the operation never ran). The kernel's conditions for
	// such a cancel cannot be forced from a test. Always 0 outside tests.
	fakeCancels atomic.Int32

	dispatch func(*giouring.CompletionQueueEvent)
	reaped   uint32 // CQEs seen in the current pass (reaper only)
	stop     bool   // the wake-up came from Close (reaper only)
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
	stuckAfter := opts.StuckAfter
	if stuckAfter <= 0 {
		stuckAfter = defaultStuckAfter
	}
	r := &Ring{
		ring:       gr,
		big:        opts.Big,
		born:       time.Now(),
		stuckAfter: stuckAfter,
		watchStop:  make(chan struct{}),
		watchDone:  make(chan struct{}),
		slots:      make([]slot, nslots),
		free:       make(chan uint32, nslots),
		retry:      make(chan uint32, nslots),
		queued:     make([]uint32, 0, sq),
		reaperDone: make(chan struct{}),

		handoff:     make(chan struct{}, 1),
		entererStop: make(chan struct{}),
		entererDone: make(chan struct{}),
	}
	iovecs := opts.Iovecs
	if iovecs <= 0 {
		iovecs = maxInlineIovecs
	}
	iovs := make([]syscall.Iovec, int(nslots)*iovecs)
	for i := range nslots {
		r.slots[i].iov = iovs[int(i)*iovecs : int(i)*iovecs : int(i+1)*iovecs]
		r.free <- uint32(i)
	}
	r.dispatch = r.dispatchCQE
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		r.unmap()
		return nil, fmt.Errorf("uring: eventfd: %w", err)
	}
	r.wakeFd = efd
	if !opts.waitInKernel {
		r.cqEvents = completionEvents(gr)
	}
	if r.cqEvents != nil {
		if r.cqRaw, err = r.cqEvents.SyscallConn(); err != nil {
			r.cqEvents.Close()
			r.cqEvents = nil
		}
		r.cqRead = r.readEvents
	}
	r.entered.L = &r.sqMu
	r.sqMu.Lock()
	sqe := gr.GetSQE()
	r.fill(sqe, nil, &op{code: giouring.OpRead, file: FD(efd), addr: bufAddr(r.wakeBuf[:]), length: 8})
	sqe.UserData = wakeUserData
	r.pending++
	r.queued = append(r.queued, noSlot)
	err = r.enterLocked()
	r.sqMu.Unlock()
	if err != nil {
		unix.Close(efd)
		if r.cqEvents != nil {
			r.cqEvents.Close()
		}
		r.unmap()
		return nil, fmt.Errorf("uring: arm the wake-up read: %w", err)
	}
	go r.reap()
	go r.resubmitter()
	go r.watchdog()
	go r.enterer()
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

		KernelCancels: r.kernelCancels.Load(),
		StuckCancels:  r.stuckCancels.Load(),
		StuckFound:    r.stuckFound.Load(),
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

// maxEntriesForOthers bounds the entering role: after the entry (or
// entries) of what was wanted when it took the role, its holder enters at
// most this many more times for what others wanted meanwhile, then hands
// the rest to the enterer goroutine. Its own operations are in the kernel
// already; each further entry only delays its return by an
// io_uring_enter. One more batches what arrived during its own entry
// (the common case under load) without a hand-off.
const maxEntriesForOthers = 1

// enterLocked has every prepared SQE entered into the kernel (they are
// all wanted now): it takes the entering role and enters them, or, if an
// entry is in progress, leaves them to it and returns at once. See the
// package doc for the protocol. Interrupted or momentarily refused
// entries are retried: the reaper keeps draining completions meanwhile.
// Any other failure kills the ring, which fails the operations the
// kernel did not take. sqMu is dropped and taken again inside.
//
// The entry runs without sqMu because a direct read's io_uring_enter
// dispatches to the device inline (on a virtio disk, a notification that
// exits to the host: 20-50 µs a call): holding the mutex across it held
// every other submitter for that long — fio's cold 4k reads through the
// daemon at iodepth 32 spent as long waiting in Plug for sqMu as reading
// (block profile), one entry per read.
func (r *Ring) enterLocked() error {
	r.want = r.pending
	if r.entering {
		return nil // the entry in progress takes them, or hands them on
	}
	return r.enterRoleLocked(maxEntriesForOthers)
}

// enterRoleLocked holds the entering role until nothing is wanted: it
// enters what is wanted when it starts, then up to others more times for
// what is wanted meanwhile (others < 0: no bound, the enterer goroutine),
// then hands the rest to the enterer goroutine. Called with sqMu held and
// entering clear; returns the same way.
func (r *Ring) enterRoleLocked(others int) error {
	mine := r.want
	yielded := false
	for {
		if p := r.dead.Load(); p != nil {
			r.failQueuedLocked() // prepared after the ring died
			return *p
		}
		if r.want == 0 {
			return nil
		}
		if mine == 0 {
			if others == 0 {
				select {
				case r.handoff <- struct{}{}:
				default: // a hand-off is pending already: the enterer will see this one too
				}
				return nil
			}
			if others > 0 {
				others--
			}
		}
		r.entering = true
		if !yielded {
			// Let the goroutines that are runnable now run before
			// the first entry: woken together (a connection's batch
			// of requests), they would otherwise each enter their own
			// SQE in turn, a device notification per request; this
			// way they leave their SQEs to this entry. With nothing
			// else runnable it returns at once. Once per role, so a
			// holder gives way to the others' work once, not for
			// every entry it makes for them.
			yielded = true
			r.sqMu.Unlock()
			runtime.Gosched()
			r.sqMu.Lock()
			if r.dead.Load() != nil {
				r.entering = false
				r.entered.Broadcast()
				continue // fails what is queued, above
			}
		}
		// Publish everything prepared (the kernel reads nothing past
		// to_submit, and nothing more is written to these SQEs), but
		// have the kernel take only what is wanted.
		n := min(flushSQ(r.ring), r.want)
		r.sqMu.Unlock()
		if h := enterHook.Load(); h != nil {
			(*h)(r)
		}
		// Counted before the entry: the kernel may complete what it
		// takes, and the reaper deliver it, before this goroutine is
		// back from the system call, and a caller reading Stats on its
		// completion must find its entry counted. What it did not take
		// is taken back below.
		r.submitEnters.Add(1)
		r.sqes.Add(uint64(n))
		got, err := enterSQ(r.ring, n)
		if h := enteredHook.Load(); h != nil {
			(*h)(r)
		}
		r.sqMu.Lock()
		r.entering = false
		r.entered.Broadcast()
		if err != nil {
			got = 0
			r.submitEnters.Add(^uint64(0))
		}
		if uint32(got) < n {
			r.sqes.Add(^uint64(n - uint32(got) - 1))
		}
		if err == nil {
			took := min(uint32(got), r.pending)
			r.pending -= took
			r.want -= min(took, r.want)
			r.queued = r.queued[:copy(r.queued, r.queued[took:])]
			mine -= min(took, mine)
			continue // enter what others wanted meanwhile
		}
		if errors.Is(err, syscall.EINTR) || errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EBUSY) {
			continue
		}
		r.markDead(fmt.Errorf("uring: submit %d SQEs: %w", n, err))
		r.failQueuedLocked()
		return *r.dead.Load()
	}
}

// enterer takes over the entering role when a holder that reached its
// bound hands it on, until Close stops it. It enters for as long as
// anything is wanted: it is nobody's submission that waits meanwhile.
func (r *Ring) enterer() {
	defer close(r.entererDone)
	for {
		select {
		case <-r.entererStop:
			return
		case <-r.handoff:
		}
		r.sqMu.Lock()
		if !r.entering { // else the entry in progress takes it
			_ = r.enterRoleLocked(-1)
		}
		r.sqMu.Unlock()
	}
}

// sqeLocked returns a free SQE. If the queue is full, it has everything
// prepared entered (a plugged batch included: the queue filled) and takes
// the room that frees, waiting for an entry in progress if there is one.
// As sqMu may be dropped meanwhile, it checks the ring's state every time
// before it takes an SQE: it fails with ErrClosed on a closed ring if
// refuseClosed, and with the ring's error on a dead one. Under sqMu.
func (r *Ring) sqeLocked(refuseClosed bool) (*giouring.SubmissionQueueEntry, error) {
	for {
		if refuseClosed && r.closed {
			return nil, ErrClosed
		}
		if p := r.dead.Load(); p != nil {
			return nil, *p
		}
		if sqe := r.ring.GetSQE(); sqe != nil {
			return sqe, nil
		}
		if r.entering {
			r.want = r.pending
			r.entered.Wait()
		} else if err := r.enterLocked(); err != nil {
			return nil, err
		}
	}
}

// enterHook, if set (tests only), runs in enterLocked's entry, without
// sqMu held, just before the kernel is entered.
var enterHook atomic.Pointer[func(*Ring)]

// enteredHook, if set (tests only), runs in enterLocked's entry just
// after the kernel returns, before sqMu is taken again.
var enteredHook atomic.Pointer[func(*Ring)]

// reapHook, if set (tests only), runs in the reaper after a pass that
// delivered completions, before it advances the completion queue's head.
var reapHook atomic.Pointer[func(*Ring)]

// flushSQ publishes the prepared SQEs to the kernel (the SQ tail) and
// returns how many it has not taken yet: liburing's __io_uring_flush_sq,
// which giouring does not export. Under sqMu.
//
//go:linkname flushSQ github.com/pawelgaczynski/giouring.(*Ring).internalFlushSQ
func flushSQ(*giouring.Ring) uint32

// enterSQ enters n published SQEs, as giouring's internalSubmit(n, 0,
// false) would (liburing's __io_uring_submit after the flush: GETEVENTS
// only where the CQ overflowed, to flush the kernel's overflow list, so
// it never waits for completions), but as a raw system call. An entry
// announced to the scheduler (giouring's Enter, syscall.Syscall6) costs
// the daemon twice on this VM: entered while every P is idle, it wakes
// sysmon from its deep sleep and resets it to polling every 20 µs for
// the next millisecond and more ("it resets idle and delay as a bet",
// runtime.sysmon), and an entry that dispatches to a virtio disk (20-50
// µs) outlasts sysmon's tick, so sysmon takes its P away and wakes
// another thread for it, which the entering thread must win back. Raw,
// the thread keeps its P, as the server's futex wake and doorbell
// receive do for theirs. It runs without sqMu (it touches no SQ state
// of the Ring's own). The ring has no SQPOLL, IOPOLL or registered ring
// descriptor, so this is all internalSubmit does for it.
func enterSQ(ring *giouring.Ring, n uint32) (uint, error) {
	var flags uintptr
	if ring.CQHasOverflow() {
		flags |= uintptr(giouring.EnterGetEvents)
	} else if n == 0 {
		return 0, nil
	}
	got, _, errno := unix.RawSyscall6(unix.SYS_IO_URING_ENTER, uintptr(ring.RingFd()), uintptr(n), 0, flags, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return uint(got), nil
}

// failQueuedLocked fails the operations of the SQEs the kernel never took,
// on a dead ring. Their completions are delivered by a goroutine of their
// own, as the reaper would: the caller holds sqMu, and Complete may take
// locks of its own.
func (r *Ring) failQueuedLocked() {
	failed := r.disarm(r.queued, nil)
	r.queued = r.queued[:0]
	r.pending, r.want = 0, 0
	if len(failed) > 0 {
		go r.fail(failed)
	}
}

// markDead records why the ring died, the first time.
func (r *Ring) markDead(cause error) {
	dead := fmt.Errorf("%w: %w", ErrDead, cause)
	if r.dead.CompareAndSwap(nil, &dead) {
		slog.Error("uring: ring failed; its operations fail with ECANCELED", "err", cause)
	}
}

// disarm takes the slots that are still in flight out of flight (whoever
// wins the compare-and-swap delivers the completion) and appends them to
// dst.
func (r *Ring) disarm(slots []uint32, dst []uint32) []uint32 {
	for _, idx := range slots {
		if idx != noSlot && r.slots[idx].armed.CompareAndSwap(1, 0) {
			dst = append(dst, idx)
		}
	}
	return dst
}

// fail completes disarmed operations with ECANCELED.
func (r *Ring) fail(slots []uint32) {
	for _, idx := range slots {
		r.complete(idx, Result{Res: -int32(syscall.ECANCELED)})
	}
}

// Err is the error that killed the ring, or nil while it works.
func (r *Ring) Err() error {
	if p := r.dead.Load(); p != nil {
		return *p
	}
	return nil
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
	// closed and dead are checked, and the operation counted in
	// inflight, in one hold of sqMu (see the package doc).
	sqe, err := r.sqeLocked(true)
	if err != nil {
		r.sqMu.Unlock()
		r.release(idx)
		return err
	}
	r.fill(sqe, s, o)
	s.gen++
	sqe.UserData = uint64(idx) | uint64(s.gen)<<32
	copy(s.sqe[:], r.sqeBytes(sqe))
	s.tries, s.again = 0, o.again || resubmittable(o.code)
	r.maybeFakeCancel(sqe, s)
	if s.again {
		s.watchUD.Store(sqe.UserData)
	} else {
		s.watchUD.Store(0)
	}
	s.armedAt.Store(r.clock())
	s.cancelAsked.Store(false)
	s.armed.Store(1)
	r.inflight.Add(1)
	r.pending++
	r.queued = append(r.queued, idx)
	if r.plugDepth == 0 {
		// Once the SQE is prepared the operation is the ring's: if the
		// entry fails, the dead ring completes it with an error, so
		// the caller learns of it from the completion, once.
		_ = r.enterLocked()
	}
	r.sqMu.Unlock()
	return nil
}

func (r *Ring) release(idx uint32) {
	s := &r.slots[idx]
	s.c, s.keep, s.bufs = nil, nil, nil
	r.free <- idx
}

// complete delivers one operation's result and frees its slot.
func (r *Ring) complete(idx uint32, res Result) {
	c := r.slots[idx].c
	r.release(idx)
	r.completions.Add(1)
	r.inflight.Done()
	if c != nil {
		c.Complete(res)
	}
}

// resubmittable reports whether an operation the kernel canceled without
// running it may simply be submitted again. Reads, writes, fsync and NOP
// may: io-wq's ECANCELED means io-wq never ran the work. It is not
// proof that no byte moved: io_uring may have done part of a write
// inline before handing the rest to io-wq. A positional write sent
// again still cannot apply twice: on a regular file or the soft backend
// it rewrites the same bytes; on a zoned block device the writer keeps
// one write in flight per zone, so a retry behind a partial inline
// write would fail the write-pointer check (EIO: the engine retires the
// zone and writes its data elsewhere), not land twice (not seen). A
// URING_CMD may only if its submitter says so (IdempotentCmd): NVMe
// passthrough has completion paths of its own, and a Zone Append that
// had reached the device must never be sent twice.
func resubmittable(opcode uint8) bool {
	switch opcode {
	case giouring.OpNop, giouring.OpRead, giouring.OpWrite, giouring.OpReadv, giouring.OpWritev,
		giouring.OpReadFixed, giouring.OpWriteFixed, giouring.OpFsync:
		return true
	}
	return false
}

// resubmitter submits again, one by one, the operations the reaper hands
// it, until Close closes the channel (only once nothing is in flight).
func (r *Ring) resubmitter() {
	for idx := range r.retry {
		r.resubmit(idx)
	}
}

// resubmit enters the saved SQE of an operation the kernel canceled on its
// own once more. The operation never left flight (its slot, buffers and
// iovecs are held, and Close still waits for it); if the ring died
// meanwhile it fails with ECANCELED as a dying ring's operations do.
//
// Why the kernel cancels: an fsync (and any operation that would block)
// is handed to the submitting thread's io-wq, and io-wq completes work it
// has not started with ECANCELED when it cannot create a worker thread
// for it (create_io_thread keeps failing, e.g. while a signal such as the
// Go runtime's preemption SIGURG is pending; newer kernels give up after a
// few retries) or when the task's io-wq is exiting.
func (r *Ring) resubmit(idx uint32) {
	s := &r.slots[idx]
	slog.Warn("uring: an operation was canceled before it ran (by io-wq, or by the watchdog); submitting it again",
		"opcode", s.sqe[0], "attempt", s.tries)
	r.sqMu.Lock()
	// Closed or not: Close waits for this operation.
	sqe, err := r.sqeLocked(false)
	if err != nil {
		r.sqMu.Unlock()
		r.fail([]uint32{idx})
		return
	}
	copy(r.sqeBytes(sqe), s.sqe[:])
	r.maybeFakeCancel(sqe, s)
	s.armedAt.Store(r.clock())
	s.cancelAsked.Store(false)
	s.armed.Store(1)
	r.pending++
	r.queued = append(r.queued, idx)
	// Entered at once, plugged or not: its waiter flushed already.
	_ = r.enterLocked()
	r.sqMu.Unlock()
}

// maybeFakeCancel turns the SQE into a NOP whose completion will read as
// ECANCELED, if a test asked for it (see fakeCancels).
func (r *Ring) maybeFakeCancel(sqe *giouring.SubmissionQueueEntry, s *slot) {
	if r.fakeCancels.Load() <= 0 || r.fakeCancels.Add(-1) < 0 {
		return
	}
	ud := sqe.UserData
	clear(r.sqeBytes(sqe))
	sqe.OpCode = giouring.OpNop
	sqe.UserData = ud
	s.fake = true
}

// sqeBytes is the whole SQE: 128 bytes on a big ring.
func (r *Ring) sqeBytes(sqe *giouring.SubmissionQueueEntry) []byte {
	n := 64
	if r.big {
		n = 128
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(sqe)), n)
}

// reap delivers completions until Close. If waiting for them fails for
// good, it fails every operation in flight and the ring is dead.
func (r *Ring) reap() {
	defer close(r.reaperDone)
	for {
		r.reaped = 0
		r.ring.ForEachCQE(r.dispatch)
		if r.reaped > 0 {
			if h := reapHook.Load(); h != nil {
				(*h)(r)
			}
			r.ring.CQAdvance(r.reaped)
		}
		if r.stop {
			return
		}
		if r.reaped > 0 {
			continue
		}
		r.waitEnters.Add(1)
		if r.cqEvents != nil && !r.ring.CQHasOverflow() {
			if err := r.waitEvents(); err != nil {
				r.die(fmt.Errorf("uring: wait for completions: %w", err))
				return
			}
			continue
		}
		// In the kernel: no eventfd, or completions in the kernel's
		// overflow list (the queue was full when they came), which an
		// entry moves into the queue. No eventfd signal tells of those,
		// nor of any completion after them: until the list is flushed
		// the kernel overflows every new one too. The queue is empty
		// here, so it cannot fill (and overflow) again before the
		// completions that fill it have signaled the eventfd.
		minComplete := uint32(1)
		if r.cqEvents != nil {
			minComplete = 0
		}
		_, err := r.ring.Enter(0, minComplete, giouring.EnterGetEvents, nil)
		if err != nil && !errors.Is(err, syscall.EINTR) && !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EBUSY) {
			r.die(fmt.Errorf("uring: wait for completions: %w", err))
			return
		}
	}
}

// waitEvents parks the reaper in Go's netpoller until the completion
// eventfd has been signaled, and resets it. The read is a raw system
// call, as the enter's is (enterSQ): os.File's Read tells the scheduler
// it enters the kernel, and any goroutine that does so while every P is
// idle wakes sysmon from its deep sleep, which then polls every 20 µs
// for a millisecond and more (see enterSQ). The eventfd is non-blocking:
// the read never waits in the kernel.
func (r *Ring) waitEvents() error {
	r.cqErr = nil
	if err := r.cqRaw.Read(r.cqRead); err != nil {
		return err
	}
	return r.cqErr
}

// readEvents is waitEvents' read: false (park in the poller) while the
// eventfd is zero.
func (r *Ring) readEvents(fd uintptr) bool {
	for {
		_, _, errno := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&r.cqBuf[0])), uintptr(len(r.cqBuf)))
		switch errno {
		case 0:
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		r.cqErr = errno
		return true
	}
}

// die is the reaper's end on a fatal error: nobody will deliver another
// completion, so every operation in flight fails now, without a lock
// (disarming decides who delivers each). Their memory stays referenced by
// the ring: the kernel may still be using it. An operation armed after
// the scan is failed by the next enterLocked, which every waiter calls.
func (r *Ring) die(err error) {
	r.markDead(err)
	var all []uint32
	for i := range r.slots {
		if s := &r.slots[i]; s.armed.CompareAndSwap(1, 0) {
			all = append(all, uint32(i))
			r.orphans = append(r.orphans, s.keep)
			r.orphans = append(r.orphans, s.bufs...)
		}
	}
	r.fail(all)
}

func (r *Ring) dispatchCQE(cqe *giouring.CompletionQueueEvent) {
	r.reaped++
	if cqe.UserData == wakeUserData {
		if r.closing.Load() {
			r.stop = true
		} else {
			r.wakeGone.Store(true) // Close falls back to a NOP
		}
		return
	}
	if cqe.UserData == cancelUserData {
		if cqe.Res == 0 {
			r.stuckFound.Add(1)
		}
		return
	}
	res := Result{Res: cqe.Res, Flags: cqe.Flags}
	if r.big {
		big := (*[2]uint64)(unsafe.Add(unsafe.Pointer(cqe), 16))
		res.Big = *big
	}
	idx := uint32(cqe.UserData)
	s := &r.slots[idx]
	if !s.armed.CompareAndSwap(1, 0) {
		return // failed already by a dying ring
	}
	if s.fake {
		s.fake = false
		res.Res = -int32(syscall.ECANCELED)
	}
	if s.sqe[0] == giouring.OpTimeout && res.Res == -int32(syscall.ETIME) {
		res.Res = 0 // the timer expired: what Timeout asked for
	}
	if res.Res == -int32(syscall.ECANCELED) && s.tries < maxKernelCancelRetries && s.again {
		// zonefold cancels only what its watchdog finds stuck (no
		// links, no linked timeouts; a dying ring fails its operations
		// without a CQE): the kernel or the watchdog canceled this one,
		// and only work never started is canceled. See resubmit.
		s.tries++
		r.kernelCancels.Add(1)
		r.retry <- idx
		return
	}
	r.complete(idx, res)
}

// Close waits for every operation in flight to complete, stops the reaper
// and releases the ring. Operations submitted after Close fail with
// ErrClosed. Close of a dead ring returns the error that killed it.
func (r *Ring) Close() error {
	r.sqMu.Lock()
	if r.closed {
		r.sqMu.Unlock()
		return nil
	}
	r.closed = true
	_ = r.enterLocked() // a failure kills the ring and fails what it held
	r.sqMu.Unlock()
	r.inflight.Wait()
	close(r.retry) // nothing in flight: nothing left to resubmit
	close(r.watchStop)
	<-r.watchDone

	r.closing.Store(true)
	var err error
	if r.wakeGone.Load() {
		err = r.stopWithNop()
	} else {
		var one [8]byte
		one[0] = 1
		_, err = unix.Write(r.wakeFd, one[:])
	}
	if err != nil {
		// The reaper cannot be stopped: leave it and its memory be.
		return fmt.Errorf("uring: close: stop the reaper: %w", err)
	}
	<-r.reaperDone
	if r.cqEvents != nil {
		r.cqEvents.Close()
	}
	close(r.entererStop)
	<-r.entererDone
	// An entry may still be on its way out of the kernel (all it
	// entered has completed): it touches the SQ once more. What is left
	// prepared has no slot (a watchdog's cancel of what completed since)
	// and stays out: nothing may enter the ring once it is unmapped.
	r.sqMu.Lock()
	for r.entering {
		r.entered.Wait()
	}
	r.pending, r.want = 0, 0
	r.queued = r.queued[:0]
	r.sqMu.Unlock()
	r.unmap()
	unix.Close(r.wakeFd)
	return r.Err()
}

// stopWithNop stops the reaper with a NOP, if the wake-up read is gone.
func (r *Ring) stopWithNop() error {
	r.sqMu.Lock()
	defer r.sqMu.Unlock()
	sqe, err := r.sqeLocked(false)
	if err != nil {
		return err
	}
	clear(r.sqeBytes(sqe))
	sqe.OpCode = giouring.OpNop
	sqe.UserData = wakeUserData
	r.pending++
	r.queued = append(r.queued, noSlot)
	return r.enterLocked()
}

// completionEvents registers a non-blocking eventfd for gr's completions
// and returns it as a file Go's netpoller waits on, or nil if the kernel
// refuses.
func completionEvents(gr *giouring.Ring) *os.File {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil
	}
	if _, err := gr.RegisterEventFd(efd); err != nil {
		unix.Close(efd)
		return nil
	}
	f := os.NewFile(uintptr(efd), "io_uring completions")
	// A file the netpoller did not take (its epoll registration
	// failed) has no deadlines, and its Read would return EAGAIN on an
	// empty eventfd instead of parking: wait in the kernel then.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		gr.UnregisterEventFd(efd)
		f.Close()
		return nil
	}
	return f
}

// unmap releases the ring's memory and descriptor.
func (r *Ring) unmap() {
	if r.big {
		unmapSQE128Tail(r.ring)
	}
	r.ring.QueueExit()
}

// unmapSQE128Tail works around giouring's QueueExit, which unmaps
// entries*64 bytes of the SQE array also on rings with 128-byte SQEs
// (SetupSQE128), so that every big ring's Close leaked the array's second
// half. Before QueueExit it unmaps that half itself; QueueExit then unmaps
// the first half as it does. giouring keeps the array's address and size
// unexported, so they are read (only read) through reflection from the
// version go.mod pins; TestCloseUnmapsBigRings watches /proc/self/maps in
// case a new version changes them or fixes the bug (then this must go).
func unmapSQE128Tail(gr *giouring.Ring) {
	sq := reflect.ValueOf(gr).Elem().FieldByName("sqRing")
	if !sq.IsValid() || sq.Kind() != reflect.Pointer || sq.IsNil() {
		return
	}
	sqes, entries := sq.Elem().FieldByName("sqes"), sq.Elem().FieldByName("ringEntries")
	if !sqes.IsValid() || !entries.IsValid() || sqes.Kind() != reflect.Pointer || entries.Kind() != reflect.Pointer || sqes.IsNil() || entries.IsNil() {
		return
	}
	n := uintptr(*(*uint32)(entries.UnsafePointer())) * 64
	// Not unix.Munmap: it refuses memory that unix.Mmap did not map.
	if _, _, e := unix.Syscall(unix.SYS_MUNMAP, uintptr(unsafe.Add(sqes.UnsafePointer(), n)), n, 0); e != 0 {
		slog.Warn("uring: unmap the second half of a big ring's SQEs", "err", e)
	}
}

// clock is the time since the ring was made, for the watchdog.
func (r *Ring) clock() int64 { return int64(time.Since(r.born)) }

// maxStuckCancelsPerTick bounds the watchdog's cancels per look: each
// takes a CQE beyond the slots' (the kernel keeps overflowing CQEs).
const maxStuckCancelsPerTick = 8

// watchdog looks at the operations in flight four times per stuckAfter
// and asks the kernel to cancel those that may be submitted again and
// have been in it longer than stuckAfter, once per submission. It ends
// when Close has seen every operation complete.
func (r *Ring) watchdog() {
	defer close(r.watchDone)
	t := time.NewTicker(r.stuckAfter / 4)
	defer t.Stop()
	for {
		select {
		case <-r.watchStop:
			return
		case <-t.C:
		}
		now, asked := r.clock(), 0
		for i := range r.slots {
			s := &r.slots[i]
			if asked == maxStuckCancelsPerTick {
				break
			}
			ud := s.watchUD.Load()
			if ud == 0 || s.armed.Load() != 1 || now-s.armedAt.Load() < int64(r.stuckAfter) || s.cancelAsked.Load() {
				continue
			}
			s.cancelAsked.Store(true)
			asked++
			slog.Warn("uring: an operation has been in the kernel too long; asking the kernel to cancel it, to submit it again if it never started",
				"slot", i, "after", time.Duration(now-s.armedAt.Load()))
			r.cancel(ud)
		}
	}
}

// cancel submits an ASYNC_CANCEL of the operation with user data ud. A
// user data no longer in flight cancels nothing (ENOENT).
func (r *Ring) cancel(ud uint64) {
	r.sqMu.Lock()
	defer r.sqMu.Unlock()
	sqe, err := r.sqeLocked(false)
	if err != nil {
		return
	}
	clear(r.sqeBytes(sqe))
	sqe.PrepareCancel64(ud, 0)
	sqe.UserData = cancelUserData
	r.stuckCancels.Add(1)
	r.pending++
	r.queued = append(r.queued, noSlot)
	_ = r.enterLocked()
}
