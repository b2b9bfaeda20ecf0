package zns

import (
	"fmt"
	"math"
	"syscall"

	"github.com/zonefold/zonefold/uring"
)

// Null is a zoned device without storage: every data operation is a NOP
// through the ring, reads return zeros, and the zone rules are enforced
// exactly as on Emu. It measures what the engine itself costs.
//
// By default any number of writes per zone are in flight at once, each
// completing at once: nothing stands for a zone's write pointer. With
// zone_serial=1 each sequential zone takes one write at a time, as on a
// zoned block device (null_blk zoned, an SMR disk: the kernel lets one
// write per zone reach the device, and Block, zonefold's backend for
// them, submits a zone's next write once the one before completed):
// writers that share a zone wait for its write pointer, those with zones
// of their own do not. The writes still cost no time of their own, only
// the round trip through the ring, as on null_blk.
//
// With completion_nsec=N every data operation (write, append, read)
// completes N nanoseconds after the ring takes it, as on null_blk with
// irqmode=2 and its completion_nsec: each goes to the ring as a kernel
// timer of N ns (IORING_OP_TIMEOUT) instead of a NOP, so nothing burns
// CPU meanwhile, nothing is allocated per operation (the device's one
// timespec serves them all), and operations complete independently of
// each other, those to different zones as those to one. The zone rules
// are unchanged: the write pointer moves at submission, under the zone
// table's mutex, and a write's completion only reports it. With
// zone_serial=1 as well, a zone's next write goes to the ring when the
// one before completed, so writers sharing a zone take N ns per write
// in turn while those with zones of their own overlap: the device time
// per write that makes a zone's write pointer the bottleneck on a real
// zoned device.
type Null struct {
	soft
}

// KeepsNoData implements Forgetful: reads return zeros.
func (n *Null) KeepsNoData() bool { return true }

// Forgetful is implemented by a device that keeps no data (null:): what
// is read back is not what was written, so nothing that reads the
// device back (GC's walk of record headers, recovery) can work on it.
type Forgetful interface{ KeepsNoData() bool }

// defaultMaxAppend is the max append size of software devices unless the
// device string says otherwise.
const defaultMaxAppend = 1 << 20

// softGeometry builds and checks the geometry of a software device.
func softGeometry(sp spec) (Geometry, error) {
	g := Geometry{
		Zones:     sp.zones,
		ZoneSize:  sp.zoneSize,
		ZoneCap:   sp.zoneCap,
		BlockSize: sp.blockSize,
		MaxOpen:   sp.maxOpen,
		MaxActive: sp.maxActive,
		MaxAppend: sp.maxAppend,
	}
	if g.BlockSize == 0 {
		g.BlockSize = 4096
	}
	if g.BlockSize < 512 || g.BlockSize > 64<<10 || g.BlockSize&(g.BlockSize-1) != 0 {
		return g, fmt.Errorf("zns: unsupported block size %d (want a power of two from 512 to 64K)", g.BlockSize)
	}
	bs := int64(g.BlockSize)
	if g.ZoneSize == 0 {
		return g, fmt.Errorf("zns: zone_size is required")
	}
	if g.ZoneSize%bs != 0 {
		return g, fmt.Errorf("zns: zone_size %d is not a multiple of the block size %d", g.ZoneSize, bs)
	}
	if g.Zones == 0 && sp.size > 0 {
		g.Zones = int(min(sp.size/g.ZoneSize, MaxSoftZones+1))
	}
	if g.Zones == 0 {
		return g, fmt.Errorf("zns: the device needs at least one zone (zones=N, or size >= zone_size)")
	}
	// Bound the per-zone tables before anything allocates them, and keep
	// every byte offset in an int64.
	if g.Zones > MaxSoftZones {
		return g, fmt.Errorf("zns: %d zones: an emulated device has at most %d (use a larger zone_size)", g.Zones, MaxSoftZones)
	}
	if g.ZoneSize > math.MaxInt64/int64(g.Zones) {
		return g, fmt.Errorf("zns: %d zones of %d bytes overflow a 64-bit byte offset", g.Zones, g.ZoneSize)
	}
	if g.ZoneCap == 0 {
		g.ZoneCap = g.ZoneSize
	}
	if g.ZoneCap > g.ZoneSize || g.ZoneCap%bs != 0 {
		return g, fmt.Errorf("zns: zone_cap %d must be a multiple of the block size %d and at most zone_size %d", g.ZoneCap, bs, g.ZoneSize)
	}
	if g.MaxOpen > 0 && g.MaxActive > 0 && g.MaxOpen > g.MaxActive {
		return g, fmt.Errorf("zns: max_open %d exceeds max_active %d", g.MaxOpen, g.MaxActive)
	}
	if g.MaxAppend == 0 {
		g.MaxAppend = int(min(defaultMaxAppend, g.ZoneCap))
	}
	if int64(g.MaxAppend)%bs != 0 {
		return g, fmt.Errorf("zns: max_append %d is not a multiple of the block size %d", g.MaxAppend, bs)
	}
	g.MaxAppend = int(min(int64(g.MaxAppend), g.ZoneCap))
	if sp.conv >= g.Zones {
		return g, fmt.Errorf("zns: conv %d leaves no sequential zone of %d", sp.conv, g.Zones)
	}
	return g, nil
}

