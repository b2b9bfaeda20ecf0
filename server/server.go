package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/engine"
)

// Options configure a Server.
type Options struct {
	// Log receives connection and protocol events; default slog.Default().
	Log *slog.Logger
	// Grace is how long shutdown lets in-flight requests finish before
	// it cancels them; default 10s.
	Grace time.Duration
	// MaxConns caps the clients connected at once; default
	// DefaultMaxConns. A client over the cap gets StatusTooManyClients.
	MaxConns int
	// MaxSharedMemory caps the bytes of shared memory all clients'
	// regions take together; default DefaultSharedMemory(). A client
	// whose region would not fit gets StatusNoMemory.
	MaxSharedMemory int64
}

// DefaultMaxConns is the default cap on connected clients.
const DefaultMaxConns = 1024

// DefaultSharedMemory is the default cap on the bytes of shared memory
// all clients' regions take together: a quarter of the machine's RAM, at
// most 4 GiB, at least one largest region.
func DefaultSharedMemory() int64 {
	const most = 4 << 30
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return most
	}
	quarter := int64(si.Totalram) * int64(si.Unit) / 4
	return max(min(quarter, most), MaxRegion)
}

// MinSharedMemory is the smallest --max-shared-memory a client can ever
// fit in: one page, the smallest region (a hello asking for 1 byte gets
// one page). Below it every client is refused with StatusNoMemory.
func MinSharedMemory() int64 { return int64(unix.Getpagesize()) }

// maxRefusing bounds the connections over the cap that are being told
// so at once; past it, more are closed without a reply.
const maxRefusing = 64

// refuseTimeout bounds how long a connection over the cap may take to
// say hello before it is told it is refused.
const refuseTimeout = time.Second

// Server serves one engine to many clients.
type Server struct {
	e     *engine.Engine
	log   *slog.Logger
	grace time.Duration
	// engineDrain, if set (by tests only), bounds the engine's wait for
	// requests stuck under it at shutdown in place of Close's minute.
	engineDrain time.Duration
	maxConns    int
	maxShm      int64
	procs       int          // GOMAXPROCS: how many pieces a batch is split into
	spinners    atomic.Int32 // ring readers spinning for requests (see idle)
	shm         atomic.Int64 // bytes of shared memory the regions take
	refusing    atomic.Int64 // connections over the cap being answered
	// evictWaiting counts evicted connections waiting for their hello
	// (conn.refuseEvicted), at most maxConns.
	evictWaiting atomic.Int64

	sessions atomic.Int64 // connections past hello holding one of maxConns
	// awaiting counts the connections waiting for an ending one's place
	// or memory (awaitEnd), at most maxConns.
	awaiting atomic.Int64
	// leaving counts the connections holding a place whose serve is
	// ending (conn.markEnding) and that have not yet given it back.
	leaving atomic.Int64
	// hangups is an epoll instance that every connection holding a
	// place is in (conn.watchHangup), for its client's hang-up: one
	// call learns whether any client has gone (ending), where polling
	// each connection cost a system call per open connection for every
	// arrival at the cap. An os.File, so that its descriptor is not
	// closed (and reused) under a call; nil if it could not be made.
	hangups *os.File

	mu    sync.Mutex
	conns map[*conn]struct{}
	// ended is closed, and replaced, each time a connection ends, once
	// its session's place and its region's memory are given back.
	ended   chan struct{}
	closing bool
	// greeting holds the connections that have not yet said hello, by
	// the order they came in (conn.greetSeq); see start.
	greeting map[*conn]struct{}
	greetSeq uint64
	connWG   sync.WaitGroup
	nextID   atomic.Uint64
	stats    serverCounters
	// listScanned counts the files list requests took from the engine:
	// what a listing costs the daemon (tests check that paging through n
	// files costs about n, not n per page).
	listScanned atomic.Int64
	// fullWarned: the first ENOSPC on a device that keeps no data was
	// logged with its reason (clients see only the errno).
	fullWarned atomic.Bool
	// namesFullLogged is when an ENOSPC for a namespace full of names
	// (engine.ErrNamespaceFull) was last logged (unix nanoseconds).
	namesFullLogged atomic.Int64
	// refusedLogged is when a refusal was last logged (unix nanoseconds),
	// refusedQuiet how many were not logged since (warnRefused).
	refusedLogged, refusedQuiet atomic.Int64
}

