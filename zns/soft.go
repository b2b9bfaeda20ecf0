package zns

import (
	"fmt"
	"hash/crc32"
	"log/slog"
	"sync"
	"syscall"
	"unsafe"

	"github.com/zonefold/zonefold/uring"
)

// soft is the data path of the devices whose zone rules live in software
// (emu and null): the zone table decides, under its mutex, where each write
// goes and moves the write pointer at submission; the ring carries the data
// (or a NOP when there is no storage). Many writes per zone may be in flight.
type soft struct {
	*zoneTable
	ring    *uring.Ring
	file    uring.File
	storage bool  // false: null, every operation is a NOP
	dataOff int64 // where zone 0 starts in the file
	reqs    *freeList[softReq]
	reads   *freeList[readReq]
	// writes counts writes in flight, by epoch: a write is counted in
	// writes[epoch] as it is submitted (Add under mu). An emu Flush
	// copies the zone table and moves epoch on under mu, then waits for
	// the writes of the epoch it ended without mu: those its copy
	// claims, while later writes go on (see Emu). drain waits for both.
	// Flushes are serialised (Emu.flushMu), so an epoch's count is zero
	// again before writes are counted in it once more.
	writes [2]sync.WaitGroup
	epoch  uint8
	// gen counts the writes accepted (under mu): a Flush that finds it
	// where the last one left it has no data to sync.
	gen uint64
	// sums: keep each sequential zone's data checksum (see zoneState).
	sums   bool
	closed bool
	faults faults
	last   lastWrite
	// direct, if hasDirect, is the file opened again with O_DIRECT: a
	// write whose buffers and offset are all page-aligned goes through
	// it (see Emu).
	direct    uring.File
	hasDirect bool
	// serial (null's zone_serial): a sequential zone has one write in
	// flight at a time; see serialZones.
	serial *serialZones
	// delay (null's completion_nsec), if set, is how long each data
	// operation takes: it goes to the ring as a kernel timer of that
	// length instead of a NOP (see Null). Set at open, never changed.
	delay *syscall.Timespec
	// failed are the writes whose data the file did not take, or took
	// only part of (the host refused or failed them: its file system
	// full, an I/O error): the zone table moved the write pointer and
	// the zone's running checksum (zoneState.sum) over them at
	// submission, so that checksum no longer describes the file. An emu
	// Flush sums such zones from the file instead (Emu.sumFailed).
	// failedMu is a leaf: a completion takes it, under no other lock.
	failedMu sync.Mutex
	failed   []failedWrite
	// zero, if set (emu), makes device range [off, off+n) of the file
	// read as zeros: a failed write's completion calls it on the
	// write's range before it reports the failure (see Emu).
	zero func(off, n int64) error
}

// failedWrite is a write the file did not take: zone, device offset and
// length, and gen, the soft.gen it was accepted at (a Flush whose copy
// was taken at gen g or later covers it).
type failedWrite struct {
	zone   int
	off, n int64
	gen    uint64
	// dirty: its range could not be made to read as zeros when it
	// failed (soft.zero failed too): the file may still hold older
	// bytes there, or part of the write. Emu.zeroFailed tries again.
	dirty bool
}

// nop submits an operation that stands for a data transfer on a device
// without storage: a NOP, or a timer of the device's completion delay.
func (s *soft) nop(c uring.Completion) error {
	if s.delay != nil {
		return s.ring.Timeout(s.delay, c)
	}
	return s.ring.Nop(c)
}

// serialZones holds each sequential zone's writes behind its write in
// flight, as a zoned block device does: the kernel lets one write per
// zone reach the device, and zonefold's backend for zoned block devices
// (Block) submits a zone's next write only once the one before has
// completed, one at a time. The write pointer still moves at submission
// here; only the ring operation waits. A completion hands the zone's next
// write to the dispatcher, which submits it: a completion must not
// submit (the reaper runs it).
type serialZones struct {
	mu   sync.Mutex
	busy []bool     // a write to the zone is in flight
	head []*softReq // queued behind it, linked through next
	tail []*softReq
	// ready carries writes to the dispatcher: one per zone at most (the
	// zone stays busy until it completes), so a send never blocks.
	ready chan *softReq
	done  chan struct{}
}

