package server

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The rings of protocol version 2 (docs/protocol.md, "Rings"): a
// submission ring (SQ) the client fills with requests and a completion
// ring (CQ) the daemon fills with replies, both in the shared region,
// after the part for data and names. Each side publishes with a release
// store of its tail and wakes the other only when the other has said it
// sleeps: the client rings the daemon's doorbell (one byte on the
// socket, where the daemon's reader sleeps in the poller), the daemon
// wakes the futex on the client's CQWaiting word.

// Ring limits.
const (
	// DefaultRingEntries is the ring size a client gets when it asks
	// for 0 entries.
	DefaultRingEntries = 256
	// MaxRingEntries is the largest ring, and so the most requests a
	// version 2 connection may have outstanding.
	MaxRingEntries = 4096
	// minRingEntries is the smallest ring the daemon makes.
	minRingEntries = 8
)

// The ring area's control words, each on its own cache line, as byte
// offsets from the start of the ring area. The side that writes a word
// is named; the other only reads it.
const (
	RingSQHead  = 0   // daemon: requests taken off the SQ
	RingSQTail  = 64  // client: requests published on the SQ
	RingSQFlags = 128 // daemon sets SQNeedWakeup; the client clears it as it rings
	RingCQHead  = 192 // client: replies consumed from the CQ
	RingCQTail  = 256 // daemon: replies published on the CQ
	RingCQFlags = 320 // client sets CQWaiting; the daemon clears it as it rings
	RingCQWant  = 384 // client: with CQWant, the completion tail its wait needs
	ringSQOff   = 4096
)

// Ring flags.
//
// A flag word is where the two sides meet: every access to it, by
// either side, is an atomic read-modify-write (setFlag, claimFlag), never
// a plain atomic load or store. The flag words' accesses are then totally
// ordered, each one acquires what the one before it released, and so
// either the side that publishes a tail (a release store, then claimFlag)
// or the side that falls asleep (setFlag, then an acquire load of that
// tail) sees the other, without relying on sequentially consistent loads
// and stores: Go's race detector does not make sync/atomic loads and
// stores on memory outside the Go heap (this region) sequentially
// consistent. They are plain moves there, and a store followed by a load
// of another word could be reordered (store buffering): the client then
// slept without seeing the reply while the daemon missed CQWaiting, and
// both waited for ever (TestRingFlagsNeverLoseAWakeup).
const (
	// SQNeedWakeup: the daemon sleeps; a client that publishes requests
	// clears it and rings the doorbell.
	SQNeedWakeup = 1
	// CQWaiting: the client sleeps (a futex wait on this word); the
	// daemon clears it and wakes the futex when it publishes replies.
	CQWaiting = 1
	// CQWant, set with CQWaiting: the client's wait returns only once
	// the completion tail reaches the index in the RingCQWant word (its
	// head plus the replies it waits for, as io_uring's min_complete),
	// so the daemon wakes it only then, or when it has posted the reply
	// of every request it took (nothing more would come). A daemon that
	// does not know the bit wakes the client at each post, which is
	// still correct: the client looks and sleeps again.
	CQWant = 2
)

// setFlag sets bit in the flag word w: the caller is about to sleep,
// once it has loaded the other side's tail again and found nothing.
func setFlag(w *uint32, bit uint32) { atomic.OrUint32(w, bit) }

// claimFlag clears bit in the flag word w and says whether it was set:
// after publishing its tail, the caller wakes the other side if it did.
// A sleeper that wakes clears its own bit with it too.
func claimFlag(w *uint32, bit uint32) bool { return atomic.AndUint32(w, ^bit)&bit != 0 }

// lostWakeups, set by tests, makes the next n wakeups be lost, as if the
// waker had not seen the sleeper's flag: the waker neither claims the
// flag nor wakes (the safety net of Client.sleep must then find the
// work).
var lostWakeups atomic.Int32

// wakeupLost says whether a test wants this wakeup lost.
func wakeupLost() bool { return lostWakeups.Load() > 0 && lostWakeups.Add(-1) >= 0 }

// ringEntries is the ring size for a client that asked for want entries:
// a power of two within [minRingEntries, MaxRingEntries].
func ringEntries(want uint32) uint32 {
	if want == 0 {
		want = DefaultRingEntries
	}
	n := uint32(minRingEntries)
	for n < want && n < MaxRingEntries {
		n <<= 1
	}
	return n
}

// ringLayout is where a ring area of n entries keeps its entries, and
// its size rounded up to a page.
func ringLayout(n uint32) (sqOff, cqOff uint32, size uint64) {
	sqOff = ringSQOff
	cqOff = sqOff + n*RequestSize
	page := uint64(unix.Getpagesize())
	size = (uint64(cqOff) + uint64(n)*ReplySize + page - 1) / page * page
	return sqOff, cqOff, size
}

