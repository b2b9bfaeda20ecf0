package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/engine"
)

// ctlBytes is the tail of the region the Client keeps for names,
// listings and stats; the rest is for data (Data).
const ctlBytes = 64 << 10

// Client is a connection to a zonefold daemon.
//
// It has two levels. Submit and Recv send a batch of requests and
// receive a batch of replies without allocating; the caller places data
// in Data() and matches replies by tag. They are for one goroutine at a
// time: a Submit or Recv while another goroutine is in Submit or Recv
// (a receiver goroutine waiting while another submits, say) is refused
// with an error that says so, and so is a synchronous call meanwhile.
// The other methods are synchronous calls built on them; they are safe
// for concurrent use (they take turns) but must not be mixed with
// requests of the caller's own that are still unanswered (their replies
// would come to the synchronous call, which fails on their tags).
//
// Close may be called from any goroutine, at any time, more than once;
// it ends a call in progress (either level) with an error wrapping
// fs.ErrClosed, and every call after it returns such an error. Data
// returns nil once Close has begun, and a slice Data returned before
// must not be used after Close: the region is unmapped.
//
// Handles are numbers in this connection's session, as file
// descriptors are in a process: a handle used on another Client, or
// after CloseFile, names whatever file that session has (or next opens)
// under that number, or none (StatusBadHandle, EBADF).
//
// Dial speaks protocol version 2 (requests and replies in shared-memory
// rings); DialSocketFraming speaks version 1 (both as socket messages).
// The API is the same.
type Client struct {
	mu sync.Mutex
	// batch is held by Submit and Recv while they run (taken with
	// TryLock: a second goroutine is refused, not queued), and by Close
	// while it closes the socket and unmaps the region, which Submit and
	// Recv use without mu. Close shuts the socket down first, which ends
	// a Recv's wait, so it never waits for the daemon here. Taken after
	// mu by the synchronous calls (in Submit and Recv) and by Close.
	batch  sync.Mutex
	uc     *net.UnixConn
	fd     int    // uc's descriptor, for doorbells that must not wait
	mapped []byte // the whole shared region
	region []byte // its data and names part
	ring   *clientRing
	info   HelloReply
	sbuf   []byte
	rbuf   []byte
	// rnext and rlen bound the replies of the last message read into
	// rbuf (socket framing) that Recv has not returned yet: the caller's
	// reps had fewer places than it held.
	rnext, rlen int
	reps        []Reply
	reqs        []Request
	tag         uint64
	// pending is how many requests the synchronous calls submitted
	// whose replies have not been received: those of a call whose wait
	// was cut short (its context, a deadline). The daemon still runs
	// them, reading what they left in the region and writing their
	// results there; the next call waits for their replies (claim)
	// before it puts anything in the region, so that they are neither
	// taken for its own nor run on its names or data.
	pending int
	// lateOpens are the tags of opens among them: a late reply that
	// carries a handle puts it in orphans, and the next call closes
	// those before it claims the region (a handle nobody knows of
	// stayed open in the daemon for the connection's life).
	lateOpens map[uint64]struct{}
	orphans   []uint32
	// With rings, a wait for replies sleeps on a futex, not the socket:
	// these carry the context's deadline and cancellation to it, and
	// say that the daemon has gone (the socket reached its end).
	deadline atomic.Int64 // unix nanoseconds; 0: none
	canceled atomic.Int32 // 0, or what ended the context: ctxCanceled, ctxDeadline
	gone     atomic.Bool
	// sock is uc, for Close to shut it down before it waits for mu,
	// which a call in progress holds while it waits for the daemon.
	sock   *net.UnixConn
	closed atomic.Bool // Close has begun
	// watcherDone is closed when the goroutine that watches the socket
	// for the daemon's end (rings only) has returned: after that
	// nothing but the caller touches the region.
	watcherDone chan struct{}
}

// clientRing is the client's side of the rings (version 2).
type clientRing struct {
	entries, mask uint32
	sqHead        *uint32
	sqTail        *uint32
	sqFlags       *uint32
	cqHead        *uint32
	cqTail        *uint32
	cqFlags       *uint32
	sqes, cqes    []byte
	tail          uint32        // requests published
	head          uint32        // replies consumed
	gap           time.Duration // moving average of waits for replies
}

// Dial connects to the daemon at socket and asks for a shared-memory
// region of regionBytes (0: DefaultRegion; else 128 KiB to MaxRegion)
// for data and names; requests and replies travel in rings of
// DefaultRingEntries in the region. A daemon that speaks only version 1
// refuses version 2 and says so; Dial then connects again with version
// 1 (socket framing).
func Dial(ctx context.Context, socket string, regionBytes int) (*Client, error) {
	c, err := dialVersion(ctx, socket, regionBytes, VersionRings)
	var ve *versionError
	if errors.As(err, &ve) && ve.speaks == VersionFraming {
		return dialVersion(ctx, socket, regionBytes, VersionFraming)
	}
	return c, err
}

// versionError is a hello refused with EPROTONOSUPPORT: the daemon
// speaks versions up to speaks.
type versionError struct{ speaks, asked uint16 }

func (e *versionError) Error() string {
	return fmt.Sprintf("%v (it speaks up to version %d, this client %d)", StatusVersion, e.speaks, e.asked)
}

func (e *versionError) Unwrap() error { return StatusVersion }