// warnRefused logs a refused client on log, unless one was logged less
// than a second ago: a process connecting over and over to a daemon at
// its cap made it write a warning per connection, as fast as it could
// connect (TestH33bRefusalFloodLogsLittle). Each refusal is counted
// (refused_connections_total); the line says how many went unlogged.
func (s *Server) warnRefused(log *slog.Logger, msg string, args ...any) {
	now := time.Now().UnixNano()
	last := s.refusedLogged.Load()
	if now-last < int64(time.Second) || !s.refusedLogged.CompareAndSwap(last, now) {
		s.refusedQuiet.Add(1)
		return
	}
	if q := s.refusedQuiet.Swap(0); q > 0 {
		args = append(args, "refusals_not_logged", q)
	}
	log.Warn(msg, args...)
}

// serverCounters are the daemon's own counters, exported as metrics.
type serverCounters struct {
	accepted, active            atomic.Int64
	protocolErrors              atomic.Int64
	msgsIn, msgsOut             atomic.Int64
	requests                    [opLimit]atomic.Int64
	errors                      [256]atomic.Int64 // by status (errno); larger ones count in errors[0]
	bytesRead, bytesWritten     atomic.Int64
	requestsIn, repliesOut      atomic.Int64
	canceled, rejectedMalformed atomic.Int64
	refused                     atomic.Int64 // connections over a cap
	evicted                     atomic.Int64 // silent connections closed for a new one
	doorbellsIn, doorbellsOut   atomic.Int64 // rings: wakeups received and sent
	sleeps                      atomic.Int64 // rings: times a reader slept for requests
	readsCached                 atomic.Int64 // reads the reader answered from the cache (readCached)
}

func (sc *serverCounters) countStatus(st Status) {
	switch {
	case st == StatusOK:
	case st < Status(len(sc.errors)):
		sc.errors[st].Add(1)
	default:
		sc.errors[0].Add(1)
	}
}

// New makes a server for e. The caller keeps owning e: it closes it after
// Serve returns.
func New(e *engine.Engine, opts Options) *Server {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Grace <= 0 {
		opts.Grace = 10 * time.Second
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = DefaultMaxConns
	}
	if opts.MaxSharedMemory <= 0 {
		opts.MaxSharedMemory = DefaultSharedMemory()
	}
	s := &Server{e: e, log: opts.Log, grace: opts.Grace, maxConns: opts.MaxConns, maxShm: opts.MaxSharedMemory,
		procs: runtime.GOMAXPROCS(0), conns: map[*conn]struct{}{}, greeting: map[*conn]struct{}{}, ended: make(chan struct{})}
	// Without it (no descriptor or memory left) only a connection whose
	// teardown runs counts as ending.
	if fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC); err == nil {
		s.hangups = os.NewFile(uintptr(fd), "zonefold-hangups")
	}
	return s
}