// init sets up the shared core of a software device with its own ring.
func (s *soft) init(g Geometry, sp spec, opts Options, storage bool) error {
	ring, err := uring.New(ringOptions(opts, g))
	if err != nil {
		return fmt.Errorf("zns: %w", err)
	}
	s.zoneTable = newZoneTable(g, sp.conv, sp.strictOpen)
	s.ring = ring
	s.storage = storage
	s.reqs = newFreeList[softReq](ringSlots(opts))
	s.reads = newFreeList[readReq](ringSlots(opts))
	return nil
}

// ringOptions are the options of the ring of a device of geometry g
// whose appends are writevs: each slot holds the iovecs of an append of
// MaxAppend bytes in buffers of a page or more (as the engine's header
// blocks and folios are) without growing, up to the kernel's 1024.
func ringOptions(opts Options, g Geometry) uring.Options {
	const page = 4096
	return uring.Options{Entries: opts.RingEntries, Iovecs: min(g.MaxAppend/page+1, 1024)}
}

// ringSlots is how many operations a device's ring keeps in flight: the
// number of per-I/O structs worth preallocating.
func ringSlots(opts Options) int {
	n := 256
	if opts.RingEntries > 0 {
		n = int(opts.RingEntries)
	}
	return 2 * n
}

func openNull(sp spec, opts Options) (*Null, error) {
	g, err := softGeometry(sp)
	if err != nil {
		return nil, err
	}
	n := &Null{}
	if err := n.init(g, sp, opts, false); err != nil {
		return nil, err
	}
	if sp.completionNsec > 0 {
		ns := int64(sp.completionNsec)
		n.delay = &syscall.Timespec{Sec: ns / 1e9, Nsec: ns % 1e9}
	}
	if sp.zoneSerial {
		n.serial = newSerialZones(g.Zones)
		go n.dispatch()
	}
	return n, nil
}

// Flush implements Device; there is nothing to make durable.
func (n *Null) Flush() error { return nil }

// Close implements Device. With zone_serial it first waits for the
// writes queued behind others, which the dispatcher submits as those
// before them complete (with completion_nsec that is a delay each): a
// write the device accepted completes as it would have, not with EIO from
// a ring closed under it. Then it stops the dispatcher and closes the
// ring, which waits for what is still in it.
func (n *Null) Close() error {
	if q := n.serial; q != nil {
		n.waitWrites()
		close(q.ready)
		<-q.done
	}
	return n.closeRing()
}