// DialSocketFraming is Dial with protocol version 1: requests and
// replies travel as socket messages.
func DialSocketFraming(ctx context.Context, socket string, regionBytes int) (*Client, error) {
	return dialVersion(ctx, socket, regionBytes, VersionFraming)
}

func dialVersion(ctx context.Context, socket string, regionBytes int, version uint16) (*Client, error) {
	if regionBytes == 0 {
		regionBytes = DefaultRegion
	}
	if regionBytes < 2*ctlBytes {
		return nil, fmt.Errorf("zonefold: region of %d bytes is too small (at least %d)", regionBytes, 2*ctlBytes)
	}
	if regionBytes > MaxRegion {
		// The daemon refuses it with a bare EINVAL.
		return nil, fmt.Errorf("zonefold: region of %d bytes is too large (at most %d)", regionBytes, MaxRegion)
	}
	if err := checkSocketPath(socket); err != nil {
		return nil, fmt.Errorf("zonefold: connect to daemon: %w", err)
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unixpacket", socket)
	if err != nil {
		return nil, fmt.Errorf("zonefold: connect to daemon: %w", err)
	}
	uc := nc.(*net.UnixConn)
	c := &Client{uc: uc,
		sbuf: make([]byte, MaxBatch*RequestSize),
		rbuf: make([]byte, (MaxBatch+1)*ReplySize),
		reps: make([]Reply, MaxBatch),
		reqs: make([]Request, 0, MaxBatch),
	}
	c.sock = uc
	if err := c.hello(ctx, uint64(regionBytes), version); err != nil {
		uc.Close()
		if c.mapped != nil {
			unix.Munmap(c.mapped)
		}
		return nil, err
	}
	if c.ring != nil {
		c.watcherDone = make(chan struct{})
		go c.watchDaemon()
	}
	return c, nil
}

// watchDaemon waits, in Go's poller, for the end of the socket: in
// version 2 the daemon sends nothing after the hello, so anything that
// ends a read is the daemon going away (or Close). It then wakes a
// client asleep in the futex wait for replies.
func (c *Client) watchDaemon() {
	defer close(c.watcherDone)
	var b [16]byte
	for {
		if _, err := c.uc.Read(b[:]); err != nil {
			break
		}
	}
	c.gone.Store(true)
	c.ring.interrupt()
}

func (c *Client) hello(ctx context.Context, size uint64, version uint16) error {
	defer c.watch(ctx)()
	var hb [HelloRingsSize]byte
	h := Hello{Magic: Magic, Version: version, Region: size}
	h.Encode(hb[:])
	if _, err := c.uc.Write(hb[:helloSize(version)]); err != nil {
		return c.sendError("send hello", c.cutShort(err))
	}
	var rb [HelloReplyV2Size + 1]byte
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, flags, _, err := c.uc.ReadMsgUnix(rb[:], oob)
	if (err == nil && n == 0) || (err != nil && closedByPeer(err)) {
		// The daemon went away (killed, or stopping) before it answered:
		// an empty reply is its end, not a foreign one
		// (TestDialSaysWhenTheDaemonClosesDuringTheHello).
		return fmt.Errorf("zonefold: daemon closed the connection before it answered the hello: %w", io.ErrUnexpectedEOF)
	}
	if err != nil {
		return fmt.Errorf("zonefold: read hello reply: %w", c.cutShort(err))
	}
	var fd = -1
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil && len(msgs) == 1 {
		if fds, err := unix.ParseUnixRights(&msgs[0]); err == nil && len(fds) == 1 {
			fd = fds[0]
		}
	}
	if fd >= 0 {
		defer unix.Close(fd)
	}
	rep, err := ParseHelloReply(rb[:n])
	if err != nil {
		return fmt.Errorf("zonefold: not a zonefold daemon: %w", err)
	}
	if rep.Status != StatusOK {
		if rep.Status == StatusVersion {
			return fmt.Errorf("zonefold: daemon refused the connection: %w", &versionError{speaks: rep.Version, asked: version})
		}
		return fmt.Errorf("zonefold: daemon refused the connection: %w%s", rep.Status, refusedWhy(rep.Status))
	}
	if fd < 0 && flags&unix.MSG_CTRUNC != 0 {
		// The kernel had no descriptor to give this process for the
		// region's memfd, and dropped it.
		return fmt.Errorf("zonefold: the daemon's region did not arrive: this process is out of file descriptors (ulimit -n): %w", unix.EMFILE)
	}
	if fd < 0 {
		return errors.New("zonefold: hello reply without the region")
	}
	mapSize := rep.Region
	if version == VersionRings {
		if err := checkRingLayout(&rep, n); err != nil {
			return fmt.Errorf("zonefold: not a zonefold daemon: %w", err)
		}
		mapSize = rep.MapSize
	}
	mem, err := unix.Mmap(fd, 0, int(mapSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("zonefold: map region: %w", err)
	}
	c.mapped, c.region, c.info = mem, mem[:rep.Region], rep
	if version == VersionRings {
		area := mem[rep.RingOff:]
		n := rep.Entries
		c.ring = &clientRing{entries: n, mask: n - 1,
			sqHead: word(area, RingSQHead), sqTail: word(area, RingSQTail), sqFlags: word(area, RingSQFlags),
			cqHead: word(area, RingCQHead), cqTail: word(area, RingCQTail), cqFlags: word(area, RingCQFlags),
			sqes: area[rep.SQOff : rep.SQOff+n*RequestSize],
			cqes: area[rep.CQOff : rep.CQOff+n*ReplySize],
		}
		rc, err := c.uc.SyscallConn()
		if err != nil {
			return fmt.Errorf("zonefold: socket: %w", err)
		}
		rc.Control(func(fd uintptr) { c.fd = int(fd) })
	}
	return nil
}

// maxMapSize bounds what a version 2 client maps: the largest region
// and more than the largest ring area.
const maxMapSize = MaxRegion + 1<<20

// checkRingLayout checks that a version 2 hello reply describes rings
// that fit in the region it maps.
func checkRingLayout(r *HelloReply, n int) error {
	e := uint64(r.Entries)
	switch {
	case n != HelloReplyV2Size || r.Version != VersionRings:
		return fmt.Errorf("version %d hello reply of %d bytes to a version %d hello", r.Version, n, VersionRings)
	case e == 0 || e&(e-1) != 0 || e > MaxRingEntries:
		return fmt.Errorf("rings of %d entries", e)
	case r.MapSize > maxMapSize:
		return fmt.Errorf("a mapping of %d bytes (at most %d)", r.MapSize, uint64(maxMapSize))
	case r.Region > r.RingOff || r.RingOff > r.MapSize || r.SQOff%64 != 0 || r.CQOff%64 != 0 ||
		r.RingOff+uint64(r.SQOff)+e*RequestSize > r.MapSize ||
		r.RingOff+uint64(r.CQOff)+e*ReplySize > r.MapSize ||
		uint64(r.SQOff) < RingCQFlags+4 || uint64(r.CQOff) < RingCQFlags+4 || r.RingOff%8 != 0:
		return fmt.Errorf("rings at %d+%d/%d do not fit a region of %d", r.RingOff, r.SQOff, r.CQOff, r.MapSize)
	}
	return nil
}

// Why a context ended, for a futex wait that it interrupts.
const (
	ctxCanceled = 1 + iota
	ctxDeadline
)

// watch applies ctx to the connection until the returned func is
// called: a deadline, and cancellation by an immediate deadline (socket
// framing) or a wakeup of the futex wait (rings). When the returned func
// returns, the context's callback has finished or will never run: it
// cannot touch the connection after Close or cancel a later call.
func (c *Client) watch(ctx context.Context) func() {
	if ctx.Done() == nil {
		return func() {} // never canceled, no deadline
	}
	if d, ok := ctx.Deadline(); ok {
		c.setDeadline(d)
	}
	uc, r := c.uc, c.ring
	done := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(done)
		why := int32(ctxCanceled)
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			why = ctxDeadline
		}
		c.canceled.Store(why)
		if r != nil {
			r.interrupt()
		} else {
			uc.SetDeadline(time.Now())
		}
	})
	return func() {
		if !stop() {
			<-done // the callback started: let it finish
		}
		c.canceled.Store(0)
		c.setDeadline(time.Time{})
	}
}