// Ring corruption: a client whose indices break these rules loses its
// connection.
var (
	errSQOverrun   = errors.New("submission tail is more than a ring ahead of the head")
	errCQPastTail  = errors.New("completion head is past the completion tail")
	errOutstanding = errors.New("more requests outstanding than the ring has entries")
)

// checkRing checks the indices a client controls, sqTail and cqHead,
// against the daemon's own: head (requests taken) and cqTail (replies
// published). It returns how many new requests there are. All counters
// are free-running u32s, compared modulo 2^32.
//
// The rule it enforces is the client's side of the protocol: a request
// is outstanding from its publication until the client consumes its
// reply, and at most entries are. That guarantees every request the
// daemon takes a completion entry (the daemon never waits for a client
// to make room) and a free slot.
func checkRing(head, sqTail, cqHead, cqTail, entries uint32) (uint32, error) {
	n := sqTail - head
	if n > entries {
		return 0, fmt.Errorf("%w (tail %d, head %d, %d entries)", errSQOverrun, sqTail, head, entries)
	}
	if int32(cqTail-cqHead) < 0 || cqTail-cqHead > entries {
		return 0, fmt.Errorf("%w (head %d, tail %d)", errCQPastTail, cqHead, cqTail)
	}
	if head+n-cqHead > entries {
		return 0, fmt.Errorf("%w (%d published, %d replies consumed, %d entries)", errOutstanding, head+n, cqHead, entries)
	}
	return n, nil
}

// rings is the daemon's side of a connection's rings. Every index it
// acts on is its own copy (head, tail); what the client writes is read
// once per use and checked (checkRing), never trusted as a bound.
type rings struct {
	entries, mask uint32
	sqHead        *uint32
	sqTail        *uint32
	sqFlags       *uint32
	cqHead        *uint32
	cqTail        *uint32
	cqFlags       *uint32
	cqWant        *uint32
	sqes          []byte // entries × RequestSize
	cqes          []byte // entries × ReplySize

	head uint32 // requests taken; only the reaper touches it
	// taken is head as of the last batch, stored before any of its
	// requests runs: when tail equals it, every request taken has its
	// reply posted.
	taken atomic.Uint32

	mu   sync.Mutex    // serializes posting replies
	tail atomic.Uint32 // replies published; written under mu

	// gap is a moving average of how long the reaper waited for new
	// requests; it decides whether to spin before sleeping.
	gap time.Duration
}

// word is the u32 at off of mem, for atomic access.
func word(mem []byte, off int) *uint32 {
	return (*uint32)(unsafe.Pointer(&mem[off]))
}

// newRings lays out rings of n entries in area (the ring area of the
// region, zeroed by the memfd).
func newRings(area []byte, n uint32) *rings {
	sqOff, cqOff, _ := ringLayout(n)
	return &rings{
		entries: n, mask: n - 1,
		sqHead: word(area, RingSQHead), sqTail: word(area, RingSQTail), sqFlags: word(area, RingSQFlags),
		cqHead: word(area, RingCQHead), cqTail: word(area, RingCQTail), cqFlags: word(area, RingCQFlags),
		cqWant: word(area, RingCQWant),
		sqes:   area[sqOff : sqOff+n*RequestSize],
		cqes:   area[cqOff : cqOff+n*ReplySize],
	}
}

// available is how many requests the client has published and the
// daemon not yet taken, after checking the client's indices.
func (r *rings) available() (uint32, error) {
	// The client stores its cq head before it publishes new requests:
	// read the tail first so that the head is at least as new.
	sqTail := atomic.LoadUint32(r.sqTail)
	cqHead := atomic.LoadUint32(r.cqHead)
	return checkRing(r.head, sqTail, cqHead, r.tail.Load(), r.entries)
}

// sqe is the i-th request from the head, in shared memory: the parser
// reads each field of it once.
func (r *rings) sqe(i uint32) []byte {
	j := (r.head + i) & r.mask
	return r.sqes[j*RequestSize : (j+1)*RequestSize]
}

// spinMax bounds how long a side spins for the other before it sleeps.
// The machine this runs on may be small and shared: spinning is worth it
// only when the other side usually answers within a few microseconds,
// and the moving average of the gaps decides whether it does.
const spinMax = 30 * time.Microsecond

