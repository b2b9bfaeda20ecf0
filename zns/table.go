package zns

import (
	"fmt"
	"sync"
)

// zoneTable is the software zone state machine of the emu and null
// backends: write pointers, conditions and the open/active accounting, all
// under one mutex. It implements the management half of Device.
//
// Implicit-open eviction follows ZNS (and what null_blk and QEMU do): when a
// write or an OpenZone needs an open zone while MaxOpen are open, the
// implicitly opened zone that was opened longest ago is closed to make room;
// explicitly opened zones are never closed behind the host's back. With
// strict set there is no eviction and such a request fails with
// ErrTooManyOpen. The active limit is never worked around.
type zoneTable struct {
	mu     sync.Mutex
	geo    Geometry
	strict bool
	zones  []zoneState
	nOpen  int
	nAct   int
	seq    uint64 // implicit-open order, for eviction
}

type zoneState struct {
	wp int64 // absolute write pointer
	// written is where the data written since the last reset ends: the
	// write pointer, except in a finished zone, whose unwritten rest
	// reads as zeros whatever the medium held there (as ZNS reads
	// unwritten blocks).
	written int64
	cond    Cond
	typ     Type
	openSeq uint64
	// sum is the CRC-32C of the data written to the zone from sumFrom
	// on (the emu's, to verify at Open what its one-sync Flush claimed;
	// see Emu): a reset restarts it at the zone's start, a Flush at the
	// written end it copies.
	sumFrom int64
	sum     uint32
}

// restartSums starts every zone's data checksum afresh at its written
// end.
func restartSums(zones []zoneState) {
	for i := range zones {
		zones[i].sumFrom, zones[i].sum = zones[i].written, 0
	}
}

func newZoneTable(g Geometry, conv int, strict bool) *zoneTable {
	t := &zoneTable{geo: g, strict: strict, zones: make([]zoneState, g.Zones)}
	for i := range t.zones {
		z := &t.zones[i]
		z.wp = t.start(i)
		z.written, z.sumFrom = z.wp, z.wp
		z.typ, z.cond = TypeSeqRequired, CondEmpty
		if i < conv {
			z.typ, z.cond = TypeConventional, CondNotWP
		}
	}
	return t
}

func (t *zoneTable) start(zone int) int64 { return int64(zone) * t.geo.ZoneSize }

// Geometry implements Device.
func (t *zoneTable) Geometry() Geometry { return t.geo }

func (t *zoneTable) zone(zone int) (*zoneState, error) {
	if zone < 0 || zone >= len(t.zones) {
		return nil, fmt.Errorf("zns: zone %d of %d: %w", zone, len(t.zones), ErrOutOfRange)
	}
	return &t.zones[zone], nil
}

// seqZone is zone, which must be sequential and not read-only/offline.
func (t *zoneTable) seqZone(zone int, op string) (*zoneState, error) {
	z, err := t.zone(zone)
	if err != nil {
		return nil, err
	}
	if z.typ == TypeConventional {
		return nil, fmt.Errorf("zns: %s zone %d: %w", op, zone, ErrConventional)
	}
	if z.cond == CondReadOnly || z.cond == CondOffline {
		return nil, fmt.Errorf("zns: %s zone %d (%s): %w", op, zone, z.cond, ErrReadOnly)
	}
	return z, nil
}

func (t *zoneTable) report(i int) Zone {
	z := &t.zones[i]
	return Zone{Start: t.start(i), Len: t.geo.ZoneSize, Cap: t.geo.ZoneCap, WP: z.wp, Type: z.typ, Cond: z.cond}
}

// Report implements Device.
func (t *zoneTable) Report(first int, zones []Zone) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if first < 0 || first > len(t.zones) {
		return 0, fmt.Errorf("zns: report from zone %d of %d: %w", first, len(t.zones), ErrOutOfRange)
	}
	n := 0
	for i := first; i < len(t.zones) && n < len(zones); i++ {
		zones[n] = t.report(i)
		n++
	}
	return n, nil
}

// oldestImpOpen is the implicitly open zone opened longest ago, or -1.
// Caller holds mu.
func (t *zoneTable) oldestImpOpen() int {
	victim := -1
	for i := range t.zones {
		z := &t.zones[i]
		if z.cond == CondImpOpen && (victim < 0 || z.openSeq < t.zones[victim].openSeq) {
			victim = i
		}
	}
	return victim
}