// deadlineError ends a call whose context's deadline passed: it is
// context.DeadlineExceeded, which a caller of a call that takes a
// context looks for (as a canceled call's error is context.Canceled),
// and os.ErrDeadlineExceeded, which the socket reports and this client
// returned alone before (errors.Is(err, context.DeadlineExceeded) was
// false).
type deadlineError struct{}

func (deadlineError) Error() string   { return "context deadline exceeded" }
func (deadlineError) Timeout() bool   { return true }
func (deadlineError) Temporary() bool { return true }
func (deadlineError) Is(target error) bool {
	return target == context.DeadlineExceeded || target == os.ErrDeadlineExceeded
}

// cutShort says why a socket operation that watch's deadline ended
// failed: the context was canceled (watch set a deadline of now) or
// its deadline passed. Other errors are returned as they are.
func (c *Client) cutShort(err error) error {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	if c.canceled.Load() == ctxCanceled {
		return context.Canceled
	}
	return deadlineError{}
}

// setDeadline bounds every wait of the connection until t (zero: none).
// With rings the waits are futex waits and the socket is left to
// watchDaemon, without a deadline (the hello's is cleared).
func (c *Client) setDeadline(t time.Time) {
	if c.ring == nil || t.IsZero() {
		c.uc.SetDeadline(t)
	}
	if t.IsZero() {
		c.deadline.Store(0)
	} else {
		c.deadline.Store(t.UnixNano())
	}
}

// interrupt wakes the client if it sleeps in the futex wait for
// replies: it clears CQWaiting first, so that a wait that has not begun
// yet does not begin (the word no longer holds CQWaiting).
func (r *clientRing) interrupt() {
	atomic.AndUint32(r.cqFlags, ^uint32(CQWaiting))
	futexWake(r.cqFlags)
}