// reserveShm takes n bytes of the shared-memory budget, if they fit.
func (s *Server) reserveShm(n int64) bool {
	for {
		used := s.shm.Load()
		if used+n > s.maxShm {
			return false
		}
		if s.shm.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

// refuse answers a client over the connection cap: it reads the hello
// (briefly) so that the client reads a hello reply saying why, then
// closes. A flood of them is bounded: past maxRefusing at once, the rest
// are closed without a word.
func (s *Server) refuse(uc *net.UnixConn) {
	s.stats.refused.Add(1)
	if s.refusing.Add(1) > maxRefusing {
		s.refusing.Add(-1)
		uc.Close()
		return
	}
	s.warnRefused(s.log, "server: refusing a client: too many connections", "max", s.maxConns)
	go func() {
		defer s.refusing.Add(-1)
		defer uc.Close()
		uc.SetDeadline(time.Now().Add(refuseTimeout))
		var b [HelloSize + 1]byte
		if _, err := uc.Read(b[:]); err != nil {
			return
		}
		var rb [HelloReplySize]byte
		rep := HelloReply{Magic: Magic, Version: Version, Status: StatusTooManyClients}
		rep.Encode(rb[:])
		uc.Write(rb[:])
	}()
}

// Pauses of the accept loop after failures in a row: from acceptPauseMin,
// doubling, to acceptPauseMax.
const (
	acceptPauseMin = 5 * time.Millisecond
	acceptPauseMax = time.Second
)

// acceptPause is the pause after an accept failure that follows one
// after which the loop paused for last (0: the first failure).
func acceptPause(last time.Duration) time.Duration {
	if last == 0 {
		return acceptPauseMin
	}
	return min(2*last, acceptPauseMax)
}

// Serve accepts clients on l until ctx is done, then shuts down: it stops
// accepting, stops reading requests, lets the requests already read
// finish (for up to the grace period, then cancels them, then after as
// long again closes the engine to end those that ignore cancellation),
// sends their replies and closes every connection. It returns nil after
// such a shutdown, or an error if connections were still open a grace
// period after the engine was closed under them (it does not wait for
// those). The caller closes the engine afterwards (which flushes
// and checkpoints, or returns the result of the close shutdown did) and
// closes l.
func (s *Server) Serve(ctx context.Context, l *net.UnixListener) error {
	stop := context.AfterFunc(ctx, func() { l.SetDeadline(time.Now()) })
	defer stop()
	var acceptErr error
	var pause time.Duration // after accept failures in a row
	for {
		uc, err := l.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				acceptErr = fmt.Errorf("server: accept: %w", err)
				break
			}
			// Out of descriptors or memory (EMFILE, ENFILE, ENOBUFS,
			// ENOMEM), or a connection that went before it was
			// accepted: the listener is fine, and the sessions that
			// end give the room back. Stopping here would end every
			// session because of clients that connect too many.
			pause = acceptPause(pause)
			if pause == acceptPauseMin {
				s.log.Warn("server: accept failed; retrying", "err", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(pause):
			}
			continue
		}
		pause = 0
		s.start(uc)
	}
	err := errors.Join(acceptErr, s.shutdown())
	if s.hangups != nil {
		// A connection left running (shutdown's error) finds it
		// closed, and counts no hang-up.
		s.hangups.Close()
	}
	return err
}

// start serves a new connection. A connection counts against MaxConns
// once its hello is read (claimSession): before that it is not a client
// yet, and a local process that opened MaxConns sockets and said nothing
// kept every client out for the hello timeout (and again as soon as it
// reconnected). Connections still to say hello are capped at MaxConns
// too: one more makes the oldest of them go (a client says hello as
// soon as it connects, so the oldest silent one is the likeliest
// squatter), so new clients always get in and silent ones never hold
// more than MaxConns descriptors.
//
// A connection that finds every place taken while a session is ending
// (awaitEnd) is not refused here: its hello waits for that place.
//
// The place count is read again after ending: a session that ended
// whole between the first read and ending's last look (its place given
// back before it leaves the leaving count: the goroutine below) was
// seen by neither, and the arrival was refused with a place free
// (TestH44iArrivalAsThePlaceFreesIsLetIn).
func (s *Server) start(uc *net.UnixConn) {
	full := func() bool { return s.sessions.Load() >= int64(s.maxConns) }
	if full() && (s.awaiting.Load() >= int64(s.maxConns) || !s.ending(nil)) && full() {
		s.refuse(uc)
		return
	}
	c := newConn(s, uc)
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		uc.Close()
		return
	}
	if len(s.greeting) >= s.maxConns {
		var oldest *conn
		for g := range s.greeting {
			if oldest == nil || g.greetSeq < oldest.greetSeq {
				oldest = g
			}
		}
		delete(s.greeting, oldest)
		oldest.evicted.Store(true)
		oldest.uc.SetReadDeadline(time.Now())
		s.stats.evicted.Add(1)
	}
	s.greetSeq++
	c.greetSeq = s.greetSeq
	s.greeting[c] = struct{}{}
	s.conns[c] = struct{}{}
	s.connWG.Add(1)
	s.mu.Unlock()
	s.stats.accepted.Add(1)
	s.stats.active.Add(1)
	go func() {
		defer s.connWG.Done()
		c.serve()
		if hook := servedHook.Load(); hook != nil {
			(*hook)(c)
		}
		if c.session {
			s.sessions.Add(-1)
		}
		// Its place and memory (serve gave that back) are free before
		// it leaves the leaving count and conns and ended is closed:
		// a waiter that finds it gone from conns finds ended closed,
		// and one whose ending finds it gone from leaving (those looks
		// take no lock, and may come before ended closes) takes again
		// (awaitEnd; start reads the place count again).
		s.mu.Lock()
		delete(s.conns, c)
		delete(s.greeting, c)
		if c.ending.Load() {
			s.leaving.Add(-1)
		}
		if hook := leftHook.Load(); hook != nil {
			(*hook)(c)
		}
		close(s.ended)
		s.ended = make(chan struct{})
		s.mu.Unlock()
		s.stats.active.Add(-1)
	}()
}

