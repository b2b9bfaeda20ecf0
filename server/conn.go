package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/engine"
)

// helloTimeout bounds how long a new connection may take to say hello.
const helloTimeout = 10 * time.Second

// maxLoggedBadRequests is how many malformed requests a connection logs
// one by one; the rest are counted and summed up when it closes.
const maxLoggedBadRequests = 8

// slot is one request in flight: parsed header and reply, reused.
type slot struct {
	req   Request
	rep   Reply
	next  *slot // the next request of a piece of inline work
	piece bool  // the first request of a piece of inline work
	// A read the reader began (startRead): its connection, the handle
	// it holds read-locked until the read ends, and the slot itself as
	// a one-request batch to answer.
	c   *conn
	h   *handle
	one [1]*slot
}

// handle is one open file of a connection. mu is held shared while a
// request uses the file and exclusively to close it, so a close never
// races an I/O on the same handle.
type handle struct {
	mu sync.RWMutex
	f  *engine.File
}

// handleChunk is a piece of the handle table; chunks are allocated on
// first use so that a connection that opens one file does not pay for
// MaxHandles of them.
const handleChunk = 64

type handleTable struct {
	chunks [MaxHandles / handleChunk]atomic.Pointer[[handleChunk]handle]
	mu     sync.Mutex // guards free, next and chunk allocation
	free   []uint32
	next   uint32 // handles 1..next-1 have been handed out
}

// conn is one client session.
//
// Its goroutines: the reader takes requests (off the socket, or off the
// submission ring) and runs the ones that only touch memory itself
// (inline), and begins the cold reads the engine can begin without
// waiting (startRead), which the engine's ring reaper answers as their
// device reads complete; workers run the rest, and a cold read that must
// be read again the waiting way gets a goroutine of its own (readAgain). With socket framing the writer sends
// every reply; only it ever sends, so a client that does not read its
// replies blocks the writer, never request intake: the reader keeps
// taking requests until the client has MaxInflight of them unanswered
// (replies not yet sent), which a client that keeps within the limit it
// was given never reaches. With rings, replies are posted on the
// completion ring, which always has room for every request taken, and
// the doorbell never waits: nothing the client does can block them.
type conn struct {
	s      *Server
	id     uint64
	uc     *net.UnixConn
	log    *slog.Logger
	raw    syscall.RawConn // uc's descriptor, for doorbell reads (rings)
	region []byte          // data and names: requests' ranges lie in it
	mapped []byte          // the whole region, rings included
	ring   *rings          // version 2; nil with socket framing
	charge uint64          // bytes of the server's shared-memory budget it holds
	// greetSeq orders the connections still to say hello (Server.start);
	// session says the connection holds one of the MaxConns slots.
	greetSeq uint64
	session  bool
	evicted  atomic.Bool // closed before its hello for a newer connection

	ctx    context.Context // canceled when the connection ends
	cancel context.CancelFunc

	slots   []slot
	free    chan *slot // slots not in flight: a request's reply has been sent
	work    chan *slot // parsed requests for the workers
	replies replyQueue // answered requests for the writer

	inflight sync.WaitGroup // requests read whose replies are not sent yet
	workers  atomic.Int64   // running: the reader starts them (dispatch), they retire (retire)
	busy     atomic.Int64   // requests handed to workers and not finished
	pieces   atomic.Int64   // pieces of inline work running (runInline)
	workerWG sync.WaitGroup
	writerWG sync.WaitGroup
	writerQ  chan struct{} // closed when every reply is sent: the writer ends

	stopCh   chan struct{} // closed when the server stops reading us
	ending   atomic.Bool   // its serve is ending (markEnding, Server.ending)
	watchEnd atomic.Bool   // the teardown ends cancelAtHangup's watch
	stopOnce sync.Once
	stopping atomic.Bool
	aborted  atomic.Bool // shutdown canceled its requests (abort)
	sendFail atomic.Bool
	// stopUnread is unread() as shutdown began (stopReading): what a
	// send blocked since before then measures the client's progress by.
	stopUnread atomic.Int64
	badLogged  int
	badCount   int

	handles handleTable
	// temps are the temporaries (TempPrefix) this connection created,
	// by name, with their files' IDs: removed when it ends (endTemps).
	// The list is kept near what is still there (forgetTemp,
	// pruneTemps, at tempsPruneAt names).
	tempsMu      sync.Mutex
	temps        map[string]uint64
	tempsPruneAt int

	rbuf []byte // a batch of requests
	// doorbellRead is recvDoorbell as a func value, made once (a method
	// value made per call would allocate); rn and rerr are its result.
	doorbellRead func(fd uintptr) bool
	rn           int
	rerr         error
	inline       []*slot // the batch's requests the reader runs (or chunks out)
	readsPlugged bool    // the reader holds PlugReads for the batch's reads (startRead)
	answered     []*slot // the reader's answered requests of this batch
	wbuf         []byte  // the writer's batch of replies
	wslots       []*slot // the writer's answered requests being sent
}