// Close ends the session; the daemon closes its handles. A call in
// progress in another goroutine ends with an error wrapping
// fs.ErrClosed; Close does not wait for the daemon to answer it.
func (c *Client) Close() error {
	// End the session before taking mu, which a call holds while it
	// waits: its read ends (socket framing), or watchDaemon's does and
	// wakes its futex wait (rings). A shutdown, not a close: the
	// descriptor, which the call may still use for a doorbell, is not
	// given back for reuse until the call has returned.
	c.closed.Store(true)
	c.sock.CloseRead()
	c.sock.CloseWrite()
	c.mu.Lock()
	defer c.mu.Unlock()
	// A Submit or Recv of the batch level, which does not take mu, may
	// still run in another goroutine: the shutdown ended its wait; let it
	// return before the region goes (it faulted on the unmapped ring).
	c.batch.Lock()
	defer c.batch.Unlock()
	if c.uc == nil {
		return nil
	}
	err := c.uc.Close()
	if c.watcherDone != nil {
		<-c.watcherDone // it may wake the futex, in the region
	}
	if c.mapped != nil {
		unix.Munmap(c.mapped)
		c.mapped = nil
		// c.region is left as it is, for Data, which reads it without
		// a lock: Data and the calls look at closed and uc first.
	}
	c.uc = nil
	return err
}

// errClosed is the error of a call on a closed client.
var errClosed = fmt.Errorf("zonefold: client: %w", os.ErrClosed)

// errBatchBusy refuses a Submit or Recv while another goroutine is in
// one (see Client).
var errBatchBusy = errors.New("zonefold: Submit or Recv while another goroutine is in Submit or Recv on this Client: the batch level is for one goroutine at a time, and a synchronous call must not overlap it")

// enterBatch takes batch for a Submit or Recv, refusing the call on a
// closed client or while another goroutine holds it.
func (c *Client) enterBatch() error {
	if !c.batch.TryLock() {
		if c.closed.Load() {
			return errClosed // Close holds it
		}
		return errBatchBusy
	}
	if c.closed.Load() || c.uc == nil {
		c.batch.Unlock()
		return errClosed
	}
	return nil
}

// Limits is what the daemon granted. MaxInflight is the most requests
// the client may have outstanding (with rings: from Submit until Recv
// returns their replies).
func (c *Client) Limits() HelloReply { return c.info }

// Data is the part of the shared region for I/O data: a request's Addr
// is an offset into it. It is nil once Close has begun; a slice it
// returned before must not be used after Close (the region is unmapped).
func (c *Client) Data() []byte {
	if c.closed.Load() {
		return nil
	}
	return c.data()
}

// data is Data for the synchronous calls (mu held, usable): Close, which
// has begun (Data is nil), waits for them before it unmaps the region.
func (c *Client) data() []byte { return c.region[:len(c.region)-ctlBytes] }

// ctl is the part of the region the synchronous calls use.
func (c *Client) ctl() (uint64, []byte) {
	off := len(c.region) - ctlBytes
	return uint64(off), c.region[off:]
}

// Submit sends reqs (at most MaxBatch) as one batch.
func (c *Client) Submit(reqs []Request) error {
	if err := c.enterBatch(); err != nil {
		return err
	}
	defer c.batch.Unlock()
	if len(reqs) == 0 || len(reqs) > MaxBatch {
		return fmt.Errorf("zonefold: batch of %d requests (1..%d)", len(reqs), MaxBatch)
	}
	if r := c.ring; r != nil {
		n := uint32(len(reqs))
		if r.tail-r.head+n > r.entries {
			return fmt.Errorf("zonefold: %d requests outstanding and %d more, the rings hold %d", r.tail-r.head, n, r.entries)
		}
		for i := range reqs {
			j := (r.tail + uint32(i)) & r.mask
			reqs[i].Encode(r.sqes[j*RequestSize : (j+1)*RequestSize])
		}
		r.tail += n
		atomic.StoreUint32(r.sqTail, r.tail)
		return c.wakeDaemon(r)
	}
	b := c.sbuf[:len(reqs)*RequestSize]
	for i := range reqs {
		reqs[i].Encode(b[i*RequestSize:])
	}
	if _, err := c.uc.Write(b); err != nil {
		return c.sendError("send", c.cutShort(err))
	}
	return nil
}

// sendError is the error of a send (what) to the daemon that failed
// with err: a daemon that closed its end (it stopped, or was killed: a
// send then fails with EPIPE, or ECONNRESET with requests of ours
// unread) says so as a read of the end does, wrapping
// io.ErrUnexpectedEOF; a client being closed says that
// (TestH38bCallAfterDaemonKilledSaysItClosed).
func (c *Client) sendError(what string, err error) error {
	switch {
	case c.closed.Load():
		return fmt.Errorf("zonefold: %s: %w", what, os.ErrClosed)
	case errors.Is(err, unix.EPIPE) || errors.Is(err, unix.ECONNRESET):
		return fmt.Errorf("zonefold: daemon closed the connection: %w", io.ErrUnexpectedEOF)
	}
	return fmt.Errorf("zonefold: %s: %w", what, err)
}

// wakeDaemon rings the doorbell if the daemon sleeps, after the
// submission tail was stored: the daemon sets SQNeedWakeup before it
// loads the tail again, and both sides change the flag word with
// read-modify-writes only, so one of the two sees the other (see
// setFlag).
func (c *Client) wakeDaemon(r *clientRing) error {
	if wakeupLost() || !claimFlag(r.sqFlags, SQNeedWakeup) {
		return nil
	}
	return c.doorbell()
}

// doorbell wakes the daemon without waiting: if its socket is full, the
// doorbells it has not read yet wake it.
func (c *Client) doorbell() error {
	err := unix.Sendto(c.fd, doorbellMsg[:], unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, nil)
	if err != nil && !errors.Is(err, unix.EAGAIN) {
		return c.sendError("wake the daemon", err)
	}
	return nil
}

