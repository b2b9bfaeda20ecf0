package zns

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/uring"
)

// Block is a Linux zoned block device (null_blk zoned, a ZNS namespace's
// /dev/nvmeXnY) written with O_DIRECT through the ring.
//
// Kernel 6.1 has no zone write plugging: two writes to one zone in flight
// may reach the device out of order and fail. So Block keeps at most one
// write in flight per zone and many zones in flight at once: a zone's
// Writes and Appends queue behind its write in flight, and a dispatcher
// goroutine submits the next one when it completes (a completion runs on
// the ring's reaper, which must never block on a submission). The write
// pointer is tracked in software and re-read from the device after a
// failed write. The device decides the open/active limits: its refusals
// arrive in the completion (ETOOMANYREFS, EOVERFLOW, typed by
// CompletionErr). A failed write fails every append queued behind it,
// and the zone refuses appends until it is reset or finished (or found
// empty): the device may hold part of the failed write, and an append
// would land after it. Writes name their offset, which is checked against
// the write pointer as always. A read that fails with EIO is read again
// alone before the failure is reported (retryRead): the block layer fails
// every read it merged with one that touches bad media.
type Block struct {
	mgmt
	path  string
	fd    int
	file  uring.File
	zones []blkZone
	reqs  *freeList[blkReq]
	reads *freeList[readReq]

	// ready lists zones that have queued writes and none in flight, for
	// the dispatcher; kick wakes it.
	readyMu sync.Mutex
	ready   []int
	kick    chan struct{}
	stop    chan struct{}
	stopped chan struct{}

	// closeMu is held (read) while a write is accepted; Close takes it to
	// refuse new writes, then waits for pending: writes queued or in flight.
	closeMu sync.RWMutex
	closed  bool
	pending sync.WaitGroup
}

// blkZone is one zone's software state.
type blkZone struct {
	mu    sync.Mutex
	start int64
	cap   int64
	typ   Type
	cond  Cond
	wp    int64 // as of the last completed write or report
	// reserved is wp plus the bytes queued or in flight: where the next
	// Write must start, and what capacity checks count.
	reserved   int64
	busy       bool // a write is in flight
	head, tail *blkReq
	resync     bool // a write failed: re-read wp before the next one
	// failed: a write failed; appends are refused until reset or finish.
	failed  bool
	inReady bool
}

// blkReq is one queued or in-flight write.
type blkReq struct {
	b      *Block
	zone   int
	off    int64 // the Write's offset; for an Append, set at dispatch
	n      int64
	append bool
	bufs   [][]byte
	app    AppendCompletion
	c      uring.Completion
	next   *blkReq
}

func newBlock(fd int, path string, opts Options) (*Block, error) {
	q, err := blockQueueDir(fd, path)
	if err != nil {
		return nil, err
	}
	g, err := queueGeometry(q, path)
	if err != nil {
		return nil, err
	}
	b := &Block{path: path, fd: fd, file: uring.FD(fd)}
	b.mgmt = mgmt{geo: g, report: b.reportInto, manage: b.manage}
	zs := make([]Zone, g.Zones)
	if err := b.reportInto(0, zs); err != nil {
		return nil, err
	}
	b.zones = make([]blkZone, g.Zones)
	for i, z := range zs {
		if z.Type != TypeConventional && b.geo.ZoneCap == 0 {
			b.geo.ZoneCap = z.Cap
		}
		b.zones[i].start, b.zones[i].typ = z.Start, z.Type
		b.zones[i].set(z)
	}
	if b.geo.ZoneCap == 0 {
		b.geo.ZoneCap = g.ZoneSize
	}
	b.geo.MaxAppend = int(min(int64(b.geo.MaxAppend), b.geo.ZoneCap))
	if b.ring, err = uring.New(ringOptions(opts, b.geo)); err != nil {
		return nil, fmt.Errorf("zns: %s: %w", path, err)
	}
	b.reqs = newFreeList[blkReq](ringSlots(opts))
	b.reads = newFreeList[readReq](ringSlots(opts))
	b.ready = make([]int, 0, g.Zones)
	b.kick = make(chan struct{}, 1)
	b.stop = make(chan struct{})
	b.stopped = make(chan struct{})
	go b.dispatcher()
	slog.Debug("zns: opened zoned block device", "path", path, "geometry", b.geo)
	return b, nil
}