func newSerialZones(zones int) *serialZones {
	return &serialZones{busy: make([]bool, zones), head: make([]*softReq, zones), tail: make([]*softReq, zones),
		ready: make(chan *softReq, zones), done: make(chan struct{})}
}

// queue reports whether r waits behind its zone's write in flight; if
// not, the zone is busy with r from now on.
func (q *serialZones) queue(r *softReq) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.busy[r.zone] {
		q.busy[r.zone] = true
		return false
	}
	if q.tail[r.zone] == nil {
		q.head[r.zone] = r
	} else {
		q.tail[r.zone].next = r
	}
	q.tail[r.zone] = r
	return true
}

// completed ends a zone's write in flight: the next write queued behind
// it goes to the dispatcher.
func (q *serialZones) completed(zone int) {
	q.mu.Lock()
	r := q.head[zone]
	if r == nil {
		q.busy[zone] = false
	} else {
		q.head[zone], r.next = r.next, nil
		if q.head[zone] == nil {
			q.tail[zone] = nil
		}
	}
	q.mu.Unlock()
	if r != nil {
		q.ready <- r
	}
}

// dispatch submits the writes completions hand over, until ready closes.
func (s *soft) dispatch() {
	q := s.serial
	defer close(q.done)
	for r := range q.ready {
		if err := s.nop(r); err != nil {
			r.Complete(uring.Result{Res: -int32(syscall.EIO)})
			continue
		}
		if len(q.ready) == 0 {
			if err := s.ring.Flush(); err != nil {
				slog.Error("zns: submit queued zone writes", "err", err)
			}
		}
	}
}

// faults are the armed fault injections (emu); countdowns, 0 = disarmed.
type faults struct {
	writeIn int
	readIn  int
	// readBad: the readIn-th read's range goes bad (FailReadBad); bad
	// holds the ranges gone bad, [from, to) device offsets.
	readBad  bool
	bad      [][2]int64
	flushIn  int
	writeAll bool // every write fails (FailWrites)
	finishIn int
}

// touchesBad reports whether a read of [off, off+n) touches a range
// FailReadBad made bad.
func (f *faults) touchesBad(off, n int64) bool {
	for _, r := range f.bad {
		if off < r[1] && r[0] < off+n {
			return true
		}
	}
	return false
}

// hit counts one operation down and reports whether it is the one to fail.
func hit(countdown *int) bool {
	if *countdown == 0 {
		return false
	}
	*countdown--
	return *countdown == 0
}

// lastWrite is the most recent write to a sequential zone (for tearing).
type lastWrite struct {
	valid  bool
	zone   int
	off, n int64
}

// softReq adapts a write's ring completion to the caller's completion and
// reports the byte count the caller asked for. They come from a free list.
type softReq struct {
	s        *soft
	app      AppendCompletion
	c        uring.Completion
	zone     int
	off      int64 // where the data went (appends)
	n        int32 // bytes the caller asked for
	want     int32 // bytes the ring operation transfers (0 for a NOP)
	injected syscall.Errno
	gen      uint64 // soft.gen when the write was accepted
	// next links the writes queued behind a zone's write in flight
	// (serialZones).
	next *softReq
	// serial: the write holds its zone (serialZones) until it completes.
	serial bool
	epoch  uint8 // the writes count it is in (soft.writes)
}

// newReq takes a request for a write and counts it in flight. Caller
// holds mu.
func (s *soft) newReq(zone int, off, n, want int64) *softReq {
	r := s.reqs.get()
	*r = softReq{s: s, zone: zone, off: off, n: int32(n), want: int32(want), epoch: s.epoch}
	s.writes[s.epoch].Add(1)
	return r
}

// Complete implements uring.Completion. A write that held its zone
// (serialZones) then lets the zone's next write go.
func (r *softReq) Complete(res uring.Result) {
	q, zone, serial := r.s.serial, r.zone, r.serial
	r.complete(res)
	if serial {
		q.completed(zone)
	}
}