// startSpin reserves a place to spin for requests (idle); the spinner
// frees it with s.spinners.Add(-1). At most GOMAXPROCS-1 ring readers (at
// least one) spin at once: every reader that spins keeps a CPU busy, and
// with many connections each one's own history (gap) may say spin; all of
// them spinning would take every CPU from the clients, which must run to
// publish what the spinners wait for.
func (s *Server) startSpin() bool {
	if s.spinners.Add(1) <= int32(max(1, s.procs-1)) {
		return true
	}
	s.spinners.Add(-1)
	return false
}

// learn folds one observed wait into the moving average.
func (r *rings) learn(d time.Duration) { r.gap += (d - r.gap) / 8 }

// ringLoop is the version 2 reaper: it takes every request the client
// has published, runs the ones that only touch memory itself and hands
// the rest to workers, publishes the replies it produced in one go, and
// sleeps on the socket when the ring is empty. It returns why it
// stopped.
func (c *conn) ringLoop() string {
	r := c.ring
	stats := &c.s.stats
	woken := false
	for {
		if c.stopping.Load() {
			return "daemon shutting down"
		}
		n, err := r.available()
		if err != nil {
			stats.protocolErrors.Add(1)
			c.log.Warn("server: closing connection: ring corrupted", "err", err)
			return "ring corrupted"
		}
		if n == 0 {
			if woken {
				// A doorbell without requests: whatever rang it, it
				// is no reason to spin next time.
				r.learn(2 * spinMax)
			}
			reason := c.idle()
			if reason != "" {
				return reason
			}
			woken = true
			continue
		}
		woken = false
		stats.msgsIn.Add(1)
		stats.requestsIn.Add(int64(n))
		r.taken.Store(r.head + n)
		for i := range n {
			// checkRing guarantees a free slot at once: the reply of
			// every request the client consumed was posted, and its
			// slot freed before it was.
			sl, reason := c.freeSlot()
			if sl == nil {
				return reason
			}
			c.take(sl, r.sqe(i))
		}
		r.head += n
		atomic.StoreUint32(r.sqHead, r.head)
		c.unplugReads()
		c.runInline()
		c.postAnswered(postAlone)
	}
}

// idle waits for the client to publish requests: a short spin if the
// client has lately been quick, then sleep until the doorbell. It
// returns why the session should end, or "".
func (c *conn) idle() string {
	r := c.ring
	start := time.Now()
	if r.gap < spinMax && c.s.startSpin() {
		limit := max(2*r.gap, spinMax/8)
		var published bool
		for {
			published = atomic.LoadUint32(r.sqTail) != r.head
			if published || time.Since(start) > limit {
				break
			}
			runtime.Gosched()
		}
		c.s.spinners.Add(-1)
		if published {
			r.learn(time.Since(start))
			return ""
		}
	}
	setFlag(r.sqFlags, SQNeedWakeup)
	if atomic.LoadUint32(r.sqTail) != r.head || c.stopping.Load() {
		claimFlag(r.sqFlags, SQNeedWakeup)
		r.learn(time.Since(start))
		return ""
	}
	c.s.stats.sleeps.Add(1)
	n, err := c.readDoorbell()
	claimFlag(r.sqFlags, SQNeedWakeup)
	r.learn(time.Since(start))
	switch {
	case err != nil && c.stopping.Load():
		return "daemon shutting down"
	case err != nil:
		return readEnd(err)
	case n == 0:
		return reasonClientClosed
	}
	c.s.stats.doorbellsIn.Add(1)
	return ""
}

// readDoorbell sleeps in Go's poller until the client rings the
// doorbell, its socket ends or a read deadline passes (stopReading), and
// returns what one receive returned: bytes (0 at end of stream) or an
// error.
//
// The receive is a raw system call, as futexWake is: one that does not
// block (MSG_DONTWAIT) need not tell the scheduler it enters the kernel,
// and telling it costs more than the receive here. A goroutine that
// enters a system call (net.Conn.Read does) while every P is idle wakes
// sysmon from its deep sleep, and a sysmon woken so polls every 20 µs for
// the next millisecond and more (runtime.sysmon: "it resets idle and
// delay as a bet"). A reader that sleeps for requests hundreds of times a
// second kept sysmon polling without a break: 30% of the daemon's CPU
// samples at 4k QD128 were sysmon's sleeps and wakeups (perf record -g
// on the daemon), on a 2-CPU machine where each of its wakeups also
// preempts the client or the reader.
func (c *conn) readDoorbell() (int, error) {
	c.rn, c.rerr = 0, nil
	if err := c.raw.Read(c.doorbellRead); err != nil {
		return 0, err
	}
	return c.rn, c.rerr
}

