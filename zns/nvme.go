package zns

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/uring"
)

// NVMe passthrough through io_uring URING_CMD (linux/nvme_ioctl.h).
const (
	nvmeURingCmdIO    = 0xc0484e80 // NVME_URING_CMD_IO
	nvmeURingCmdIOVec = 0xc0484e81 // NVME_URING_CMD_IO_VEC: addr is an iovec array
	nvmeIoctlID       = 0x4e40     // NVME_IOCTL_ID: returns the namespace id

	nvmeOpFlush    = 0x00
	nvmeOpWrite    = 0x01
	nvmeOpRead     = 0x02
	nvmeOpZoneSend = 0x79
	nvmeOpZoneRecv = 0x7a
	nvmeOpAppend   = 0x7d

	nvmeZoneSendAll  = 1 << 8  // Zone Management Send: select all zones
	nvmeZoneRecvPart = 1 << 16 // Zone Management Receive: partial report
	nvmeZoneDescLen  = 64
	nvmeInlineIovecs = 8
)

// nvmeCmd is struct nvme_uring_cmd (72 bytes) in the 80-byte command area.
type nvmeCmd [uring.CmdSize]byte

func (c *nvmeCmd) set(opcode uint8, nsid uint32, addr uint64, dataLen uint32, cdw ...uint32) {
	clear(c[:])
	le := binary.LittleEndian
	c[0] = opcode
	le.PutUint32(c[4:], nsid)
	le.PutUint64(c[24:], addr)
	le.PutUint32(c[36:], dataLen)
	for i, v := range cdw { // cdw10 onwards
		le.PutUint32(c[40+4*i:], v)
	}
}

// nvmeStatusErr types an NVMe completion status (CQE res > 0).
func nvmeStatusErr(status int32) error {
	sct, sc := (status>>8)&7, status&0xff
	if sct == 1 {
		switch sc {
		case 0xb8:
			return fmt.Errorf("nvme zone boundary error: %w", ErrBeyondCapacity)
		case 0xb9:
			return fmt.Errorf("nvme zone is full: %w", ErrZoneFull)
		case 0xba, 0xbb:
			return fmt.Errorf("nvme zone is read-only or offline: %w", ErrReadOnly)
		case 0xbc:
			return fmt.Errorf("nvme zone invalid write: %w", ErrNotAtWP)
		case 0xbd:
			return fmt.Errorf("nvme too many active zones: %w", ErrTooManyActive)
		case 0xbe:
			return fmt.Errorf("nvme too many open zones: %w", ErrTooManyOpen)
		case 0xbf:
			return fmt.Errorf("nvme invalid zone state transition: %w", ErrBadTransition)
		}
	}
	return fmt.Errorf("nvme status %#x: %w", status, syscall.EIO)
}

// nvmeStatusErrno is the errno a Write or Read Result carries for an NVMe
// status: the kernel's mapping for the zone resources, EIO otherwise.
func nvmeStatusErrno(status int32) syscall.Errno {
	if (status>>8)&7 == 1 {
		switch status & 0xff {
		case 0xbd:
			return syscall.EOVERFLOW
		case 0xbe:
			return syscall.ETOOMANYREFS
		}
	}
	return syscall.EIO
}

// Passthrough is an NVMe ZNS namespace driven through its generic character
// device (/dev/ngXnY) with io_uring URING_CMD on a big ring (SQE128/CQE32).
// Append is the device's Zone Append: many may be in flight per zone and
// the device reports the LBA each one landed at. The write pointer is
// tracked in software (reserved at submission) so that writes that cannot
// fit are refused, typed, before the device sees them. Once a write to a
// zone fails, the zone refuses appends until reset or finished, and
// appends in flight with it that complete after it are reported failed:
// they may have landed past a torn record.
type Passthrough struct {
	mgmt
	path    string
	fd      int
	file    uring.File
	nsid    uint32
	lbaSh   uint // log2(block size)
	maxRead int
	zones   []nvmeZone
	reqs    *freeList[nvmeReq]

	closeMu sync.Mutex
	closed  bool
}