// Recv waits for the next batch of replies and decodes as many as fit
// into reps (room for MaxBatch takes any batch whole); those that do not
// fit come with the next Recv.
func (c *Client) Recv(reps []Reply) (int, error) {
	if err := c.enterBatch(); err != nil {
		return 0, err
	}
	defer c.batch.Unlock()
	if len(reps) == 0 {
		return 0, errors.New("zonefold: Recv with no room for a reply")
	}
	if r := c.ring; r != nil {
		return c.recvRing(r, reps)
	}
	if c.rnext == c.rlen {
		if err := c.readReplies(); err != nil {
			return 0, err
		}
	}
	k := min((c.rlen-c.rnext)/ReplySize, len(reps))
	for i := range k {
		b := c.rbuf[c.rnext+i*ReplySize:]
		reps[i] = Reply{Tag: le.Uint64(b[0:]), Status: Status(le.Uint32(b[8:])),
			Val: le.Uint64(b[16:]), Val2: le.Uint64(b[24:])}
	}
	c.rnext += k * ReplySize
	return k, nil
}

// readReplies reads the next message of replies into rbuf (socket
// framing).
func (c *Client) readReplies() error {
	c.rnext, c.rlen = 0, 0
	n, err := c.uc.Read(c.rbuf)
	if err != nil && errors.Is(err, unix.ECONNRESET) && !c.closed.Load() {
		// The daemon's socket was closed with requests of ours unread
		// (it died, or dropped us): the kernel reports that reset
		// before the replies already queued for us, which are still
		// there, then the end. Those replies are results the daemon
		// sent (fsyncs' acknowledgements among them): read on. The
		// reset is reported once, so a second one is not waited for.
		n, err = c.uc.Read(c.rbuf)
	}
	if err != nil {
		if c.closed.Load() {
			return fmt.Errorf("zonefold: receive: %w", os.ErrClosed)
		}
		if closedByPeer(err) {
			return fmt.Errorf("zonefold: daemon closed the connection: %w", io.ErrUnexpectedEOF)
		}
		// watch cut the read short: a deadline of now, or the
		// context's deadline.
		return fmt.Errorf("zonefold: receive: %w", c.cutShort(err))
	}
	if n%ReplySize != 0 || n > MaxBatch*ReplySize {
		return fmt.Errorf("zonefold: reply message of %d bytes", n)
	}
	c.rlen = n
	return nil
}

// closedByPeer says whether a read error means the daemon closed the
// connection: end of stream, or a reset when it closed with requests or
// doorbells of ours unread (Recv reads past the first, to the replies
// queued behind it).
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, unix.ECONNRESET)
}

// recvRing takes the replies the daemon has published, waiting for at
// least one: a short spin if the daemon has lately been quick, then
// sleep until its doorbell.
func (c *Client) recvRing(r *clientRing, reps []Reply) (int, error) {
	var start time.Time // of the wait, if the replies were not there
	slept := false
	for {
		t := atomic.LoadUint32(r.cqTail)
		avail := t - r.head
		if avail > r.entries {
			return 0, fmt.Errorf("zonefold: the daemon's completion tail %d is more than a ring past %d", t, r.head)
		}
		if avail > 0 {
			if !start.IsZero() {
				r.gap += (time.Since(start) - r.gap) / 8
			}
			k := min(int(avail), len(reps))
			for i := range k {
				j := (r.head + uint32(i)) & r.mask
				b := r.cqes[j*ReplySize : (j+1)*ReplySize]
				reps[i] = Reply{Tag: le.Uint64(b[0:]), Status: Status(le.Uint32(b[8:])),
					Val: le.Uint64(b[16:]), Val2: le.Uint64(b[24:])}
			}
			r.head += uint32(k)
			atomic.StoreUint32(r.cqHead, r.head)
			return k, nil
		}
		if start.IsZero() {
			start = time.Now()
		}
		if !slept && r.gap < spinMax && time.Since(start) < max(2*r.gap, spinMax/8) {
			runtime.Gosched()
			continue
		}
		setFlag(r.cqFlags, CQWaiting)
		if atomic.LoadUint32(r.cqTail) != r.head {
			claimFlag(r.cqFlags, CQWaiting)
			continue
		}
		slept = true
		err := c.sleep(r)
		claimFlag(r.cqFlags, CQWaiting)
		if err != nil {
			return 0, err
		}
	}
}

// ringRecheck bounds each futex wait for replies. It is a safety net,
// not what the protocol relies on: a wait that ends by it looks at the
// completion tail again, and rings the doorbell again if the daemon
// sleeps with requests of ours it has not taken. A client then never
// waits for ever on a live daemon that missed a wakeup, either way
// (a bug; lostWakeups lets tests make one).
var ringRecheck = time.Second