// set takes a reported zone as the truth. Caller holds mu (or owns z).
func (z *blkZone) set(r Zone) {
	z.cap, z.cond, z.wp = r.Cap, r.Cond, r.WP
	z.reserved = z.wp
	for q := z.head; q != nil; q = q.next {
		z.reserved += q.n
	}
	z.resync = false
}

// reportInto reports len(out) zones from zone first.
func (b *Block) reportInto(first int, out []Zone) error {
	sectors := uint64(b.geo.ZoneSize >> 9)
	for done := 0; done < len(out); {
		chunk := out[done:min(len(out), done+256)]
		n, err := blkReportZones(b.fd, uint64(first+done)*sectors, chunk)
		if err != nil {
			return fmt.Errorf("zns: %s: %w", b.path, err)
		}
		if n == 0 {
			return fmt.Errorf("zns: %s: report from zone %d returned nothing", b.path, first+done)
		}
		done += n
	}
	return nil
}

func (b *Block) zone(zone int) (*blkZone, error) { return zoneAt(b.zones, zone) }

// resyncLocked re-reads one zone from the device. Caller holds z.mu.
func (b *Block) resyncLocked(zone int, z *blkZone) error {
	var r [1]Zone
	if err := b.reportInto(zone, r[:]); err != nil {
		return err
	}
	z.set(r[0])
	return nil
}