// recvDoorbell is readDoorbell's receive: false (wait in the poller)
// while there is nothing to receive.
func (c *conn) recvDoorbell(fd uintptr) bool {
	for {
		n, _, errno := unix.RawSyscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&c.rbuf[0])), uintptr(len(c.rbuf)),
			unix.MSG_DONTWAIT, 0, 0)
		switch errno {
		case 0:
			c.rn = int(n)
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		c.rerr = fmt.Errorf("receive doorbell: %w", errno)
		return true
	}
}

// post publishes the replies of answered requests on the completion
// ring and frees their slots, then wakes the client if it
// sleeps. Never blocks on the client: every request taken has its
// completion entry (checkRing).
func (c *conn) post(sls []*slot, kind postKind) {
	r := c.ring
	stats := &c.s.stats
	wake := kind == postAlone
	if len(sls) == 0 {
		if kind == postEnd && c.pieces.Add(-1) == 0 {
			c.wakeClient()
		}
		return
	}
	r.mu.Lock()
	t := r.tail.Load()
	for _, sl := range sls {
		j := t & r.mask
		sl.rep.Encode(r.cqes[j*ReplySize : (j+1)*ReplySize])
		stats.countStatus(sl.rep.Status)
		t++
	}
	// The slots are free before the client can see the replies, so that
	// a request it publishes after consuming one finds a slot.
	for _, sl := range sls {
		c.free <- sl
	}
	r.tail.Store(t)
	atomic.StoreUint32(r.cqTail, t)
	r.mu.Unlock()
	stats.msgsOut.Add(1)
	stats.repliesOut.Add(int64(len(sls)))
	// The piece that ends last wakes the client (its count falls after
	// its own tail store, so the replies of every piece are published).
	if kind == postEnd && c.pieces.Add(-1) == 0 {
		wake = true
	}
	switch {
	case wake:
		c.wakeClient()
	case kind == postMid:
		// A client asleep for replies it said it needs (CQWant) is
		// woken once they are there, not when the piece ends: it
		// refills its queue while the rest of the piece runs.
		c.wake(r.wantMet())
	}
	// Counted last, once done with the region: the session's teardown
	// unmaps it as soon as every reply is counted, and a post from a
	// goroutine it does not wait for (the engine's ring reaper or its
	// cold-read finisher answering a read startRead began, readAgain)
	// that counted its replies before the wake above faulted on the
	// flags word (TestH31bRepliesToAGoneRingClient).
	for range sls {
		c.inflight.Done()
	}
}

// wakeClient wakes the client if it sleeps and its wait can return:
// it claims CQWaiting (clears it) and wakes the futex on that word,
// which never blocks, whatever the client did to it. The completion
// tail was stored before this, and the client sets CQWaiting before it
// loads the tail; both sides' accesses to the flag word are
// read-modify-writes, so one of the two sees the other (see setFlag).
// A client that sleeps while pieces still run is woken by the last of
// them; one that waits for more replies than are posted (CQWant) is
// left asleep until they are (wakeDue).
func (c *conn) wakeClient() { c.wake(c.ring.wakeDue()) }

// wake claims CQWaiting and wakes the client's futex if due says its
// wait can return.
func (c *conn) wake(due bool) {
	r := c.ring
	if wakeupLost() {
		return
	}
	if due && claimFlag(r.cqFlags, CQWaiting) {
		futexWake(r.cqFlags)
		c.s.stats.doorbellsOut.Add(1)
	}
}

// wantMet says whether the client sleeps with CQWant and the completion
// tail has reached its want word. Read as wakeDue reads them; unlike
// wakeDue, a client that sleeps without CQWant is not due (it is woken
// once per batch, when the last piece ends), nor is one whose want is
// not reached when everything taken is answered (the piece's end wakes
// it then).
func (r *rings) wantMet() bool {
	f := atomic.OrUint32(r.cqFlags, 0)
	return f&(CQWaiting|CQWant) == CQWaiting|CQWant && int32(r.tail.Load()-atomic.LoadUint32(r.cqWant)) >= 0
}

// wakeDue says whether the client sleeps (CQWaiting) and, if it said
// how far the completion tail must get (CQWant), whether it got there
// or every request taken is answered, so that nothing more would come.
// The flag is read with a read-modify-write that changes nothing, so it
// is ordered with the client's setFlag as a claim would be, and so the
// want word the client stored before setting it is visible. The want
// word is the client's: any value only decides when that client is
// woken, never more than once per post and never later than when its
// requests are all answered.
func (r *rings) wakeDue() bool {
	f := atomic.OrUint32(r.cqFlags, 0)
	if f&CQWaiting == 0 {
		return false
	}
	if f&CQWant == 0 {
		return true
	}
	t := r.tail.Load()
	return t == r.taken.Load() || int32(t-atomic.LoadUint32(r.cqWant)) >= 0
}

var doorbellMsg = [1]byte{'D'}