// complete ends one write.
func (r *softReq) complete(res uring.Result) {
	s, app, c, zone, off, n, want, inj, epoch, gen := r.s, r.app, r.c, r.zone, r.off, r.n, r.want, r.injected, r.epoch, r.gen
	*r = softReq{}
	s.reqs.put(r)
	switch {
	case inj != 0:
		res.Res = -int32(inj)
	case res.Res >= 0 && res.Res != want:
		res.Res = -int32(syscall.EIO) // a short transfer on a file sized for every zone
	case res.Res >= 0:
		res.Res = n
	}
	if res.Res < 0 && want > 0 {
		// In a sequential zone its range reads as zeros from now on,
		// not as what the file held there (a reset zone's old data,
		// part of this write): the write pointer stands past it (see
		// Emu); a conventional zone's keeps what it held, as a
		// random-write drive's. A zone's type never changes. Noted before
		// the write counts as done, so that a Flush that waited for
		// it finds it.
		dirty := false
		if s.zero != nil && s.zones[zone].typ != TypeConventional {
			if err := s.zero(off, int64(n)); err != nil {
				slog.Error("zns: a failed write's range could not be zeroed; the next flush tries again", "zone", zone, "off", off, "len", n, "err", err)
				dirty = true
			}
		}
		s.failedMu.Lock()
		s.failed = append(s.failed, failedWrite{zone: zone, off: off, n: int64(n), gen: gen, dirty: dirty})
		s.failedMu.Unlock()
	}
	s.writes[epoch].Done()
	if app == nil {
		if c != nil {
			c.Complete(res)
		}
		return
	}
	if res.Res < 0 {
		app.Appended(off, fmt.Errorf("zns: append to zone %d: %w", zone, res.Err("append")))
		return
	}
	app.Appended(off, nil)
}

// directAlign is the alignment an O_DIRECT write's offset, lengths and
// buffer addresses need here: a page, which every block size a disk
// reports divides.
const directAlign = 4096

// directAligned reports whether a write of bufs at off may go through
// O_DIRECT.
func directAligned(bufs [][]byte, off int64) bool {
	if off%directAlign != 0 {
		return false
	}
	for _, b := range bufs {
		if !directBuf(b) {
			return false
		}
	}
	return true
}

// directBuf reports whether b's length and address suit O_DIRECT.
func directBuf(b []byte) bool {
	return len(b)%directAlign == 0 && (len(b) == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%directAlign == 0)
}

func totalLen(bufs [][]byte) int64 {
	var n int64
	for _, b := range bufs {
		n += int64(len(b))
	}
	return n
}

// Append implements Device: the offset is the write pointer at submission.
func (s *soft) Append(zone int, bufs [][]byte, c AppendCompletion) error {
	return s.write(zone, -1, bufs, nil, c, nil)
}

// AppendSums implements SumAppender: Append, with the data's checksum
// chained from the caller's block sums where the emu keeps one.
func (s *soft) AppendSums(zone int, bufs [][]byte, sums []uint32, c AppendCompletion) error {
	return s.write(zone, -1, bufs, sums, c, nil)
}

// Write implements Device.
func (s *soft) Write(zone int, off int64, bufs [][]byte, c uring.Completion) error {
	if off < 0 {
		return fmt.Errorf("zns: write at %d: %w", off, ErrOutOfRange)
	}
	return s.write(zone, off, bufs, nil, nil, c)
}

// write submits a Write (off >= 0) or an Append (off < 0). sums, if it
// covers the data (see SumAppender), are its blocks' CRC-32Cs.
func (s *soft) write(zone int, off int64, bufs [][]byte, sums []uint32, app AppendCompletion, c uring.Completion) error {
	n := totalLen(bufs)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("zns: write zone %d: %w", zone, uring.ErrClosed)
	}
	z, err := s.checkWrite(zone, off, n)
	if err != nil {
		return err
	}
	if s.faults.writeAll || hit(&s.faults.writeIn) {
		// The injected failure happens before the device accepts the
		// write: nothing is written and the write pointer stays.
		r := s.newReq(zone, off, n, 0)
		r.app, r.c, r.injected = app, c, syscall.EIO
		return s.submitNop(r)
	}
	at := s.advance(zone, z, off, n)
	s.gen++
	if s.sums && z.typ != TypeConventional {
		// Under mu, so that the checksum runs in write-pointer order.
		// With the caller's block sums it only chains them (a table
		// lookup per 4 KiB block); the bytes themselves were the
		// daemon's largest CPU cost after the copies (see SumAppender).
		if int64(len(sums))*SumBlock == n {
			for _, b := range sums {
				z.sum = crcShift(z.sum, b)
			}
		} else {
			for _, b := range bufs {
				z.sum = crc32.Update(z.sum, crc32c, b)
			}
		}
	}
	if z.typ != TypeConventional {
		s.last = lastWrite{valid: true, zone: zone, off: at, n: n}
	}
	want := n
	if !s.storage {
		want = 0
	}
	r := s.newReq(zone, at, n, want)
	r.app, r.c, r.gen = app, c, s.gen
	if !s.storage {
		if s.serial != nil && z.typ != TypeConventional {
			r.serial = true
			if s.serial.queue(r) {
				return nil // submitted when the zone's write in flight completes
			}
		}
		return s.submitNop(r)
	}
	fd := s.file
	if s.hasDirect && directAligned(bufs, s.dataOff+at) {
		fd = s.direct
	}
	if err := s.ring.Writev(fd, bufs, uint64(s.dataOff+at), r); err != nil {
		s.abandon(r)
		return fmt.Errorf("zns: write zone %d at %d: %w", zone, at, err)
	}
	return nil
}