// canActivate reports whether a zone that is empty or closed may open now:
// the active limit has room (an empty zone becomes active), and the open
// limit has room or an implicitly open zone can be evicted (see
// zoneTable). It changes nothing. Caller holds mu.
func (t *zoneTable) canActivate(zone int, z *zoneState) error {
	if z.cond == CondEmpty && t.geo.MaxActive > 0 && t.nAct >= t.geo.MaxActive {
		return fmt.Errorf("zns: open zone %d with %d of %d active: %w", zone, t.nAct, t.geo.MaxActive, ErrTooManyActive)
	}
	if t.geo.MaxOpen > 0 && t.nOpen >= t.geo.MaxOpen && (t.strict || t.oldestImpOpen() < 0) {
		return fmt.Errorf("zns: open zone %d with %d of %d open: %w", zone, t.nOpen, t.geo.MaxOpen, ErrTooManyOpen)
	}
	return nil
}

// activate opens a zone that is empty or closed, evicting an implicitly
// open zone if the open limit needs it. canActivate must have allowed it.
// Caller holds mu.
func (t *zoneTable) activate(z *zoneState, cond Cond) {
	if t.geo.MaxOpen > 0 && t.nOpen >= t.geo.MaxOpen {
		t.closeLocked(t.oldestImpOpen())
	}
	if z.cond == CondEmpty {
		t.nAct++
	}
	t.nOpen++
	z.cond = cond
	t.seq++
	z.openSeq = t.seq
}

// release drops a zone's open/active accounting before its condition
// changes to a non-active one. Caller holds mu.
func (t *zoneTable) release(z *zoneState) {
	if z.cond.Open() {
		t.nOpen--
	}
	if z.cond.Active() {
		t.nAct--
	}
}

// closeLocked closes an open zone: closed, or empty if nothing was written.
func (t *zoneTable) closeLocked(zone int) {
	z := &t.zones[zone]
	if !z.cond.Open() {
		return
	}
	t.nOpen--
	z.cond = CondClosed
	if z.wp == t.start(zone) {
		t.nAct--
		z.cond = CondEmpty
	}
}

// checkWrite checks a write of n bytes at off (off < 0: an append at the
// write pointer) against every zone rule, changing nothing. Caller holds
// mu.
func (t *zoneTable) checkWrite(zone int, off, n int64) (*zoneState, error) {
	z, err := t.zone(zone)
	if err != nil {
		return nil, err
	}
	bs := int64(t.geo.BlockSize)
	op := "write"
	if off < 0 {
		op = "append"
	}
	if n <= 0 || n%bs != 0 || (off >= 0 && off%bs != 0) {
		return nil, fmt.Errorf("zns: %s of %d bytes at %d to zone %d (block size %d): %w", op, n, off, zone, bs, ErrMisaligned)
	}
	if n > int64(t.geo.MaxAppend) {
		return nil, fmt.Errorf("zns: %s of %d bytes to zone %d (max %d): %w", op, n, zone, t.geo.MaxAppend, ErrTooLarge)
	}
	start := t.start(zone)
	if z.typ == TypeConventional {
		if off < 0 {
			return nil, fmt.Errorf("zns: append to zone %d: %w", zone, ErrConventional)
		}
		if off < start || off+n > start+t.geo.ZoneSize {
			return nil, fmt.Errorf("zns: write [%d,+%d) is not inside zone %d: %w", off, n, zone, ErrOutOfRange)
		}
		return z, nil
	}
	if z.cond == CondReadOnly || z.cond == CondOffline {
		return nil, fmt.Errorf("zns: %s to zone %d (%s): %w", op, zone, z.cond, ErrReadOnly)
	}
	if z.cond == CondFull {
		return nil, fmt.Errorf("zns: %s to zone %d: %w", op, zone, ErrZoneFull)
	}
	if off >= 0 && off != z.wp {
		return nil, fmt.Errorf("zns: write at %d to zone %d, write pointer %d: %w", off, zone, z.wp, ErrNotAtWP)
	}
	if end := start + t.geo.ZoneCap; z.wp+n > end {
		return nil, fmt.Errorf("zns: %s of %d bytes at %d to zone %d, capacity ends at %d: %w", op, n, z.wp, zone, end, ErrBeyondCapacity)
	}
	if z.cond == CondEmpty || z.cond == CondClosed {
		if err := t.canActivate(zone, z); err != nil {
			return nil, err
		}
	}
	return z, nil
}

// advance applies a write of n bytes that checkWrite allowed: it opens the
// zone if needed, moves the write pointer, and fills the zone at its
// capacity. It returns where the data goes (off for a conventional zone).
// Caller holds mu.
func (t *zoneTable) advance(zone int, z *zoneState, off, n int64) int64 {
	if z.typ == TypeConventional {
		return off
	}
	if z.cond == CondEmpty || z.cond == CondClosed {
		t.activate(z, CondImpOpen)
	}
	at := z.wp
	z.wp += n
	z.written = z.wp
	if z.wp == t.start(zone)+t.geo.ZoneCap {
		t.release(z)
		z.cond = CondFull
	}
	return at
}