// replyQueue carries answered requests from the reader and the workers
// to the writer. It never fills: it holds at most the connection's
// MaxInflight slots.
type replyQueue struct {
	mu    sync.Mutex
	items []*slot
	wake  chan struct{} // capacity 1: the writer has replies to send
}

func (q *replyQueue) push(sls ...*slot) {
	q.mu.Lock()
	q.items = append(q.items, sls...)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take moves everything queued onto dst.
func (q *replyQueue) take(dst []*slot) []*slot {
	q.mu.Lock()
	dst = append(dst, q.items...)
	clear(q.items)
	q.items = q.items[:0]
	q.mu.Unlock()
	return dst
}

func newConn(s *Server, uc *net.UnixConn) *conn {
	id := s.nextID.Add(1)
	ctx, cancel := context.WithCancel(context.Background())
	return &conn{
		s: s, id: id, uc: uc, log: s.log.With("conn", id),
		ctx: ctx, cancel: cancel,
		stopCh: make(chan struct{}),
		// One request more than a batch may hold, so that an oversize
		// message is seen as such rather than silently truncated.
		rbuf:    make([]byte, (MaxBatch+1)*RequestSize),
		wbuf:    make([]byte, 0, MaxBatch*ReplySize),
		wslots:  make([]*slot, 0, MaxInflight),
		writerQ: make(chan struct{}),
		replies: replyQueue{items: make([]*slot, 0, MaxInflight), wake: make(chan struct{}, 1)},
	}
}

// shutdownSendWait is how long, once shutdown began, the writer waits
// for a client to take any of the replies queued for it before it gives
// the client up (sendFailed) as one that is gone. Shutdown waits for
// every session to end, and a session ends only when its replies are
// sent: a client that sends requests and never reads a reply (socket
// framing) otherwise kept its writer blocked, and shutdown with it, for
// the whole grace period, which is for requests still running, not for
// replies a client will not take (TestH26aShutdownBesidePipeliningClientsThatNeverRead).
// One that takes none for this long is answered no more, as if it had
// gone, and its requests still running are canceled: no reply it did
// not take acknowledged anything.
//
// The wait is for the client's progress, not for a message to go: a
// sender blocked on a full socket is woken only once the client has read
// most of what is queued for it (until a quarter of the send buffer is
// left), which a client reading steadily but slowly can take longer than
// this to do. Such a client is waited for, within the grace period
// (TestH27aShutdownBesideSlowSteadyReader).
const shutdownSendWait = time.Second

// stopReading makes the reader stop taking requests (server shutdown);
// requests already read still finish and are answered, to a client that
// takes its replies (shutdownSendWait).
func (c *conn) stopReading() {
	c.stopOnce.Do(func() {
		c.stopUnread.Store(-1)
		if rc, err := c.uc.SyscallConn(); err == nil {
			c.stopUnread.Store(int64(unread(rc)))
		}
		c.stopping.Store(true)
		close(c.stopCh)
		c.uc.SetReadDeadline(time.Now())
		// A send blocked now (or about to begin) on a client that
		// does not read ends within shutdownSendWait; the writer sets
		// the deadline afresh before each later send.
		c.uc.SetWriteDeadline(time.Now().Add(shutdownSendWait))
	})
}

// abort cancels in-flight requests and unblocks a writer stuck on a
// client that does not read its replies. The replies of the requests
// it cancels still go to a client whose socket has room for them
// (sendNow): a throttled write canceled here was answered ESHUTDOWN on
// rings but, with socket framing, its client saw only the end of the
// connection, its write's fate unknown though it had read every reply
// (TestH32bShutdownAnswersThrottledWrites).
func (c *conn) abort() {
	c.stopReading()
	c.aborted.Store(true)
	c.cancel()
	c.uc.SetWriteDeadline(time.Now())
}

// sendNow sends buf, one message, if the socket has room for it now,
// without waiting (abort's deadline of now refuses every write through
// uc, and the raw conn's Write checks that deadline too).
func (c *conn) sendNow(buf []byte) error {
	err := errors.New("no socket descriptor")
	c.raw.Control(func(fd uintptr) {
		err = unix.Sendto(int(fd), buf, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, nil)
	})
	if err != nil {
		return fmt.Errorf("send replies after the requests were canceled: %w", err)
	}
	return nil
}

// serve runs the session to its end and releases everything it holds.
func (c *conn) serve() {
	defer c.uc.Close()
	// Before its socket closes, which takes it out of Server.hangups.
	defer c.markEnding()
	defer func() {
		if c.mapped != nil {
			unix.Munmap(c.mapped)
		}
		c.s.shm.Add(-int64(c.charge))
	}()
	if err := c.hello(); err != nil {
		if c.evicted.Load() {
			c.log.Debug("server: closing a connection that said no hello, for a newer one", "err", err)
			return
		}
		var rf refusal
		if errors.As(err, &rf) {
			c.s.warnRefused(c.log, "server: refusing a client", "status", rf.st.Error(), "err", rf.err)
			return
		}
		if errors.Is(err, errLeftBeforeHello) || errors.Is(err, errShuttingDown) {
			c.log.Debug("server: connection closed before its session began", "err", err)
			return
		}
		c.s.stats.protocolErrors.Add(1)
		c.log.Warn("server: closing connection: bad hello", "err", err)
		return
	}
	depth := MaxInflight
	if c.ring != nil {
		depth = int(c.ring.entries)
	}
	c.slots = make([]slot, depth)
	c.free = make(chan *slot, depth)
	c.work = make(chan *slot, depth)
	for i := range c.slots {
		sl := &c.slots[i]
		sl.c, sl.one[0] = c, sl
		c.free <- sl
	}
	c.answered = make([]*slot, 0, depth)
	c.inline = make([]*slot, 0, depth)
	var reason string
	if c.ring != nil {
		reason = c.ringLoop()
	} else {
		c.writerWG.Go(c.writer)
		reason = c.readLoop()
	}
	// Teardown: nothing new is read. Requests in flight finish (a
	// vanished client's are canceled), their replies go out if the
	// client is still there, and only then are the handles closed and
	// the region unmapped: a worker never touches unmapped memory.
	//
	// A client that shut down only its sending side (shutdown(SHUT_WR):
	// it has sent its last request and reads on for the replies) is no
	// vanished client (it was taken for one: the fsync it waited for
	// was answered ECANCELED,
	// TestH44cHalfClosedClientIsAnsweredAndKeepsItsPlace): its requests
	// run to their end, their replies reach it, and it holds its place,
	// not counted ending (Server.ending), until they have: an arrival at the cap is refused at once rather than made
	// to wait on requests that may run for long (a throttled write, an
	// fsync) and on a client that may be slow to read. If it then closes
	// for good (or is killed), its hang-up counts it ending
	// (Server.hangups) and cancels what still runs (cancelAtHangup), as
	// for any client that closes: nothing else would, with rings (the
	// daemon sends nothing on the socket) nor with socket framing while
	// no reply is ready, and a gone client's slow fsync ran for nobody
	// while a client at the cap waited for its place
	// (TestH44iHalfClosedClientThatThenGoesIsCanceled).
	//
	// A session the daemon's shutdown ended is watched the same way: its
	// requests run on (for the grace period) for a client still there,
	// and one that goes meanwhile is a client gone. Shutdown stopped
	// reading it, so nothing read its end, and shutdown waited out the
	// whole grace period for the requests of a client already gone
	// (TestH45bClientGoneMidShutdownIsCanceled); nor does shutdown end
	// the watch of a half-closed client
	// (TestH45bHalfClosedClientGoneMidShutdownIsCanceled).
	var watched chan struct{}
	half := reason == reasonClientClosed && !c.stopping.Load() && c.halfClosed()
	if !half {
		c.markEnding()
		if !c.stopping.Load() {
			c.cancel()
		}
	}
	if half || c.stopping.Load() {
		watched = make(chan struct{})
		go func() {
			defer close(watched)
			c.cancelAtHangup()
		}()
	}
	if hook := teardownHook.Load(); hook != nil {
		(*hook)(c, reason)
	}
	c.inflight.Wait()
	close(c.work)
	c.workerWG.Wait()
	close(c.writerQ)
	c.writerWG.Wait()
	if watched != nil {
		// Its replies are delivered: the watch ends (a read deadline
		// that has passed ends a raw read's wait, and one not begun;
		// watchEnd, stored first, ends a watch that clears it all the
		// same, as it woke from stopReading's: it looks after clearing,
		// TestH45iTeardownEndsTheWatchAsItClearsShutdownsDeadline).
		c.watchEnd.Store(true)
		c.uc.SetReadDeadline(time.Now())
		if hook := watchEndHook.Load(); hook != nil {
			(*hook)(c)
		}
		<-watched
	}
	// Every reply is delivered: the place comes free with no more
	// waiting on the client or the device.
	c.markEnding()
	c.cancel()
	c.closeHandles()
	c.endTemps()
	c.discardUnread()
	if c.badCount > c.badLogged {
		c.log.Warn("server: malformed requests on this connection", "total", c.badCount, "logged", c.badLogged)
	}
	c.log.Debug("server: connection closed", "reason", reason)
}

// reasonClientClosed is why a session ends whose client's stream ended:
// it closed its socket or shut down its sending side (halfClosed).
const reasonClientClosed = "client closed the connection"

// halfClosed reports whether c's client has shut down only its sending
// side: its stream has ended (POLLRDHUP) and its socket is not hung up
// (POLLHUP, which the client's close, or a shutdown of both sides,
// raises), so it still reads what the daemon sends. A zero-length
// message, which reads as an end of stream too, is neither: the session
// ends as if the client had gone.
func (c *conn) halfClosed() bool {
	half := false
	c.raw.Control(func(fd uintptr) {
		rdhup, hup := pollHangup(fd)
		half = rdhup && !hup
	})
	return half
}

// pollHangup asks fd's socket, without waiting, whether its peer's
// stream has ended (POLLRDHUP) and whether it has hung up (POLLHUP, or
// POLLERR: a close with replies unread resets the socket).
func pollHangup(fd uintptr) (rdhup, hup bool) {
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
	for {
		n, err := unix.Poll(p, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return false, false
		}
		return p[0].Revents&unix.POLLRDHUP != 0, p[0].Revents&(unix.POLLHUP|unix.POLLERR) != 0
	}
}

// cancelAtHangup watches the socket of a client whose requests still
// run in its session's teardown (a half-closed client's, or any
// client's once shutdown stopped reading it), and cancels them if the
// client hangs up (closes its socket, or is killed) meanwhile: it is
// then a client gone. It returns without canceling once a read deadline
// passes that the teardown set (watchEnd), once every reply is
// delivered, or sendFailed set, which canceled them itself. The
// deadline stopReading sets to wake the reader ends no watch: the watch
// clears it, once stopReading has set it, and watches on (a teardown
// that ends the watch meanwhile set watchEnd before its own deadline,
// which the look after the clearing sees, or set its deadline after the
// clearing). It waits in Go's poller, which a hang-up wakes (the
// socket's state changes).
func (c *conn) cancelAtHangup() {
	for {
		hup := false
		err := c.raw.Read(func(fd uintptr) bool {
			_, hup = pollHangup(fd)
			return hup
		})
		if err == nil && hup {
			c.log.Debug("server: a client whose requests still run hung up; canceling them")
			c.cancel()
			return
		}
		if err == nil || c.watchEnd.Load() || c.ctx.Err() != nil || !c.stopping.Load() {
			return
		}
		c.stopReading() // returns once the first call has set its deadline
		if hook := hangupWatchHook.Load(); hook != nil {
			(*hook)(c, false)
		}
		c.uc.SetReadDeadline(time.Time{})
		if c.watchEnd.Load() {
			return
		}
		if hook := hangupWatchHook.Load(); hook != nil {
			(*hook)(c, true)
		}
	}
}

// hangupWatchHook, set by tests, runs in cancelAtHangup once
// stopReading's deadline has woken the watch and stopReading is done,
// before the watch clears that deadline (cleared false), and again once
// it has cleared it and watches on (cleared true). watchEndHook runs in
// the teardown once it has ended the watch (watchEnd and its deadline
// set), before it waits for the watch to return.
var (
	hangupWatchHook atomic.Pointer[func(c *conn, cleared bool)]
	watchEndHook    atomic.Pointer[func(c *conn)]
)

// markEnding counts c, if it holds a place, as ending (Server.ending)
// until it gives the place back, once: as its teardown begins (once its
// replies are delivered, for a half-closed client), or, for a hello that
// failed after it took the place, before its socket closes.
func (c *conn) markEnding() {
	if c.session && !c.ending.Swap(true) {
		c.s.leaving.Add(1)
	}
}

// refusal is a hello refused for want of room in the daemon (its caps,
// or descriptors or memory for the region), not for anything wrong with
// it: the client was told st and may try again later; it broke no
// protocol.
type refusal struct {
	st  Status
	err error
}

func (r refusal) Error() string { return r.err.Error() }
func (r refusal) Unwrap() error { return r.err }

// regionRefusal is the status a client is refused with when its region
// cannot be made: EMFILE if the daemon is out of descriptors (a memfd is
// one), ENOMEM for the rest. The shared-memory budget's ENOMEM told the
// client to raise --max-shared-memory, which does not give the daemon a
// descriptor (TestH33bOutOfDescriptorsForARegionSaysSo).
func regionRefusal(err error) Status {
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
		return StatusTooMany
	}
	return StatusNoMemory
}