func (s *soft) submitNop(r *softReq) error {
	if err := s.nop(r); err != nil {
		s.abandon(r)
		return fmt.Errorf("zns: submit: %w", err)
	}
	return nil
}

// abandon returns a request whose submission failed.
func (s *soft) abandon(r *softReq) {
	s.writes[r.epoch].Done()
	*r = softReq{}
	s.reqs.put(r)
}

// Read implements Device. The part of buf at or past the write pointer is
// zeroed here and not read from storage.
func (s *soft) Read(off int64, buf []byte, c uring.Completion) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fmt.Errorf("zns: read at %d: %w", off, uring.ErrClosed)
	}
	valid, err := s.readable(off, int64(len(buf)))
	first := err == nil && hit(&s.faults.readIn)
	inject := first || err == nil && s.faults.touchesBad(off, int64(len(buf)))
	if first && s.faults.readBad {
		s.faults.bad = append(s.faults.bad, [2]int64{off, off + int64(len(buf))})
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if !s.storage {
		valid = 0
	}
	var injected syscall.Errno
	if inject {
		injected = syscall.EIO
	}
	// A page-aligned read goes through O_DIRECT too: through the page
	// cache, each miss cost the submitting io_uring_enter a page cache
	// insertion and readahead bookkeeping, under the ring's lock, and
	// the host cached the bytes a second time beside zonefold's cache.
	// The kernel writes back cached pages of the range (a buffered
	// append's) before a direct read of it, so the two stay coherent.
	fd := s.file
	if s.hasDirect && (s.dataOff+off)%directAlign == 0 && directBuf(buf[:valid]) {
		fd = s.direct
	}
	if err := submitRead(s.ring, s.reads, fd, buf, s.dataOff+off, valid, injected, s.delay, c, nil); err != nil {
		return fmt.Errorf("zns: read at %d: %w", off, err)
	}
	return nil
}

// Ring implements Device.
func (s *soft) Ring() *uring.Ring { return s.ring }

// drain submits anything plugged and waits for every write in flight.
// Caller holds mu, which keeps new writes out.
func (s *soft) drain() error {
	if err := s.ring.Flush(); err != nil {
		return fmt.Errorf("zns: drain writes: %w", err)
	}
	s.waitWrites()
	return nil
}

// waitWrites waits for every write in flight, of both epochs. Caller
// holds mu, or nothing can write any more.
func (s *soft) waitWrites() {
	s.writes[0].Wait()
	s.writes[1].Wait()
}

// endEpoch submits anything plugged and starts a new epoch of writes; it
// returns a function that waits for the writes of the epoch it ended,
// to call without mu. Caller holds mu and the emu's flushMu (one epoch
// is waited for at a time).
func (s *soft) endEpoch() (func(), error) {
	if err := s.ring.Flush(); err != nil {
		return nil, fmt.Errorf("zns: drain writes: %w", err)
	}
	ended := &s.writes[s.epoch]
	s.epoch ^= 1
	return ended.Wait, nil
}

// closeRing marks the device closed and closes its ring, which waits for
// every operation in flight.
func (s *soft) closeRing() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	return s.ring.Close()
}