// slotWait bounds how long a connection waits for an ending session's
// place or memory (awaitEnd) before it is refused.
var slotWait = 2 * time.Second

// hupSyscalls counts the system calls made to learn whether a client
// has hung up (ending), which tests bound.
var hupSyscalls atomic.Int64

// watchHangup puts c, which holds a place, in s.hangups, which then
// reports its client's hang-up (level-triggered, with c's id)
// until c's socket is closed: closing it takes it out.
//
// A hang-up is EPOLLHUP, the client's close (or its shutdown of both
// sides), not EPOLLRDHUP: a client that shut down only its sending side
// still reads its replies and is still a client (see serve's teardown),
// and an arrival that waited for its place waited for as long as its
// requests ran, up to slotWait, to be refused then.
func (s *Server) watchHangup(c *conn) {
	if s.hangups == nil {
		return
	}
	sc, err := c.uc.SyscallConn()
	if err != nil {
		return
	}
	ev := unix.EpollEvent{Events: unix.EPOLLHUP, Fd: int32(c.id), Pad: int32(c.id >> 32)}
	sc.Control(func(cfd uintptr) {
		withFd(s.hangups, func(efd int) { unix.EpollCtl(efd, unix.EPOLL_CTL_ADD, int(cfd), &ev) })
	})
}

// withFd runs fn with f's descriptor, which is not closed (nor its number
// reused) until fn returns.
func withFd(f *os.File, fn func(fd int)) {
	if rc, err := f.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { fn(int(fd)) })
	}
}

// awaitEndHook, set by tests, runs when a connection begins to wait for
// an ending session (awaitEnd).
var awaitEndHook atomic.Pointer[func()]

// awaitEnd takes what take takes (a session's place, room for a region)
// for c, waiting for it while another connection is ending, and reports
// whether it got it. A client that closed its connection gives its place
// and its region's memory back only once the daemon has read its end and
// torn its session down, which a client connecting right after it would
// otherwise find taken: fio closes its setup connection before its job
// connects (or before the setup connects again with a larger region),
// and at --max-clients 1 the job was refused with EUSERS in a third of
// the runs (TestH43dFioJobAtTheClientCap). So c is refused at once only
// if no connection is ending (its client hung up, or its teardown runs:
// ending), else once none is any more, after slotWait, or when stop
// closes (shutdown). At most maxConns connections wait at once.
func (s *Server) awaitEnd(c *conn, stop <-chan struct{}, take func() bool) bool {
	var timeout <-chan time.Time
	for waited := false; ; {
		s.mu.Lock()
		ended := s.ended
		s.mu.Unlock()
		if take() {
			return true
		}
		if !s.ending(c) {
			// One that ending's last look missed has left the
			// leaving count, and gave back its place and memory
			// before it did: take again. ended may not be closed
			// yet (it closes after the leaving count falls, and
			// neither look takes s.mu), and the arrival was refused
			// with the place free
			// (TestH44iWaiterSeesOneThatLeftBeforeEndedCloses).
			if take() {
				return true
			}
			// One that ended after ended was read may have given
			// back what take found taken.
			select {
			case <-ended:
				continue
			default:
				return false
			}
		}
		if !waited {
			waited = true
			if s.awaiting.Add(1) > int64(s.maxConns) {
				s.awaiting.Add(-1)
				return false
			}
			defer s.awaiting.Add(-1)
			t := time.NewTimer(slotWait)
			defer t.Stop()
			timeout = t.C
			if hook := awaitEndHook.Load(); hook != nil {
				(*hook)()
			}
		}
		select {
		case <-ended:
		case <-stop:
			return false
		case <-timeout:
			return take()
		}
	}
}

// ending reports whether a connection other than self that holds a
// place is ending: its client has hung up (s.hangups says so at once,
// before the daemon has read its end) or its serve is ending. It makes
// one system call, however many connections are open: it runs for
// every arrival at the cap.
//
// A connection goes from the one to the other: its serve counts it
// leaving (markEnding) before its socket closes, which takes it out of
// s.hangups. So leaving is read again after the epoll call: one that
// went from the one to the other between a first look at leaving and
// the call is seen by the second look; with one look it was seen by
// neither, and an arrival was refused for a place about to come free
// (TestH44cEndingSeesOneThatClosedBetweenItsLooks).
func (s *Server) ending(self *conn) bool {
	if s.leaving.Load() > 0 {
		// self, waiting for a place or memory, is not among them.
		return true
	}
	if hook := endingHook.Load(); hook != nil {
		(*hook)()
	}
	if s.hangups == nil {
		return s.leaving.Load() > 0
	}
	var selfID uint64 // ids start at 1
	if self != nil {
		selfID = self.id
	}
	// Two: one of them may be self; epoll gives distinct ones.
	var evs [2]unix.EpollEvent
	n := 0
	withFd(s.hangups, func(efd int) {
		for {
			hupSyscalls.Add(1)
			var err error
			if n, err = unix.EpollWait(efd, evs[:], 0); err != unix.EINTR {
				return
			}
		}
	})
	for _, ev := range evs[:max(n, 0)] {
		if uint64(uint32(ev.Fd))|uint64(uint32(ev.Pad))<<32 != selfID {
			return true
		}
	}
	return s.leaving.Load() > 0
}