// sleep waits on the CQWaiting futex until the daemon publishes
// replies, the deadline passes, the context is canceled or the daemon
// goes away. The caller has set CQWaiting. Each of those wakes the
// futex after clearing CQWaiting (the daemon, interrupt), so a wakeup
// between the checks here and the wait ends the wait at once; the waits
// are bounded by ringRecheck all the same (see there).
func (c *Client) sleep(r *clientRing) error {
	for atomic.LoadUint32(r.cqTail) == r.head {
		switch c.canceled.Load() {
		case ctxCanceled:
			return fmt.Errorf("zonefold: receive: %w", context.Canceled)
		case ctxDeadline:
			return fmt.Errorf("zonefold: receive: %w", deadlineError{})
		}
		if c.gone.Load() {
			if c.closed.Load() {
				return fmt.Errorf("zonefold: receive: %w", os.ErrClosed)
			}
			return fmt.Errorf("zonefold: daemon closed the connection: %w", io.ErrUnexpectedEOF)
		}
		timeout := ringRecheck
		if d := c.deadline.Load(); d != 0 {
			left := time.Duration(d - time.Now().UnixNano())
			if left <= 0 {
				return fmt.Errorf("zonefold: receive: %w", deadlineError{})
			}
			timeout = min(timeout, left)
		}
		futexWait(r.cqFlags, CQWaiting, timeout)
		// Woken (by the daemon, a cancellation, the daemon's end), a
		// signal, the deadline or the safety net: say again that we
		// sleep, then look. A daemon asleep with requests it has not
		// taken missed our doorbell: ring it again.
		setFlag(r.cqFlags, CQWaiting)
		if atomic.LoadUint32(r.sqHead) != r.tail {
			if err := c.wakeDaemon(r); err != nil {
				return err
			}
		}
	}
	return nil
}

// roundTrip sends c.reqs as one batch, tagged 1..n after c.tag, and
// waits for every reply; replies land in c.reps in request order. The
// caller has made the region its own (claim) before it put names or
// data there.
func (c *Client) roundTrip(ctx context.Context) error {
	if err := c.claim(ctx); err != nil {
		return err
	}
	defer c.watch(ctx)()
	var got [MaxBatch]Reply
	base := c.tag
	for i := range c.reqs {
		c.tag++
		c.reqs[i].Tag = c.tag
	}
	sent := c.submitted()
	err := c.Submit(c.reqs)
	// A ring's requests are published even if the doorbell failed.
	c.pending += int(c.submitted() - sent)
	if c.ring == nil && err == nil {
		c.pending += len(c.reqs)
	}
	if err != nil {
		return err
	}
	var answered [MaxBatch]bool
	for left := len(c.reqs); left > 0; {
		n, err := c.Recv(got[:])
		if err != nil {
			c.noteLateOpens(answered[:len(c.reqs)])
			return err
		}
		c.pending -= n
		for _, r := range got[:n] {
			i := r.Tag - base - 1
			if r.Tag <= base || i >= uint64(len(c.reqs)) {
				return fmt.Errorf("zonefold: reply with unexpected tag %d", r.Tag)
			}
			c.reps[i] = r
			answered[i] = true
			left--
		}
	}
	return nil
}

// noteLateOpens remembers the opens of c.reqs whose replies the call
// stopped waiting for: drain closes the handles their late replies
// carry.
func (c *Client) noteLateOpens(answered []bool) {
	for i, q := range c.reqs {
		if q.Op != OpOpen || answered[i] {
			continue
		}
		if c.lateOpens == nil {
			c.lateOpens = map[uint64]struct{}{}
		}
		c.lateOpens[q.Tag] = struct{}{}
	}
}

// closeOrphans closes the handles late replies of canceled opens
// carried (mu held, nothing pending): their replies are dropped too. A
// handle leaves the list only once its close is sent (published on the
// ring, or written to the socket): a call cut short before that (its
// context, a failed send) leaves it for the next call, and one cut short
// after it leaves the close's reply pending (drain), the daemon closing
// the handle all the same. Taking a batch off the list before its send
// lost the handles of a send that failed: they stayed open in the daemon
// for the connection's life (TestOrphanCloseCutShortLeavesNoHandle).
func (c *Client) closeOrphans() error {
	for len(c.orphans) > 0 {
		n := min(len(c.orphans), MaxBatch)
		reqs := make([]Request, n)
		for i, h := range c.orphans[:n] {
			c.tag++
			reqs[i] = Request{Tag: c.tag, Op: OpClose, Handle: h}
		}
		sent := c.submitted()
		err := c.Submit(reqs)
		published := int(c.submitted() - sent)
		if c.ring == nil && err == nil {
			published = n
		}
		c.pending += published
		c.orphans = c.orphans[published:]
		if err != nil {
			return fmt.Errorf("zonefold: close the handles of canceled opens: %w", err)
		}
		var got [MaxBatch]Reply
		if err := c.drain(got[:]); err != nil {
			return err
		}
	}
	return nil
}

// usable refuses a call on a closed client (mu held): its region is
// unmapped, and a call that placed a name or data there faulted.
func (c *Client) usable() error {
	if c.uc == nil {
		return errClosed
	}
	return nil
}

// claim makes the region the caller's (mu held): on a usable client, it
// waits, within ctx, for the replies of the requests earlier calls cut
// short (drain). Until those come the daemon may still run them, reading
// the names and data they left in the region and writing their results
// there, so a call claims the region before it copies anything into it:
// a Remove left with the daemon would otherwise remove the name the next
// call put in its place, a read land its bytes over the next write's.
func (c *Client) claim(ctx context.Context) error {
	if err := c.usable(); err != nil {
		return err
	}
	if c.pending == 0 && len(c.orphans) == 0 {
		return nil
	}
	if hook := claimHook.Load(); hook != nil {
		(*hook)()
	}
	defer c.watch(ctx)()
	var got [MaxBatch]Reply
	if err := c.drain(got[:]); err != nil {
		return err
	}
	return c.closeOrphans()
}