type nvmeZone struct {
	mu       sync.Mutex
	start    int64
	cap      int64
	cond     Cond
	wp       int64 // highest completed end, or as reported
	reserved int64 // wp plus the bytes in flight
	inflight int
	resync   bool
	failed   bool // a write failed: appends are refused until reset or finish
}

const (
	nvmeKindAppend = iota
	nvmeKindWrite
	nvmeKindRead
)

// nvmeReq is one data command in flight, from a free list.
type nvmeReq struct {
	p     *Passthrough
	kind  int
	zone  int
	off   int64
	n     int64 // bytes written, or the read's length as reported
	bufs  [][]byte
	app   AppendCompletion
	c     uring.Completion
	iov   [nvmeInlineIovecs]unix.Iovec
	cmd   nvmeCmd
	extra []unix.Iovec
}

func newPassthrough(fd int, path string, opts Options) (*Passthrough, error) {
	nsid, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), nvmeIoctlID, 0)
	if e != 0 {
		return nil, fmt.Errorf("zns: %s is not an NVMe generic device (NVME_IOCTL_ID): %w", path, e)
	}
	// The namespace's block device (ngXnY -> nvmeXnY) has the limits.
	name := filepath.Base(path)
	if !strings.HasPrefix(name, "ng") {
		return nil, fmt.Errorf("zns: %s: want an NVMe generic device named ngXnY", path)
	}
	q := sysfsQueue("/sys/block/nvme" + strings.TrimPrefix(name, "ng") + "/queue")
	g, err := queueGeometry(q, path)
	if err != nil {
		return nil, err
	}
	maxHW, err := q.int("max_hw_sectors_kb")
	if err != nil {
		return nil, err
	}
	g.NativeAppend = true
	p := &Passthrough{path: path, fd: fd, file: uring.FD(fd), nsid: uint32(nsid), maxRead: int(maxHW << 10)}
	p.mgmt = mgmt{geo: g, report: p.reportInto, manage: p.manage}
	for bs := g.BlockSize; bs > 1; bs >>= 1 {
		p.lbaSh++
	}
	if p.ring, err = uring.New(uring.Options{Entries: opts.RingEntries, Big: true}); err != nil {
		return nil, fmt.Errorf("zns: %s: %w", path, err)
	}
	p.reqs = newFreeList[nvmeReq](ringSlots(opts))
	zs := make([]Zone, g.Zones)
	if err := p.reportInto(0, zs); err != nil {
		p.ring.Close()
		return nil, err
	}
	p.zones = make([]nvmeZone, g.Zones)
	for i, z := range zs {
		if p.geo.ZoneCap == 0 {
			p.geo.ZoneCap = z.Cap
		}
		p.zones[i].start = z.Start
		p.zones[i].set(z)
	}
	p.geo.MaxAppend = int(min(int64(p.geo.MaxAppend), p.geo.ZoneCap))
	slog.Debug("zns: opened NVMe passthrough device", "path", path, "nsid", nsid, "geometry", p.geo)
	return p, nil
}

func (z *nvmeZone) set(r Zone) {
	z.cap, z.cond, z.wp = r.Cap, r.Cond, r.WP
	z.reserved = z.wp
	z.resync = false
}

// syncCmd runs one command and waits for it.
// Flushes and zone reports are idempotent: if the kernel cancels one on
// its own (io-wq), the ring submits it again.
func (p *Passthrough) syncCmd(what string, cmd *nvmeCmd, buf []byte) error {
	w := uring.NewWaiter()
	submit := p.ring.Cmd
	if op := cmd[0]; op == nvmeOpFlush || op == nvmeOpZoneRecv {
		submit = p.ring.IdempotentCmd
	}
	if err := submit(p.file, nvmeURingCmdIO, (*[uring.CmdSize]byte)(cmd), buf, w); err != nil {
		return fmt.Errorf("zns: %s %s: %w", p.path, what, err)
	}
	res := p.ring.Wait(w)
	switch {
	case res.Res < 0:
		return fmt.Errorf("zns: %s %s: %w", p.path, what, res.Err("uring_cmd"))
	case res.Res > 0:
		return fmt.Errorf("zns: %s %s: %w", p.path, what, nvmeStatusErr(res.Res))
	}
	return nil
}