// manage runs one zone management ioctl after checking the request against
// the zone's condition on the device.
func (b *Block) manage(a zoneAction, zone int) error {
	z, err := b.zone(zone)
	if err != nil {
		return err
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.busy || z.head != nil {
		return fmt.Errorf("zns: %s zone %d: writes in flight: %w", a.name, zone, syscall.EBUSY)
	}
	if err := b.resyncLocked(zone, z); err != nil {
		return err
	}
	skip, err := checkAction(a, zone, Zone{Type: z.typ, Cond: z.cond})
	if err != nil || skip {
		if err == nil && (a == actReset || a == actFinish) {
			z.failed = false // already empty, or full
		}
		return err
	}
	err = blkZoneMgmt(b.fd, a, uint64(z.start>>9), uint64(b.geo.ZoneSize>>9))
	if rerr := b.resyncLocked(zone, z); err == nil {
		err = rerr
	}
	if err != nil {
		return zoneMgmtErr(a, zone, err)
	}
	if a == actReset || a == actFinish {
		z.failed = false // empty, or full: nothing can land after a torn write
	}
	return nil
}

// checkBufs checks what O_DIRECT needs of the buffers: block-aligned
// addresses and lengths.
func (b *Block) checkBufs(bufs [][]byte, what string) (int64, error) {
	var n int64
	bs := uintptr(b.geo.BlockSize)
	for _, p := range bufs {
		if len(p) == 0 {
			continue
		}
		if uintptr(unsafe.Pointer(&p[0]))%bs != 0 || uintptr(len(p))%bs != 0 {
			return 0, fmt.Errorf("zns: %s: a buffer of %d bytes is not aligned to the %d-byte block (O_DIRECT): %w", what, len(p), bs, ErrMisaligned)
		}
		n += int64(len(p))
	}
	if n == 0 {
		return 0, fmt.Errorf("zns: %s of 0 bytes: %w", what, ErrMisaligned)
	}
	if n > int64(b.geo.MaxAppend) {
		return 0, fmt.Errorf("zns: %s of %d bytes (max %d): %w", what, n, b.geo.MaxAppend, ErrTooLarge)
	}
	return n, nil
}

// checkRoom checks that n more bytes fit after the reserved offset.
// Caller holds z.mu.
func checkRoom(zone int, z *blkZone, n int64, op string) error {
	switch {
	case z.cond == CondReadOnly || z.cond == CondOffline:
		return fmt.Errorf("zns: %s to zone %d (%s): %w", op, zone, z.cond, ErrReadOnly)
	case z.cond == CondFull || z.reserved >= z.start+z.cap:
		return fmt.Errorf("zns: %s to zone %d: %w", op, zone, ErrZoneFull)
	case z.reserved+n > z.start+z.cap:
		return fmt.Errorf("zns: %s of %d bytes at %d to zone %d, capacity ends at %d: %w", op, n, z.reserved, zone, z.start+z.cap, ErrBeyondCapacity)
	}
	return nil
}

// Append implements Device: the write goes to the zone's write pointer when
// the zone's previous write has completed.
func (b *Block) Append(zone int, bufs [][]byte, c AppendCompletion) error {
	return b.write(zone, -1, bufs, c, nil)
}

// Write implements Device. A Write queues behind the zone's write in
// flight like an Append, so back-to-back Writes at consecutive offsets are
// safe too.
func (b *Block) Write(zone int, off int64, bufs [][]byte, c uring.Completion) error {
	if off < 0 {
		return fmt.Errorf("zns: write at %d: %w", off, ErrOutOfRange)
	}
	return b.write(zone, off, bufs, nil, c)
}

func (b *Block) write(zone int, off int64, bufs [][]byte, app AppendCompletion, c uring.Completion) error {
	op := "write"
	if off < 0 {
		op = "append"
	}
	z, err := b.zone(zone)
	if err != nil {
		return err
	}
	n, err := b.checkBufs(bufs, op)
	if err != nil {
		return err
	}
	if z.typ == TypeConventional {
		if off < 0 {
			return fmt.Errorf("zns: append to zone %d: %w", zone, ErrConventional)
		}
		if off < z.start || off+n > z.start+b.geo.ZoneSize || off%int64(b.geo.BlockSize) != 0 {
			return fmt.Errorf("zns: write [%d,+%d) in conventional zone %d: %w", off, n, zone, ErrOutOfRange)
		}
		if err := b.ring.Writev(b.file, bufs, uint64(off), c); err != nil {
			return fmt.Errorf("zns: write zone %d: %w", zone, err)
		}
		return nil
	}
	b.closeMu.RLock()
	defer b.closeMu.RUnlock()
	if b.closed {
		return fmt.Errorf("zns: %s zone %d: %w", op, zone, uring.ErrClosed)
	}
	z.mu.Lock()
	if off < 0 && z.failed && !z.busy && z.head == nil {
		// Reset behind our back, or by ResetAll, which skips zones it
		// reports empty: an empty zone holds no torn write.
		if err := b.resyncLocked(zone, z); err == nil && z.cond == CondEmpty {
			z.failed = false
		}
	}
	if off < 0 && z.failed {
		z.mu.Unlock()
		return fmt.Errorf("zns: %s zone %d: %w", op, zone, ErrZoneFailed)
	}
	if z.resync && !z.busy {
		if err := b.resyncLocked(zone, z); err != nil {
			z.mu.Unlock()
			return err
		}
	}
	if off >= 0 && off != z.reserved {
		z.mu.Unlock()
		return fmt.Errorf("zns: write at %d to zone %d, write pointer %d: %w", off, zone, z.reserved, ErrNotAtWP)
	}
	if err := checkRoom(zone, z, n, op); err != nil {
		z.mu.Unlock()
		return err
	}
	r := b.reqs.get()
	*r = blkReq{b: b, zone: zone, off: off, n: n, append: off < 0, bufs: bufs, app: app, c: c}
	z.reserved += n
	b.pending.Add(1)
	if z.busy || z.head != nil {
		z.push(r)
		z.mu.Unlock()
		return nil
	}
	z.busy = true
	if r.append {
		r.off = z.wp
	}
	z.mu.Unlock()
	if err := b.ring.Writev(b.file, bufs, uint64(r.off), r); err != nil {
		b.unsubmit(r)
		return fmt.Errorf("zns: %s zone %d: %w", op, zone, err)
	}
	return nil
}

// unsubmit takes back a write whose submission failed, which the caller
// learns of from the returned error rather than a completion.
func (b *Block) unsubmit(r *blkReq) {
	z := &b.zones[r.zone]
	z.mu.Lock()
	z.busy = false
	z.reserved -= r.n
	z.resync = true
	if z.head != nil {
		b.markReady(r.zone, z)
	}
	z.mu.Unlock()
	*r = blkReq{}
	b.reqs.put(r)
	b.pending.Done()
}

func (z *blkZone) push(r *blkReq) {
	if z.tail == nil {
		z.head = r
	} else {
		z.tail.next = r
	}
	z.tail = r
}

func (z *blkZone) pop() *blkReq {
	r := z.head
	z.head = r.next
	if z.head == nil {
		z.tail = nil
	}
	r.next = nil
	return r
}

// Complete implements uring.Completion for a zone write. It runs on the
// reaper: it updates the zone, hands queued work to the dispatcher, and
// never submits. A failed write fails the zone: the appends queued behind
// it fail here, in order, after it.
func (r *blkReq) Complete(res uring.Result) {
	b, zone, off, n, app, c := r.b, r.zone, r.off, r.n, r.app, r.c
	if res.Res >= 0 && int64(res.Res) != n {
		res.Res = -int32(syscall.EIO)
	}
	z := &b.zones[zone]
	z.mu.Lock()
	z.busy = false
	var behind *blkReq
	if res.Res >= 0 {
		z.wp = off + n
		switch {
		case z.wp >= z.start+z.cap:
			z.cond = CondFull
		case z.cond != CondExpOpen:
			z.cond = CondImpOpen
		}
		if z.head != nil {
			b.markReady(zone, z)
		}
	} else {
		// The device may have written part of it: re-read the write
		// pointer before the next write, and let no append land after
		// it. Queued writes stay: they name their offsets.
		z.reserved -= n
		z.resync = true
		z.failed = true
		behind = z.takeAppends()
		if z.head != nil {
			b.markReady(zone, z)
		}
	}
	z.mu.Unlock()
	*r = blkReq{}
	b.reqs.put(r)
	deliver(app, c, off, n, res)
	b.pending.Done()
	if behind != nil {
		b.failBehind(zone, behind)
	}
}

// takeAppends unlinks the queued appends, in order, and takes their bytes
// off the reservation. Caller holds z.mu.
func (z *blkZone) takeAppends() *blkReq {
	var head, tail *blkReq
	var keep, keepTail *blkReq
	for q := z.head; q != nil; {
		next := q.next
		q.next = nil
		if q.append {
			z.reserved -= q.n
			if tail == nil {
				head = q
			} else {
				tail.next = q
			}
			tail = q
		} else {
			if keepTail == nil {
				keep = q
			} else {
				keepTail.next = q
			}
			keepTail = q
		}
		q = next
	}
	z.head, z.tail = keep, keepTail
	return head
}

// failBehind fails the appends that were queued behind a failed write.
func (b *Block) failBehind(zone int, q *blkReq) {
	err := fmt.Errorf("zns: append to zone %d queued behind a failed write: %w", zone, ErrZoneFailed)
	for q != nil {
		next := q.next
		app, c, off := q.app, q.c, q.off
		*q = blkReq{}
		b.reqs.put(q)
		failQueued(app, c, off, err)
		b.pending.Done()
		q = next
	}
}

// deliver hands a write's result to the caller's completion.
func deliver(app AppendCompletion, c uring.Completion, off, n int64, res uring.Result) {
	if app == nil {
		if res.Res >= 0 {
			res.Res = int32(n)
		}
		if c != nil {
			c.Complete(res)
		}
		return
	}
	if res.Res < 0 {
		app.Appended(off, fmt.Errorf("zns: append: %w", CompletionErr("write", res)))
		return
	}
	app.Appended(off, nil)
}

// markReady queues a zone for the dispatcher. Caller holds z.mu.
func (b *Block) markReady(zone int, z *blkZone) {
	if z.inReady {
		return
	}
	z.inReady = true
	b.readyMu.Lock()
	b.ready = append(b.ready, zone)
	b.readyMu.Unlock()
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// dispatcher submits each ready zone's next queued write.
func (b *Block) dispatcher() {
	defer close(b.stopped)
	var batch []int
	for {
		select {
		case <-b.kick:
		case <-b.stop:
			return
		}
		b.readyMu.Lock()
		batch, b.ready = b.ready, batch[:0]
		b.readyMu.Unlock()
		b.ring.Plug()
		for _, zone := range batch {
			b.dispatch(zone)
		}
		if err := b.ring.Unplug(); err != nil {
			slog.Error("zns: submit queued zone writes", "device", b.path, "err", err)
		}
		// The plug is the ring's: another goroutine may hold it (a
		// flush round), blocked until these very writes complete.
		// Nobody waits here to flush them, so submit them now.
		if err := b.ring.Flush(); err != nil {
			slog.Error("zns: submit queued zone writes", "device", b.path, "err", err)
		}
	}
}

func (b *Block) dispatch(zone int) {
	z := &b.zones[zone]
	z.mu.Lock()
	z.inReady = false
	if z.busy || z.head == nil {
		z.mu.Unlock()
		return
	}
	r := z.pop()
	var err error
	switch {
	case r.append && z.failed:
		err = fmt.Errorf("zns: append to zone %d: %w", zone, ErrZoneFailed)
	case z.resync:
		err = b.resyncLocked(zone, z)
	}
	if err == nil {
		if r.append {
			r.off = z.wp
		}
		end := z.start + z.cap
		switch {
		case r.off != z.wp:
			err = fmt.Errorf("zns: write at %d to zone %d, write pointer %d: %w", r.off, zone, z.wp, ErrNotAtWP)
		case z.cond == CondReadOnly || z.cond == CondOffline:
			err = fmt.Errorf("zns: write to zone %d (%s): %w", zone, z.cond, ErrReadOnly)
		case z.cond == CondFull || z.wp >= end:
			err = fmt.Errorf("zns: write to zone %d: %w", zone, ErrZoneFull)
		case z.wp+r.n > end:
			err = fmt.Errorf("zns: write of %d bytes at %d to zone %d, capacity ends at %d: %w", r.n, z.wp, zone, end, ErrBeyondCapacity)
		}
	}
	if err != nil {
		z.reserved -= r.n
		if z.head != nil {
			b.markReady(zone, z)
		}
		z.mu.Unlock()
		app, c, off := r.app, r.c, r.off
		*r = blkReq{}
		b.reqs.put(r)
		failQueued(app, c, off, err)
		b.pending.Done()
		return
	}
	z.busy = true
	z.mu.Unlock()
	if serr := b.ring.Writev(b.file, r.bufs, uint64(r.off), r); serr != nil {
		slog.Error("zns: submit queued zone write", "device", b.path, "zone", zone, "err", serr)
		r.Complete(uring.Result{Res: -int32(syscall.EIO)})
	}
}

// failQueued reports a queued write refused at dispatch.
func failQueued(app AppendCompletion, c uring.Completion, off int64, err error) {
	if app != nil {
		app.Appended(off, err)
		return
	}
	errno := syscall.EIO
	var e syscall.Errno
	if errors.As(err, &e) {
		errno = e
	}
	if c != nil {
		c.Complete(uring.Result{Res: -int32(errno)})
	}
}

// Read implements Device.
func (b *Block) Read(off int64, buf []byte, c uring.Completion) error {
	if err := checkRead(b.geo, off, int64(len(buf))); err != nil {
		return err
	}
	if _, err := b.checkBufs([][]byte{buf}, "read"); err != nil && !errors.Is(err, ErrTooLarge) {
		return err
	}
	// Not every device returns zeros past the write pointer (null_blk
	// keeps old data after a reset), so the tail is zeroed here.
	valid := int64(len(buf))
	if z := &b.zones[off/b.geo.ZoneSize]; z.typ != TypeConventional {
		z.mu.Lock()
		valid = min(max(z.wp-off, 0), valid)
		z.mu.Unlock()
	}
	if err := submitRead(b.ring, b.reads, b.file, buf, off, valid, 0, nil, c, b.retryRead); err != nil {
		return fmt.Errorf("zns: read at %d: %w", off, err)
	}
	return nil
}

// retryRead reads buf at off again, alone, after the ring's read of it
// failed with EIO, and completes c with the outcome (n bytes, the
// caller's length, the tail past buf zeroed already). The block layer
// merges adjacent reads submitted together (one io_uring_enter plugs
// them) into one request, and a media error anywhere in it fails every
// read merged in: on null_blk zoned with one bad block, a cold read
// beside it failed with EIO whenever readahead of the bad block went in
// with it (the page cache retries such reads page by page for the same
// reason). One synchronous pread of the range alone tells a read that
// touches bad media from one that was merged with it. It runs on a
// goroutine of its own: the ring's reaper, which delivered the failure,
// must not block. Close waits for it (closeMu).
func (b *Block) retryRead(buf []byte, off int64, c uring.Completion, n int32) {
	go func() {
		res := uring.Result{Res: n}
		b.closeMu.RLock()
		if b.closed {
			res.Res = -int32(syscall.EIO)
		} else {
			for done := 0; done < len(buf); {
				m, err := unix.Pread(b.fd, buf[done:], off+int64(done))
				if err == unix.EINTR {
					continue
				}
				if err != nil || m == 0 {
					res.Res = -int32(syscall.EIO)
					if errno, ok := err.(syscall.Errno); ok {
						res.Res = -int32(errno)
					}
					break
				}
				done += m
			}
		}
		b.closeMu.RUnlock()
		if c != nil {
			c.Complete(res)
		}
	}()
}

// checkRead checks a read's range and alignment against a geometry.
func checkRead(g Geometry, off, n int64) error {
	bs := int64(g.BlockSize)
	if n <= 0 || n%bs != 0 || off%bs != 0 {
		return fmt.Errorf("zns: read of %d bytes at %d (block size %d): %w", n, off, bs, ErrMisaligned)
	}
	if off < 0 || off >= int64(g.Zones)*g.ZoneSize {
		return fmt.Errorf("zns: read at %d: %w", off, ErrOutOfRange)
	}
	if zone := off / g.ZoneSize; off+n > (zone+1)*g.ZoneSize {
		return fmt.Errorf("zns: read [%d,+%d) crosses the end of zone %d: %w", off, n, zone, ErrOutOfRange)
	}
	return nil
}

// Flush implements Device.
func (b *Block) Flush() error {
	if err := b.ring.Sync(b.file, false); err != nil {
		return fmt.Errorf("zns: flush %s: %w", b.path, err)
	}
	return nil
}

// Close implements Device: it waits for every write in flight and queued.
func (b *Block) Close() error {
	b.closeMu.Lock()
	if b.closed {
		b.closeMu.Unlock()
		return nil
	}
	b.closed = true
	b.closeMu.Unlock()
	// Queued writes drain through the dispatcher before it stops.
	if err := b.ring.Flush(); err != nil {
		slog.Error("zns: close: submit", "device", b.path, "err", err)
	}
	b.pending.Wait()
	close(b.stop)
	<-b.stopped
	err := b.ring.Close()
	if cerr := unix.Close(b.fd); cerr != nil && err == nil {
		err = fmt.Errorf("zns: close %s: %w", b.path, cerr)
	}
	return err
}