// claimHook, set by tests, runs when a call begins to wait for the
// replies of calls cut short before it: a test then knows the call has
// started without waiting on a clock.
var claimHook atomic.Pointer[func()]

// drain waits for the replies of the requests that earlier calls cut
// short left with the daemon (pending), and drops them: those calls have
// returned, and until its reply comes a request may still write into the
// region.
func (c *Client) drain(got []Reply) error {
	for c.pending > 0 {
		n, err := c.Recv(got)
		if err != nil {
			return fmt.Errorf("zonefold: wait for the replies of an earlier call cut short: %w", err)
		}
		c.pending -= n
		for _, r := range got[:n] {
			if _, ok := c.lateOpens[r.Tag]; !ok {
				continue
			}
			delete(c.lateOpens, r.Tag)
			if r.Status == StatusOK {
				c.orphans = append(c.orphans, uint32(r.Val))
			}
		}
	}
	return nil
}

// submitted counts the requests published on the ring (0 with socket
// framing).
func (c *Client) submitted() uint32 {
	if c.ring == nil {
		return 0
	}
	return c.ring.tail
}

// call runs one request synchronously.
func (c *Client) call(ctx context.Context, q Request) (Reply, error) {
	c.reqs = append(c.reqs[:0], q)
	if err := c.roundTrip(ctx); err != nil {
		return Reply{}, err
	}
	r := c.reps[0]
	return r, r.Status.Err()
}

// putNames claims the region, copies names into the control area and
// sets q's range.
func (c *Client) putNames(ctx context.Context, q *Request, first, second string) error {
	if err := c.claim(ctx); err != nil {
		return err
	}
	off, ctl := c.ctl()
	if len(first)+len(second) > len(ctl) {
		return fmt.Errorf("zonefold: name too long: %w", StatusNameTooLong)
	}
	copy(ctl, first)
	copy(ctl[len(first):], second)
	q.Addr, q.Len, q.Len2 = off, uint32(len(first)), uint32(len(second))
	return nil
}

// Open opens a file by name with OpenCreate/OpenTrunc flags; it returns
// the handle and the file's size.
func (c *Client) Open(ctx context.Context, name string, flags uint8) (uint32, int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := Request{Op: OpOpen, Flags: flags}
	if err := c.putNames(ctx, &q, name, ""); err != nil {
		return 0, 0, err
	}
	r, err := c.call(ctx, q)
	if err != nil {
		return 0, 0, fmt.Errorf("zonefold: open %q: %w", name, err)
	}
	return uint32(r.Val), int64(r.Val2), nil
}

// CloseFile closes a handle.
func (c *Client) CloseFile(ctx context.Context, h uint32) error {
	return c.simple(ctx, Request{Op: OpClose, Handle: h}, "close")
}

// Fsync makes a file durable (handle 0: every file).
func (c *Client) Fsync(ctx context.Context, h uint32) error {
	return c.simple(ctx, Request{Op: OpFsync, Handle: h}, "fsync")
}

// Truncate sets a file's size.
func (c *Client) Truncate(ctx context.Context, h uint32, size int64) error {
	return c.simple(ctx, Request{Op: OpTruncate, Handle: h, Off: uint64(size)}, "truncate")
}

// Grow sets a file's size only if that grows it (TruncateGrow): a file
// already at least size bytes long is left as it is.
func (c *Client) Grow(ctx context.Context, h uint32, size int64) error {
	return c.simple(ctx, Request{Op: OpTruncate, Handle: h, Flags: TruncateGrow, Off: uint64(size)}, "grow")
}

func (c *Client) simple(ctx context.Context, q Request, what string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.call(ctx, q); err != nil {
		return fmt.Errorf("zonefold: %s: %w", what, err)
	}
	return nil
}

// Remove deletes a file.
func (c *Client) Remove(ctx context.Context, name string) error {
	return c.named(ctx, OpRemove, name, "")
}

// Rename renames a file, replacing newName.
func (c *Client) Rename(ctx context.Context, oldName, newName string) error {
	return c.named(ctx, OpRename, oldName, newName)
}

func (c *Client) named(ctx context.Context, op Op, a, b string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := Request{Op: op}
	if err := c.putNames(ctx, &q, a, b); err != nil {
		return err
	}
	if _, err := c.call(ctx, q); err != nil {
		if op == OpRename {
			return fmt.Errorf("zonefold: %s %q to %q: %w", op, a, b, err)
		}
		return fmt.Errorf("zonefold: %s %q: %w", op, a, err)
	}
	return nil
}

// FileStat is a file's size and id.
type FileStat struct {
	Size int64
	ID   uint64
}

// Stat describes a file by name.
func (c *Client) Stat(ctx context.Context, name string) (FileStat, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := Request{Op: OpStat}
	if err := c.putNames(ctx, &q, name, ""); err != nil {
		return FileStat{}, err
	}
	r, err := c.call(ctx, q)
	if err != nil {
		return FileStat{}, fmt.Errorf("zonefold: stat %q: %w", name, err)
	}
	return FileStat{Size: int64(r.Val), ID: r.Val2}, nil
}