func bufPtr(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&b[0]))) }

// reportInto reads len(out) zones from zone first with Zone Management
// Receive, in chunks that fit one transfer.
func (p *Passthrough) reportInto(first int, out []Zone) error {
	const per = 127 // 64-byte header + 127 descriptors = 8 KiB
	buf := make([]byte, nvmeZoneDescLen*(per+1))
	le := binary.LittleEndian
	for done := 0; done < len(out); {
		n := min(per, len(out)-done)
		b := buf[:nvmeZoneDescLen*(n+1)]
		slba := uint64(int64(first+done)*p.geo.ZoneSize) >> p.lbaSh
		var cmd nvmeCmd
		cmd.set(nvmeOpZoneRecv, p.nsid, bufPtr(b), uint32(len(b)),
			uint32(slba), uint32(slba>>32), uint32(len(b)/4-1), nvmeZoneRecvPart)
		if err := p.syncCmd("zone report", &cmd, b); err != nil {
			return err
		}
		got := int(min(le.Uint64(b), uint64(n)))
		if got == 0 {
			return fmt.Errorf("zns: %s: zone report from zone %d returned nothing", p.path, first+done)
		}
		for i := range got {
			d := b[nvmeZoneDescLen*(i+1):]
			z := Zone{
				Type:  Type(d[0] & 0xf),
				Cond:  Cond(d[1] >> 4),
				Cap:   int64(le.Uint64(d[8:])) << p.lbaSh,
				Start: int64(le.Uint64(d[16:])) << p.lbaSh,
				WP:    int64(le.Uint64(d[24:])) << p.lbaSh,
				Len:   p.geo.ZoneSize,
			}
			out[done+i] = normalizeZone(z)
		}
		done += got
	}
	return nil
}

func (p *Passthrough) zone(zone int) (*nvmeZone, error) { return zoneAt(p.zones, zone) }

func (p *Passthrough) resyncLocked(zone int, z *nvmeZone) error {
	var r [1]Zone
	if err := p.reportInto(zone, r[:]); err != nil {
		return err
	}
	inflight := z.reserved - z.wp
	z.set(r[0])
	z.reserved += max(inflight, 0)
	return nil
}

func (p *Passthrough) manage(a zoneAction, zone int) error {
	z, err := p.zone(zone)
	if err != nil {
		return err
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.inflight > 0 {
		return fmt.Errorf("zns: %s zone %d: writes in flight: %w", a.name, zone, syscall.EBUSY)
	}
	if err := p.resyncLocked(zone, z); err != nil {
		return err
	}
	skip, err := checkAction(a, zone, Zone{Type: TypeSeqRequired, Cond: z.cond})
	if err != nil || skip {
		if err == nil && (a == actReset || a == actFinish) {
			z.failed = false
		}
		return err
	}
	slba := uint64(z.start) >> p.lbaSh
	var cmd nvmeCmd
	cmd.set(nvmeOpZoneSend, p.nsid, 0, 0, uint32(slba), uint32(slba>>32), 0, a.nvme)
	err = p.syncCmd("zone "+a.name, &cmd, nil)
	if rerr := p.resyncLocked(zone, z); err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("zns: %s zone %d: %w", a.name, zone, err)
	}
	if a == actReset || a == actFinish {
		z.failed = false // empty, or full: nothing can land after a torn write
	}
	return nil
}

// Append implements Device with NVMe Zone Append.
func (p *Passthrough) Append(zone int, bufs [][]byte, c AppendCompletion) error {
	return p.write(nvmeKindAppend, zone, -1, bufs, c, nil)
}

// Write implements Device.
func (p *Passthrough) Write(zone int, off int64, bufs [][]byte, c uring.Completion) error {
	if off < 0 {
		return fmt.Errorf("zns: write at %d: %w", off, ErrOutOfRange)
	}
	return p.write(nvmeKindWrite, zone, off, bufs, nil, c)
}