// endingHook, set by tests, runs in ending between its first look at
// leaving and the epoll call.
var endingHook atomic.Pointer[func()]

// leftHook, set by tests, runs under s.mu when a connection that has
// ended has left the leaving count, before ended closes.
var leftHook atomic.Pointer[func(*conn)]

// servedHook, set by tests, runs when a connection's serve has returned
// (its socket closed), before it gives its place back.
var servedHook atomic.Pointer[func(*conn)]

// leaveGreeting takes c out of the greeting set once its hello is read,
// and reports false if an eviction took it out first.
func (s *Server) leaveGreeting(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.greeting[c]; !ok {
		return false
	}
	delete(s.greeting, c)
	return true
}

// claimSession takes one of the MaxConns slots for a connection whose
// hello was read, if one is free.
func (s *Server) claimSession() bool {
	for {
		n := s.sessions.Load()
		if n >= int64(s.maxConns) {
			return false
		}
		if s.sessions.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// shutdown stops every connection: reading stops at once, in-flight
// requests get the grace period, then are canceled; those still running
// a grace period later are ended by closing the engine. A connection
// still open a grace period after that (a request stuck on a device that
// stopped answering) is left to the process's exit: shutdown returns an
// error that says so.
func (s *Server) shutdown() error {
	s.mu.Lock()
	s.closing = true
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	if len(conns) > 0 {
		s.log.Info("server: shutting down", "connections", len(conns))
	}
	for _, c := range conns {
		c.stopReading()
	}
	done := make(chan struct{})
	go func() { s.connWG.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-time.After(s.grace):
	}
	s.log.Warn("server: in-flight requests outlived the grace period; canceling them", "grace", s.grace)
	s.mu.Lock()
	for c := range s.conns {
		c.abort()
	}
	s.mu.Unlock()
	select {
	case <-done:
		return nil
	case <-time.After(s.grace):
	}
	// Some engine operations take no context (a truncate, a namespace
	// change) and may wait for writeback that cannot make progress (a
	// device failing appends): closing the engine wakes them with
	// engine.ErrClosed (StatusShutdown) and waits for the rest, then
	// writes back and checkpoints what it can. The caller's Close returns
	// this one's result.
	s.log.Warn("server: requests outlived their cancellation; closing the engine under them", "grace", s.grace)
	if err := s.closeEngine(); err != nil {
		s.log.Warn("server: close engine", "err", err)
	}
	// Closing the engine ends what waited in it; a request stuck in
	// device I/O that never completes (or that never reached the
	// engine) still holds its connection. Waiting for it would keep the
	// daemon from exiting: give it one more grace period, then leave it
	// (and its region) to the process's exit.
	select {
	case <-done:
		return nil
	case <-time.After(s.grace):
	}
	s.mu.Lock()
	left := len(s.conns)
	s.mu.Unlock()
	s.log.Error("server: connections outlived the engine's close; leaving them to the process's exit", "connections", left, "grace", s.grace)
	return fmt.Errorf("server: shutdown: connections still open a grace period after the engine closed: %d (requests that ignore cancellation: a device that stopped answering?); not waiting for them", left)
}

// closeEngine closes the engine, bounding its wait for the requests
// running under it with Close's minute or engineDrain.
func (s *Server) closeEngine() error {
	if s.engineDrain <= 0 {
		return s.e.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.engineDrain)
	defer cancel()
	return s.e.CloseContext(ctx)
}

// Connections is how many clients are connected.
func (s *Server) Connections() int { return int(s.stats.active.Load()) }

// SharedMemory is how many bytes of shared memory the clients' regions
// take.
func (s *Server) SharedMemory() int64 { return s.shm.Load() }