// List returns every file, by name.
func (c *Client) List(ctx context.Context) ([]ListEntry, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(); err != nil {
		return nil, err
	}
	off, ctl := c.ctl()
	var out []ListEntry
	byName := true // ListAfter: a daemon older than it answers EINVAL
	for {
		q := Request{Op: OpList, Off: uint64(len(out)), Addr: off, Len: uint32(len(ctl))}
		if byName {
			// The cursor is the last name listed: a page starts after
			// it, wherever others' creates and removes moved it.
			q.Flags, q.Off = ListAfter, 0
			if len(out) > 0 {
				q.Off = uint64(copy(ctl, out[len(out)-1].Name))
			}
		}
		r, err := c.call(ctx, q)
		if byName && len(out) == 0 && errors.Is(err, unix.EINVAL) {
			byName = false
			continue
		}
		if err != nil {
			return out, fmt.Errorf("zonefold: list: %w", err)
		}
		if r.Val == 0 {
			return out, nil
		}
		part, err := ParseList(ctl, int(r.Val))
		if err != nil {
			return out, err
		}
		out = append(out, part...)
		if !byName && uint64(len(out)) >= r.Val2 {
			return out, nil
		}
	}
}

// Stats returns the engine's stats.
func (c *Client) Stats(ctx context.Context) (engine.Stats, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var st engine.Stats
	if err := c.usable(); err != nil {
		return st, err
	}
	off, ctl := c.ctl()
	r, err := c.call(ctx, Request{Op: OpStats, Addr: off, Len: uint32(len(ctl))})
	if err != nil {
		return st, fmt.Errorf("zonefold: stats: %w", err)
	}
	if err := json.Unmarshal(ctl[:r.Val], &st); err != nil {
		return st, fmt.Errorf("zonefold: stats: %w", err)
	}
	return st, nil
}

// chunking splits transfers through Data into pieces that fit the
// region several at a time, so that one batch carries a few of them.
func (c *Client) chunking() (chunk, depth int) {
	data := len(c.data())
	chunk = min(data, 1<<20, int(c.info.MaxIO))
	depth = min(data/chunk, MaxBatch, int(c.info.MaxInflight))
	return chunk, depth
}

// WriteAt writes p at off through the region, several chunks per batch.
// It returns how many bytes the daemon acknowledged, in order from off;
// with an error, the bytes past those may have been written or not (a
// call cut short by its context, Close or the daemon's end leaves its
// requests running in the daemon).
func (c *Client) WriteAt(ctx context.Context, h uint32, p []byte, off int64) (int, error) {
	return c.transfer(ctx, OpWrite, h, p, off)
}

// ReadAt reads into p from off; at the end of the file it returns fewer
// bytes and io.EOF.
func (c *Client) ReadAt(ctx context.Context, h uint32, p []byte, off int64) (int, error) {
	return c.transfer(ctx, OpRead, h, p, off)
}

// transfer moves p through Data in batches of chunks.
func (c *Client) transfer(ctx context.Context, op Op, h uint32, p []byte, off int64) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(); err != nil {
		return 0, err
	}
	chunk, depth := c.chunking()
	data := c.data()
	done := 0
	for done < len(p) {
		// Each batch: a batch cut short leaves its requests with the
		// daemon, and the next (of a later call) copies into the same
		// chunks.
		if err := c.claim(ctx); err != nil {
			return done, fmt.Errorf("zonefold: %s: %w", op, err)
		}
		c.reqs = c.reqs[:0]
		for i := 0; i < depth && done+i*chunk < len(p); i++ {
			n := min(chunk, len(p)-done-i*chunk)
			if op == OpWrite {
				copy(data[i*chunk:], p[done+i*chunk:done+i*chunk+n])
			}
			c.reqs = append(c.reqs, Request{Op: op, Handle: h, Off: uint64(off) + uint64(done+i*chunk),
				Addr: uint64(i * chunk), Len: uint32(n)})
		}
		if err := c.roundTrip(ctx); err != nil {
			// The batch's requests may still run (a write land),
			// or not: done counts what the daemon acknowledged.
			return done, fmt.Errorf("zonefold: %s: %w", op, err)
		}
		// Chunks complete in order of offset as far as the caller can
		// tell: the first failure or short read ends the count.
		for i, q := range c.reqs {
			r := c.reps[i]
			if err := r.Status.Err(); err != nil {
				return done, fmt.Errorf("zonefold: %s: %w", op, err)
			}
			if op == OpRead {
				copy(p[done:], data[q.Addr:q.Addr+r.Val])
			}
			done += int(r.Val)
			if r.Val < uint64(q.Len) {
				if op == OpRead {
					return done, io.EOF
				}
				return done, fmt.Errorf("zonefold: short write of %d of %d bytes", r.Val, q.Len)
			}
		}
	}
	return done, nil
}

// refusedWhy says which of the daemon's caps or limits a refused hello met: the
// bare errno ("cannot allocate memory", "too many users") read as the
// machine's state, not the daemon's setting.
func refusedWhy(st Status) string {
	switch st {
	case StatusNoMemory:
		return " (the daemon's --max-shared-memory has no room for this client's region: retry once other clients have gone, or restart the daemon with a larger --max-shared-memory)"
	case StatusTooMany:
		return " (the daemon is out of file descriptors: retry once other clients have gone, or raise its limit on open files: ulimit -n, systemd's LimitNOFILE=)"
	case StatusTooManyClients:
		return " (the daemon serves --max-clients clients already: retry once some have gone, or restart it with a larger --max-clients)"
	}
	return ""
}