func (p *Passthrough) write(kind, zone int, off int64, bufs [][]byte, app AppendCompletion, c uring.Completion) error {
	op := "write"
	if kind == nvmeKindAppend {
		op = "append"
	}
	z, err := p.zone(zone)
	if err != nil {
		return err
	}
	n := totalLen(bufs)
	bs := int64(p.geo.BlockSize)
	if n <= 0 || n%bs != 0 || (off >= 0 && off%bs != 0) {
		return fmt.Errorf("zns: %s of %d bytes at %d to zone %d (block size %d): %w", op, n, off, zone, bs, ErrMisaligned)
	}
	if n > int64(p.geo.MaxAppend) {
		return fmt.Errorf("zns: %s of %d bytes to zone %d (max %d): %w", op, n, zone, p.geo.MaxAppend, ErrTooLarge)
	}
	z.mu.Lock()
	if (z.resync || z.failed) && z.inflight == 0 {
		if err := p.resyncLocked(zone, z); err != nil {
			z.mu.Unlock()
			return err
		}
		if z.cond == CondEmpty {
			z.failed = false // an empty zone holds no torn write
		}
	}
	end := z.start + z.cap
	switch {
	case z.failed && kind == nvmeKindAppend:
		err = fmt.Errorf("zns: %s to zone %d: %w", op, zone, ErrZoneFailed)
	case z.cond == CondReadOnly || z.cond == CondOffline:
		err = fmt.Errorf("zns: %s to zone %d (%s): %w", op, zone, z.cond, ErrReadOnly)
	case z.cond == CondFull || z.reserved >= end:
		err = fmt.Errorf("zns: %s to zone %d: %w", op, zone, ErrZoneFull)
	case off >= 0 && off != z.reserved:
		err = fmt.Errorf("zns: write at %d to zone %d, write pointer %d: %w", off, zone, z.reserved, ErrNotAtWP)
	case z.reserved+n > end:
		err = fmt.Errorf("zns: %s of %d bytes at %d to zone %d, capacity ends at %d: %w", op, n, z.reserved, zone, end, ErrBeyondCapacity)
	}
	if err != nil {
		z.mu.Unlock()
		return err
	}
	z.reserved += n
	z.inflight++
	z.mu.Unlock()

	r := p.reqs.get()
	*r = nvmeReq{p: p, kind: kind, zone: zone, off: off, n: n, bufs: bufs, app: app, c: c}
	opcode, slba := uint8(nvmeOpWrite), uint64(off)>>p.lbaSh
	if kind == nvmeKindAppend {
		opcode, slba = nvmeOpAppend, uint64(z.start)>>p.lbaSh
	}
	if err := p.submit(r, opcode, slba, bufs, n); err != nil {
		z.mu.Lock()
		z.reserved -= n
		z.inflight--
		z.resync = true
		z.mu.Unlock()
		return fmt.Errorf("zns: %s zone %d: %w", op, zone, err)
	}
	return nil
}

// submit fills r's command for bufs (one buffer directly, several as an
// iovec array that r keeps until completion) and submits it.
func (p *Passthrough) submit(r *nvmeReq, opcode uint8, slba uint64, bufs [][]byte, nbytes int64) error {
	var addr uint64
	var dataLen uint32
	cmdOp := uint32(nvmeURingCmdIO)
	var keep []byte
	switch {
	case len(bufs) == 1:
		addr, dataLen, keep = bufPtr(bufs[0]), uint32(len(bufs[0])), bufs[0]
	default:
		iov := r.iov[:0]
		if len(bufs) > nvmeInlineIovecs {
			r.extra = make([]unix.Iovec, 0, len(bufs))
			iov = r.extra
		}
		for _, b := range bufs {
			if len(b) == 0 {
				continue
			}
			v := unix.Iovec{Base: &b[0]}
			v.SetLen(len(b))
			iov = append(iov, v)
		}
		addr, dataLen, cmdOp = uint64(uintptr(unsafe.Pointer(&iov[0]))), uint32(len(iov)), nvmeURingCmdIOVec
	}
	nlb := uint32(nbytes>>p.lbaSh) - 1
	r.cmd.set(opcode, p.nsid, addr, dataLen, uint32(slba), uint32(slba>>32), nlb)
	if err := p.ring.Cmd(p.file, cmdOp, (*[uring.CmdSize]byte)(&r.cmd), keep, r); err != nil {
		p.put(r)
		return err
	}
	return nil
}