// OpenZone implements Device.
func (t *zoneTable) OpenZone(zone int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	z, err := t.seqZone(zone, "open")
	if err != nil {
		return err
	}
	switch z.cond {
	case CondExpOpen:
		return nil
	case CondImpOpen:
		z.cond = CondExpOpen
		return nil
	case CondFull:
		return fmt.Errorf("zns: open zone %d: %w", zone, ErrZoneFull)
	}
	if err := t.canActivate(zone, z); err != nil {
		return err
	}
	t.activate(z, CondExpOpen)
	return nil
}

// CloseZone implements Device.
func (t *zoneTable) CloseZone(zone int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	z, err := t.seqZone(zone, "close")
	if err != nil {
		return err
	}
	switch z.cond {
	case CondClosed:
		return nil
	case CondImpOpen, CondExpOpen:
		t.closeLocked(zone)
		return nil
	}
	return fmt.Errorf("zns: close zone %d (%s): %w", zone, z.cond, ErrBadTransition)
}

// FinishZone implements Device. Finishing an empty zone takes an active
// resource for the instant of the transition, as ZNS requires.
func (t *zoneTable) FinishZone(zone int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	z, err := t.seqZone(zone, "finish")
	if err != nil {
		return err
	}
	if z.cond == CondFull {
		return nil
	}
	if z.cond == CondEmpty && t.geo.MaxActive > 0 && t.nAct >= t.geo.MaxActive {
		return fmt.Errorf("zns: finish empty zone %d with %d of %d active: %w", zone, t.nAct, t.geo.MaxActive, ErrTooManyActive)
	}
	t.release(z)
	z.cond = CondFull
	// The rest of the zone is unwritten: bytes that reached the medium
	// past the write pointer but were lost to a power cut (the emu keeps
	// them in its file) must not become readable.
	z.written = z.wp
	z.wp = t.start(zone) + t.geo.ZoneCap
	return nil
}

// ResetZone implements Device.
func (t *zoneTable) ResetZone(zone int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	z, err := t.seqZone(zone, "reset")
	if err != nil {
		return err
	}
	t.resetLocked(zone, z)
	return nil
}

// failZone moves a sequential zone to cond, Read Only or Offline (media
// failure), giving up its open and active resources.
func (t *zoneTable) failZone(zone int, cond Cond) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	z, err := t.seqZone(zone, "make "+cond.String())
	if err != nil {
		return err
	}
	t.release(z)
	z.cond = cond
	return nil
}

func (t *zoneTable) resetLocked(zone int, z *zoneState) {
	t.release(z)
	z.cond = CondEmpty
	z.wp = t.start(zone)
	z.written = z.wp
	z.sumFrom, z.sum = z.wp, 0
}

// ResetAll implements Device.
func (t *zoneTable) ResetAll() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range t.zones {
		z := &t.zones[i]
		if z.typ != TypeConventional && z.cond != CondReadOnly && z.cond != CondOffline {
			t.resetLocked(i, z)
		}
	}
	return nil
}

// readable checks a read of n bytes at off and returns how many of them lie
// below the end of the zone's written data, its write pointer unless it
// was finished (the rest read as zeros). A read stays inside one zone.
// Caller holds mu.
func (t *zoneTable) readable(off, n int64) (int64, error) {
	bs := int64(t.geo.BlockSize)
	if n <= 0 || n%bs != 0 || off%bs != 0 {
		return 0, fmt.Errorf("zns: read of %d bytes at %d (block size %d): %w", n, off, bs, ErrMisaligned)
	}
	if off < 0 || off >= int64(t.geo.Zones)*t.geo.ZoneSize {
		return 0, fmt.Errorf("zns: read at %d: %w", off, ErrOutOfRange)
	}
	zone := int(off / t.geo.ZoneSize)
	if off+n > t.start(zone)+t.geo.ZoneSize {
		return 0, fmt.Errorf("zns: read [%d,+%d) crosses the end of zone %d: %w", off, n, zone, ErrOutOfRange)
	}
	z := &t.zones[zone]
	if z.cond == CondOffline {
		return 0, fmt.Errorf("zns: read zone %d: %w", zone, ErrReadOnly)
	}
	if z.typ == TypeConventional {
		return n, nil
	}
	return min(max(z.written-off, 0), n), nil
}

// recount recomputes the open/active counters from the conditions.
func (t *zoneTable) recount() {
	t.nOpen, t.nAct = 0, 0
	for _, z := range t.zones {
		if z.cond.Open() {
			t.nOpen++
		}
		if z.cond.Active() {
			t.nAct++
		}
	}
}

// powerCycle moves every open zone to closed (or empty), as a device does
// when it loses power. Caller holds mu.
func (t *zoneTable) powerCycle() {
	for i := range t.zones {
		z := &t.zones[i]
		if z.cond.Open() {
			z.cond = CondClosed
			if z.wp == t.start(i) {
				z.cond = CondEmpty
			}
		}
	}
	t.recount()
}