// errLeftBeforeHello ends a connection whose peer closed it before its
// hello was read or answered: it broke no protocol (a process killed as
// it dialed, a probe of the socket), and one that does so in a loop must
// not make the daemon write a warning per connection
// (TestH33bClientsThatLeaveBeforeHelloAreNoProtocolErrors).
var errLeftBeforeHello = errors.New("the peer left before its session began")

// peerLeft says whether err, from a read or a send on a connection,
// is its peer's end: end of file, or a reset or broken pipe.
func peerLeft(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// errShuttingDown ends a connection whose hello had not come, or came
// as the daemon began to shut down: the daemon ended it, so it is no
// protocol error (TestH33bShutdownBesideSilentConnectionsWarnsNothing).
var errShuttingDown = errors.New("daemon shutting down")

// errEvicted ends a connection evicted before its hello was taken in.
var errEvicted = errors.New("evicted for a newer connection before its hello")

// evictedHelloWait is how long an evicted connection's hello may still
// take to arrive and be answered with EUSERS: clients that connect in a
// burst (fio's jobs) evict each other from the greeting set though each
// says hello at once.
const evictedHelloWait = 100 * time.Millisecond

// refuseEvicted ends a connection evicted from the greeting set (see
// Server.start) before its hello was read: if its hello is there, or
// comes within evictedHelloWait, the client is told the daemon is at its
// cap (EUSERS), as a client over the cap is (Server.refuse), rather than
// finding its socket reset. Only MaxConns evicted connections wait at
// once: past them one whose hello is not there yet is closed at once, so
// that silent connections still hold at most twice MaxConns descriptors
// (TestH17cSilentBurstHoldsFewDescriptors: a burst of 400 held ~400 for
// the wait).
func (c *conn) refuseEvicted() error {
	if n := c.readQueued(c.rbuf); n > 0 {
		c.answerEvicted(c.rbuf[:n])
		return errEvicted
	}
	if c.s.evictWaiting.Add(1) > int64(c.s.maxConns) {
		c.s.evictWaiting.Add(-1)
		return errEvicted
	}
	defer c.s.evictWaiting.Add(-1)
	c.uc.SetReadDeadline(time.Now().Add(evictedHelloWait))
	if n, err := c.uc.Read(c.rbuf); err == nil {
		c.answerEvicted(c.rbuf[:n])
	}
	return errEvicted
}

// readQueued reads what the socket holds already, without waiting (0 if
// nothing or on an error).
func (c *conn) readQueued(b []byte) int {
	rc, err := c.uc.SyscallConn()
	if err != nil {
		return 0
	}
	// The eviction's deadline in the past would end the raw read before
	// it tried.
	c.uc.SetReadDeadline(time.Time{})
	n := 0
	rc.Read(func(fd uintptr) bool {
		if m, _, err := unix.Recvfrom(int(fd), b, unix.MSG_DONTWAIT); err == nil {
			n = m
		}
		return true
	})
	return n
}

// answerEvicted answers the hello b of an evicted connection: EUSERS, in
// the reply format its version reads.
func (c *conn) answerEvicted(b []byte) {
	c.s.stats.refused.Add(1)
	h, st, err := ParseHello(b)
	if err != nil {
		c.answerHello(h, HelloReply{Magic: Magic}, st)
		return
	}
	c.answerHello(h, HelloReply{Magic: Magic}, StatusTooManyClients)
}

// answerHello writes rep with status st, a refusal of hello h, in the
// reply format h's version reads.
func (c *conn) answerHello(h Hello, rep HelloReply, st Status) {
	rep.Status = st
	n := HelloReplySize
	switch {
	case st == StatusVersion:
		// A version this daemon does not speak gets the version 1
		// reply, which every client reads, naming the newest version
		// it does speak.
		rep.Version = Version
	case h.Version == VersionRings:
		rep.Version = h.Version
		n = HelloReplyV2Size
	default:
		rep.Version = VersionFraming
	}
	var buf [HelloReplyV2Size]byte
	rep.Encode(buf[:n])
	c.uc.Write(buf[:n])
}

// helloHook, set by tests, runs in hello once the hello is read and the
// connection has left the greeting set, before the read deadline goes.
// helloStartHook runs as hello begins; helloReadHook once the hello is
// read, before the connection leaves the greeting set.
var helloHook, helloStartHook, helloReadHook atomic.Pointer[func(*conn)]

// teardownHook, set by tests, runs when a session's reader has stopped
// for reason, as its teardown begins, once it has counted the session
// ending and canceled its requests (unless shutdown ended it), or found
// its client half-closed, and has begun to watch a half-closed client,
// or a session shutdown ended, for its hang-up (cancelAtHangup) (a test
// that goes on from here sees the one or the other: run before them, an
// arrival at the cap could come before the session was counted ending,
// and TestH44cSessionEndedByTheDaemonCountsEnding saw it refused at once
// in 1 of 30 runs).
var teardownHook atomic.Pointer[func(c *conn, reason string)]

// hello reads the client's hello and answers it with the region's memfd.
// The version is the client's: socket framing (1) or rings (2).
func (c *conn) hello() error {
	if hook := helloStartHook.Load(); hook != nil {
		(*hook)(c)
	}
	// stopReading sets stopping, then a read deadline in the past to
	// wake the reader: a deadline set here after it would undo that, so
	// stopping is checked after each one (else a session whose hello came
	// as shutdown began read with no deadline, and held shutdown up for
	// as long as its client stayed). An eviction (Server.start) does the
	// same with evicted: one that came before this deadline is checked
	// here, one after sets its own deadline after this one.
	c.uc.SetReadDeadline(time.Now().Add(helloTimeout))
	if c.stopping.Load() {
		return errShuttingDown
	}
	if c.evicted.Load() {
		return c.refuseEvicted()
	}
	n, err := c.uc.Read(c.rbuf)
	if err != nil {
		if c.evicted.Load() {
			return c.refuseEvicted()
		}
		if c.stopping.Load() {
			return errShuttingDown // stopReading's deadline
		}
		if peerLeft(err) {
			return fmt.Errorf("%w: read hello: %w", errLeftBeforeHello, err)
		}
		return fmt.Errorf("read hello: %w", err)
	}
	if hook := helloReadHook.Load(); hook != nil {
		(*hook)(c)
	}
	// Out of the greeting set under Server.mu, the lock eviction takes:
	// either an eviction took c out first (it is closed, as counted) or
	// c leaves first and no eviction can pick it (it is served, counted
	// nowhere as evicted).
	if !c.s.leaveGreeting(c) {
		c.answerEvicted(c.rbuf[:n])
		return errEvicted
	}
	if hook := helloHook.Load(); hook != nil {
		(*hook)(c)
	}
	c.uc.SetReadDeadline(time.Time{})
	if c.stopping.Load() {
		return errShuttingDown
	}
	h, st, perr := ParseHello(c.rbuf[:n])
	rep := HelloReply{Magic: Magic, Version: h.Version, Status: st, MaxBatch: MaxBatch, MaxInflight: MaxInflight, MaxIO: MaxIO}
	refuse := func(st Status, err error) error {
		c.answerHello(h, rep, st)
		return err
	}
	// A hello refused for want of room in the daemon, not for what it
	// says.
	noRoom := func(st Status, err error) error {
		c.s.stats.refused.Add(1)
		return refuse(st, refusal{st, err})
	}
	if perr != nil {
		return refuse(st, perr)
	}
	if !c.s.awaitEnd(c, c.stopCh, c.s.claimSession) {
		if c.stopping.Load() {
			return errShuttingDown
		}
		return noRoom(StatusTooManyClients, fmt.Errorf("%d clients connected, the cap", c.s.maxConns))
	}
	c.session = true
	c.s.watchHangup(c)
	page := uint64(os.Getpagesize())
	size := h.Region
	if size == 0 {
		size = DefaultRegion
	}
	size = (size + page - 1) / page * page
	total := size
	if h.Version == VersionRings {
		rep.Entries = ringEntries(h.Entries)
		sqOff, cqOff, ringBytes := ringLayout(rep.Entries)
		rep.RingOff, rep.SQOff, rep.CQOff = size, sqOff, cqOff
		rep.MaxInflight = rep.Entries
		total += ringBytes
		rep.MapSize = total
	}
	// A region larger than the whole budget never fits: no wait.
	if int64(total) > c.s.maxShm || !c.s.awaitEnd(c, c.stopCh, func() bool { return c.s.reserveShm(int64(total)) }) {
		if c.stopping.Load() {
			return errShuttingDown
		}
		return noRoom(StatusNoMemory, fmt.Errorf("region of %d bytes asked for, %d of the daemon's %d bytes of shared memory are taken",
			total, c.s.shm.Load(), c.s.maxShm))
	}
	c.charge = total
	fd, mem, err := newRegion(int(total))
	if err != nil {
		return noRoom(regionRefusal(err), err)
	}
	defer unix.Close(fd)
	c.mapped, c.region = mem, mem[:size]
	prefaultRegion(mem, int(size))
	rc, err := c.uc.SyscallConn()
	if err != nil {
		return fmt.Errorf("socket descriptor: %w", err)
	}
	c.raw = rc
	if h.Version == VersionRings {
		c.ring = newRings(mem[size:], rep.Entries)
		c.doorbellRead = func(fd uintptr) bool { return c.recvDoorbell(fd) }
	}
	rep.Region = size
	var buf [HelloReplyV2Size]byte
	rep.Encode(buf[:])
	if _, _, err := c.uc.WriteMsgUnix(buf[:rep.size()], unix.UnixRights(fd), nil); err != nil {
		if peerLeft(err) {
			return fmt.Errorf("%w: send hello reply: %w", errLeftBeforeHello, err)
		}
		return fmt.Errorf("send hello reply: %w", err)
	}
	c.log.Debug("server: client connected", "version", h.Version, "region", size, "entries", rep.Entries)
	return nil
}

// prefaultMax is the largest mapping prefaultRegion touches whole.
const prefaultMax = 4 << 20

// prefaultRegion touches every page of a new region's mapping, so that
// the daemon's first access to each does not happen while the client's
// requests wait: the ring area always, the data part too when the whole
// mapping is at most prefaultMax. It writes zeros over zeros (the memfd
// is new and the client has no descriptor yet).
//
// A first touch is what costs, not the allocation: on this project's
// paravirtualised test machine (PVM, shadow page tables) the first access
// to each 4 KiB page of a mapping took 20-70 µs, MADV_POPULATE_WRITE
// first or not (a C program mapping a memfd twice). fio's 4k QD128 job
// has 137 pages in its region (128 buffers, rings, names), which the
// daemon first touched in the job's first requests: its first 32 writes
// took 540 µs median (of 12 runs) where later ones take ~1 µs each, and
// 380 µs with MADV_POPULATE_WRITE; touched here (3-4.5 ms at hello, before
// fio starts its clock), 280 µs. A mapping past prefaultMax (the CLI asks
// for 8 MiB and uses little of it) gets its ring area touched only:
// touching all of it would cost more than the client is likely to use.
func prefaultRegion(mem []byte, dataBytes int) {
	page := os.Getpagesize()
	from := dataBytes
	if len(mem) <= prefaultMax {
		from = 0
	}
	for i := from; i < len(mem); i += page {
		mem[i] = 0
	}
}

// newRegion makes a sealed memfd of size bytes and maps it. The seals
// stop the client from shrinking the file under the daemon's mapping,
// which would make the daemon's next access to it fault (SIGBUS).
func newRegion(size int) (int, []byte, error) {
	fd, err := unix.MemfdCreate("zonefold-region", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, nil, fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("size region: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("seal region: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("map region: %w", err)
	}
	return fd, mem, nil
}

// readLoop reads batches until the client goes, breaks framing, or the
// server stops reading; it returns why it stopped.
func (c *conn) readLoop() string {
	stats := &c.s.stats
	for {
		n, err := c.uc.Read(c.rbuf)
		switch {
		case err != nil && c.stopping.Load():
			return "daemon shutting down"
		case n == 0 && err == nil:
			return reasonClientClosed
		case err != nil:
			return readEnd(err)
		}
		// A batch read as shutdown began is still served.
		if n%RequestSize != 0 || n > MaxBatch*RequestSize {
			stats.protocolErrors.Add(1)
			c.log.Warn("server: closing connection: message is not a batch of requests",
				"bytes", n, "request_size", RequestSize, "max_batch", MaxBatch)
			return "bad framing"
		}
		stats.msgsIn.Add(1)
		stats.requestsIn.Add(int64(n / RequestSize))
		for off := 0; off < n; off += RequestSize {
			sl, reason := c.freeSlot()
			if sl == nil {
				// Shutdown meanwhile: the rest of this batch is not
				// run, but answered.
				c.refuseUnslotted(c.rbuf[off:n])
				return reason
			}
			c.take(sl, c.rbuf[off:off+RequestSize])
		}
		c.unplugReads()
		c.runInline()
		c.postAnswered(postAlone)
	}
}

// refuseUnslotted answers ESHUTDOWN, without running them, the
// requests raw of a batch read as shutdown began that found no slot free
// (the client had MaxInflight unanswered, or its reply freed a slot just
// as shutdown began): they were read and counted received, and
// unanswered their calls ended only with the connection, with no status
// saying they never ran. Each waits for a slot, which the writer frees
// as it sends the replies before it; a session given up (sendFailed) or
// aborted at the end of the grace period sends nothing more, and the
// rest go unanswered as before.
func (c *conn) refuseUnslotted(raw []byte) {
	if !c.stopping.Load() {
		return
	}
	for off := 0; off+RequestSize <= len(raw) && c.ctx.Err() == nil; off += RequestSize {
		var sl *slot
		select {
		case sl = <-c.free:
		case <-c.ctx.Done():
			return
		}
		c.inflight.Add(1)
		sl.req = Request{}
		sl.rep = Reply{Tag: le.Uint64(raw[off:]), Status: StatusShutdown}
		sl.next, sl.piece = nil, false
		c.answered = append(c.answered, sl)
		c.postAnswered(postAlone)
	}
}

// discardUnread shuts the socket for reading and discards what the
// client sent that was not read (requests sent as or after shutdown
// began, doorbells), so that the close that follows ends the client's
// stream with end-of-file after the replies queued for it. Closing a
// SOCK_SEQPACKET socket with messages unread resets the peer
// (ECONNRESET), and a reset is reported before the messages the peer
// has yet to read: a client that pipelines (socket framing) lost the
// replies queued for it, fsyncs' included, though the daemon counted
// them sent (TestH27aShutdownBesideSlowSteadyReader). Once shut for
// reading, the socket takes nothing more from the client (its sends
// fail with EPIPE), so the drain ends.
func (c *conn) discardUnread() {
	fd := -1
	c.raw.Control(func(d uintptr) { fd = int(d) })
	if fd < 0 {
		return
	}
	unix.Shutdown(fd, unix.SHUT_RD)
	n := 0
	for {
		m, _, err := unix.Recvfrom(fd, c.rbuf, unix.MSG_DONTWAIT)
		if m <= 0 || err != nil {
			break
		}
		n++
	}
	if n > 0 {
		c.log.Debug("server: discarded messages the client sent that were not read", "messages", n)
	}
}

// readEnd is why a session ended, from the error that ended its read.
func readEnd(err error) string {
	if errors.Is(err, io.EOF) {
		return reasonClientClosed
	}
	return fmt.Sprintf("read: %v", err)
}

// badRequest logs a request that failed the parser.
func (c *conn) badRequest(q *Request, st Status) {
	c.s.stats.rejectedMalformed.Add(1)
	c.badCount++
	if c.badLogged < maxLoggedBadRequests {
		c.badLogged++
		c.log.Warn("server: malformed request", "op", q.Op, "tag", q.Tag, "handle", q.Handle,
			"off", q.Off, "addr", q.Addr, "len", q.Len, "status", st.Error())
	}
}

// writer sends replies, as many per message as are ready, until every
// request has been answered and the connection ends. It is the only
// goroutine that sends: if the client does not read, only it waits.
func (c *conn) writer() {
	for {
		select {
		case <-c.replies.wake:
		case <-c.writerQ:
			return
		}
		c.wslots = c.replies.take(c.wslots[:0])
		for sls := c.wslots; len(sls) > 0; {
			k := min(len(sls), MaxBatch)
			c.send(sls[:k])
			sls = sls[k:]
		}
		clear(c.wslots)
	}
}

// send sends the replies of sls in one message and frees their slots.
func (c *conn) send(sls []*slot) {
	stats := &c.s.stats
	buf := c.wbuf[:len(sls)*ReplySize]
	for i, sl := range sls {
		sl.rep.Encode(buf[i*ReplySize:])
	}
	for !c.sendFail.Load() {
		// Shutdown: the client gets shutdownSendWait to take some of
		// its replies (see stopReading). Not once aborted: abort's
		// deadline of now stands.
		queued, waiting := 0, c.stopping.Load() && c.ctx.Err() == nil
		if waiting {
			queued = unread(c.raw)
			c.uc.SetWriteDeadline(time.Now().Add(shutdownSendWait))
		}
		_, err := c.uc.Write(buf)
		if err != nil && errors.Is(err, os.ErrDeadlineExceeded) && c.aborted.Load() {
			err = c.sendNow(buf)
		}
		if err == nil {
			// Error replies are counted as sent, as replies are: one
			// dropped (sendFailed) reached no client.
			for _, sl := range sls {
				stats.countStatus(sl.rep.Status)
			}
			stats.msgsOut.Add(1)
			stats.repliesOut.Add(int64(len(sls)))
			break
		}
		// A message not sent is not sent at all (SOCK_SEQPACKET):
		// after a wait in which the client took replies, try again. A
		// send that began before shutdown did was ended by
		// stopReading's deadline: the client's progress is measured
		// from then.
		if errors.Is(err, os.ErrDeadlineExceeded) && c.stopping.Load() && c.ctx.Err() == nil {
			if !waiting {
				queued = int(c.stopUnread.Load())
			}
			if now := unread(c.raw); now >= 0 && now < queued {
				continue
			}
		}
		c.sendFailed(err)
	}
	for _, sl := range sls {
		c.free <- sl
		c.inflight.Done()
	}
}

// unread is how many bytes of the replies sent on rc the client has yet
// to read (SIOCOUTQ), or -1. It only falls while the writer waits, and
// only as the client reads.
func unread(rc syscall.RawConn) int {
	n := -1
	rc.Control(func(fd uintptr) {
		if v, err := unix.IoctlGetInt(int(fd), unix.SIOCOUTQ); err == nil {
			n = v
		}
	})
	return n
}

// sendFailed ends a session whose client is gone or stuck: its remaining
// replies are dropped, its requests canceled, and the reader is woken.
func (c *conn) sendFailed(err error) {
	c.sendFail.Store(true)
	c.log.Debug("server: send replies", "err", err)
	c.cancel()
	c.uc.SetReadDeadline(time.Now())
}