func (p *Passthrough) put(r *nvmeReq) {
	*r = nvmeReq{}
	p.reqs.put(r)
}

// Complete implements uring.Completion.
func (r *nvmeReq) Complete(res uring.Result) {
	p, kind, zone, off, n, app, c := r.p, r.kind, r.zone, r.off, r.n, r.app, r.c
	if kind == nvmeKindAppend && res.Res == 0 {
		off = int64(res.Big[0]) << p.lbaSh
	}
	p.put(r)
	failedBefore := false
	if kind != nvmeKindRead {
		failedBefore = p.written(zone, off, n, res.Res == 0)
	}
	if app != nil {
		switch {
		case res.Res == 0 && failedBefore:
			app.Appended(off, fmt.Errorf("zns: append to zone %d completed after a failed write to it: %w", zone, ErrZoneFailed))
		case res.Res < 0:
			app.Appended(off, fmt.Errorf("zns: append to zone %d: %w", zone, res.Err("zone append")))
		case res.Res > 0:
			app.Appended(off, fmt.Errorf("zns: append to zone %d: %w", zone, nvmeStatusErr(res.Res)))
		default:
			app.Appended(off, nil)
		}
		return
	}
	switch {
	case res.Res > 0:
		res.Res = -int32(nvmeStatusErrno(res.Res))
	case res.Res == 0:
		res.Res = int32(n)
	}
	if c != nil {
		c.Complete(res)
	}
}

// written records a write's outcome in its zone and reports whether an
// earlier write to the zone had failed.
func (p *Passthrough) written(zone int, off, n int64, ok bool) (failedBefore bool) {
	z := &p.zones[zone]
	z.mu.Lock()
	defer z.mu.Unlock()
	failedBefore = z.failed
	z.inflight--
	if !ok {
		z.failed = true
	}
	if ok {
		z.wp = max(z.wp, off+n)
		switch {
		case z.wp >= z.start+z.cap:
			z.cond = CondFull
		case z.cond != CondExpOpen:
			z.cond = CondImpOpen
		}
	} else {
		z.reserved -= n
		z.resync = true
	}
	return failedBefore
}

// Read implements Device. A read is at most the device's transfer limit.
func (p *Passthrough) Read(off int64, buf []byte, c uring.Completion) error {
	if err := checkRead(p.geo, off, int64(len(buf))); err != nil {
		return err
	}
	if len(buf) > p.maxRead {
		return fmt.Errorf("zns: read of %d bytes (passthrough max %d): %w", len(buf), p.maxRead, ErrTooLarge)
	}
	z := &p.zones[off/p.geo.ZoneSize]
	z.mu.Lock()
	valid := min(max(z.wp-off, 0), int64(len(buf)))
	z.mu.Unlock()
	clear(buf[valid:])
	r := p.reqs.get()
	*r = nvmeReq{p: p, kind: nvmeKindRead, off: off, n: int64(len(buf)), c: c}
	if valid == 0 {
		if err := p.ring.Nop(r); err != nil {
			p.put(r)
			return fmt.Errorf("zns: read at %d: %w", off, err)
		}
		return nil
	}
	// The command reads only the blocks below the write pointer.
	if err := p.submit(r, nvmeOpRead, uint64(off)>>p.lbaSh, [][]byte{buf[:valid]}, valid); err != nil {
		return fmt.Errorf("zns: read at %d: %w", off, err)
	}
	return nil
}

// Flush implements Device.
func (p *Passthrough) Flush() error {
	var cmd nvmeCmd
	cmd.set(nvmeOpFlush, p.nsid, 0, 0)
	return p.syncCmd("flush", &cmd, nil)
}

// Close implements Device; it waits for every command in flight.
func (p *Passthrough) Close() error {
	p.closeMu.Lock()
	defer p.closeMu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	err := p.ring.Close()
	if cerr := unix.Close(p.fd); cerr != nil && err == nil {
		err = fmt.Errorf("zns: close %s: %w", p.path, cerr)
	}
	return err
}
