package engine

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/zonefold/zonefold/internal/wake"
)

// Policy chooses the zone each append goes to.
type Policy int

const (
	// PolicyMRU gives each file its own most recently used zone (the xfs
	// "add inode to zone caching" idea): a file's data stays together, so
	// overwriting a file invalidates whole zones together.
	PolicyMRU Policy = iota
	// PolicyNone sends every file's appends to one shared zone stream.
	PolicyNone
	// PolicyRoundRobin spreads appends over the open zones in turn,
	// whatever the file.
	PolicyRoundRobin
	// PolicyHinted is mru with a file's write-life hint (see WriteLife):
	// the hinted files of one class share one MRU zone, so data expected
	// to die together is written together; unhinted files keep their own.
	PolicyHinted
)

func (p Policy) String() string {
	switch p {
	case PolicyMRU:
		return "mru"
	case PolicyNone:
		return "none"
	case PolicyRoundRobin:
		return "round-robin"
	case PolicyHinted:
		return "hinted"
	}
	return fmt.Sprintf("policy(%d)", int(p))
}

// ParsePolicy reads a policy name: mru, none, round-robin or hinted.
func ParsePolicy(s string) (Policy, error) {
	for _, p := range []Policy{PolicyMRU, PolicyNone, PolicyRoundRobin, PolicyHinted} {
		if p.String() == s {
			return p, nil
		}
	}
	return 0, fmt.Errorf("engine: unknown placement policy %q (want mru, none, round-robin or hinted)", s)
}

// Zone states as the engine sees them.
const (
	zoneFree int32 = iota // empty, in the free pool
	zoneOpen              // taking appends
	zoneFull              // no room left; a GC candidate
	zoneMeta              // a metadata zone
	zoneGC                // being relocated or reset by GC
	// zoneRetiring: an append to it failed. No more appends go there;
	// once those in flight have landed, the engine finishes it on the
	// device and it becomes full (a GC candidate). Until then it counts
	// against the open budget.
	zoneRetiring
)

// zone is the engine's view of one sequential zone.
type zone struct {
	idx   int
	start int64 // device byte offset
	cap   int64 // writable bytes
	// alloc is the bytes reserved from start; appends land in reservation
	// order on serialised backends and anywhere in the reservation on
	// native-append ones, so alloc is the write pointer once they finish.
	alloc   atomic.Int64
	valid   atomic.Int64  // bytes still mapped by some file
	lastUse atomic.Uint64 // placement clock at the last reservation
	// lastSeq is the highest record sequence number written: when the
	// zone last took data (cost-benefit GC's age; see pick).
	lastSeq atomic.Uint64
	state   atomic.Int32
	// readers counts reads in flight from this zone; GC resets a zone only
	// when none remain.
	readers atomic.Int32
	// writers counts reservations not yet appended and mapped: a zone that
	// placement has filled may still have appends in flight, and GC must
	// not take it before they are mapped.
	writers atomic.Int32
	// forGC marks a zone GC opened for its copies (under placer.mu): it
	// counts against GC's streams, not the data budget.
	forGC bool
	// unfinished: the device refused to finish the zone when it was
	// retired, and it may still be open there (placer.unfinished;
	// placer.mu). A reset clears it, and so does a later finish the
	// device accepts (collector.retryFinish).
	unfinished bool
	// tornHeld: a torn record ends the zone's log and no checkpoint has
	// numbered it below itself since recovery found it; the zone, still
	// active, counts unfinished and is finished only after one
	// (settleTornZones, retryFinish), or the next recovery, from the old
	// checkpoint, would find the torn record below a full zone's write
	// pointer and replay it.
	tornHeld atomic.Bool
	// offline: the engine found the device reports the zone offline
	// (offlineWatcher, or recovery); its data no longer reads. GC never
	// takes it (pick, resetEmpty, sealIdle; recovery's deadZones): its
	// data does not read for a copy, and the device refuses its reset,
	// so each try failed, logged a reset record and flushed for nothing.
	// It stays full for good; what files map there is lost
	// (placer.offlineBytes), and its room counts nowhere.
	offline atomic.Bool
	// finishRetry is the collector pass at which GC next tries to finish
	// an unfinished zone, finishBackoff the passes it waits after a
	// refusal (doubling to maxFinishBackoff); under collector.mu.
	finishRetry, finishBackoff uint64
	// owner is the file that chose this zone as its MRU zone last; nil
	// for GC's zones and the shared stream.
	owner atomic.Pointer[file]
	// life is the write-life class (WriteLife) of the file that opened
	// it for client data: under mru a hinted file without a zone starts
	// in the tail of a zone of its own class before a fresh one (see
	// classTailLocked). LifeNotSet for unhinted files, GC and the
	// shared streams.
	life atomic.Uint32
	// sharedFrom is the owner this zone had when another file took it
	// to share (nil if never shared since it was opened): finishTail
	// leaves it alone while that file is open and may write to it.
	sharedFrom atomic.Pointer[file]
	// resetPending is set once the zone's reset is decided (its valid
	// data relocated, or none left): from then on a checkpoint records
	// its write pointer as 0. freeZone clears it after the reset.
	resetPending atomic.Bool
	// gen counts the zone's resets: cached record sums are valid for
	// one generation.
	gen atomic.Uint32
	// barrenValid is 1 + the valid bytes at which a GC pass last found,
	// in generation barrenGen, that collecting this zone gains no space
	// (0: never). A full zone's bytes change only by losing valid data
	// or by a reset, so while valid and gen are still those, collecting
	// it again would read it again to learn the same: pick skips it. On
	// a full device every failing write ran passes that re-read the
	// same barren zones; through the daemon each fsync that failed took
	// ~0.2 s. Guarded by collector.mu.
	// barrenAlloc is the bytes reserved then: an open zone that GC
	// found not worth sealing (see collector.sealIdle) changes by taking
	// appends too.
	barrenValid int64
	barrenAlloc int64
	barrenGen   uint32
	// shortValid, shortAlloc, shortGen: as barrenValid..., for a pass
	// that found collecting the zone gains space, but less than
	// shortGain, the least it asked for (errGainShort): a pass asking
	// as much or more skips it while it is as it was. Through the daemon
	// on a device so full, each of thousands of queued writes ran a
	// pass that walked the same victims' headers again, one writer at a
	// time under the collector, and none was answered for minutes
	// (TestH29bRefusedWritesDoNotRereadShortVictims). Guarded by
	// collector.mu.
	shortValid int64
	shortAlloc int64
	shortGen   uint32
	shortGain  int64
	// retryAt: the device failed GC's last collection of the zone (a
	// read or copy of its data, its finish or its reset); GC leaves the
	// zone until then (failedLately). failWarned: that failure was
	// logged at WARN; later ones of the zone log at debug level until it
	// is reset. failWait: the wait the last failure set, doubled by
	// the next one (victimFailed) until the zone is reset. failErr: that
	// failure's error, which a writer kept out by the zone reports
	// (failingFor). failedReset: that failure was of the zone's reset,
	// not of its data: an empty zone (resetEmpty) needs no read, so only
	// a failed reset keeps it out. Guarded by collector.mu.
	retryAt     time.Time
	failWarned  bool
	failWait    time.Duration
	failErr     error
	failedReset bool
	// triedIn: the collector.passSeq of the last pass that took the
	// zone as a victim (each pass takes a zone once). Guarded by
	// collector.mu.
	triedIn uint64
}

// barren reports whether a GC pass found z not worth collecting in its
// present state (collector.mu held).
func (z *zone) barren(valid int64) bool {
	return z.barrenValid == valid+1 && z.barrenAlloc == z.alloc.Load() && z.barrenGen == z.gen.Load()
}

// markBarren remembers that collecting z as it was (valid and alloc
// bytes, generation gen) gains nothing (collector.mu held).
func (z *zone) markBarren(valid, alloc int64, gen uint32) {
	z.barrenValid, z.barrenAlloc, z.barrenGen = valid+1, alloc, gen
}

// short reports whether a GC pass asking at least minGain found z, in
// its present state, gaining less (collector.mu held).
func (z *zone) short(valid, minGain int64) bool {
	return z.shortValid == valid+1 && z.shortAlloc == z.alloc.Load() && z.shortGen == z.gen.Load() && minGain >= z.shortGain
}

// markShort remembers that collecting z as it was (as markBarren) gains
// less than minGain (collector.mu held).
func (z *zone) markShort(valid, alloc int64, gen uint32, minGain int64) {
	z.shortValid, z.shortAlloc, z.shortGen, z.shortGain = valid+1, alloc, gen, minGain
}

// orphan reports whether no file is writing to z as its MRU zone: the
// file that chose it last has moved to another, or has no handle open
// (a file done being written, like a store's finished table).
func (z *zone) orphan() bool {
	o := z.owner.Load()
	return o == nil || o.handles.Load() == 0 || o.mru.Load() != z
}

func (z *zone) remaining() int64 { return z.cap - z.alloc.Load() }

// doneWriting ends one reservation of z (appended and mapped, or given
// back) and wakes waiters once none is left.
func (z *zone) doneWriting(idle *wake.Wake) {
	if z.writers.Add(-1) == 0 {
		idle.Signal()
	}
}

// ErrNoSpace is returned when no zone can take an append.
var ErrNoSpace = fmt.Errorf("engine: %w", syscall.ENOSPC)

// errNoFreeZone means a file needs a zone of its own and none is free
// beyond GC's reserve: its writer asks GC for one (reserveData with share
// false) before it mixes its data into another file's zone.
var errNoFreeZone = errors.New("engine: no free zone for a file of its own")

// errDraining means a zone may open only once zones that placement has
// filled finish their last appends; reserve waits for that itself, except
// when its caller holds a pad for one of them (see reserve).
var errDraining = errors.New("engine: waiting for filled zones' last appends")

// errPadFirst means a reservation that already holds a pad for one zone's
// short tail met another: a grant carries one pad, so the caller appends
// it and asks again (the other tail is padded then).
var errPadFirst = errors.New("engine: pad the zone tail first")

// minRecord is the smallest record: a header and one block of data.
const minRecord = 2 * BlockSize

// grant is space reserved in a zone for one append.
type grant struct {
	z   *zone
	off int64 // offset in the zone where the reservation starts
	n   int64
	// pad, if non-zero, is a zone tail too short for a record that the
	// reserver must fill with a header-only pad record, at padOff.
	padZone *zone
	padOff  int64
}

// placer hands out zone space. The fast path (a file's MRU zone has room)
// is one atomic compare-and-swap; choosing a zone takes mu.
type placer struct {
	policy Policy
	zones  []*zone // every data zone, by device zone number order
	budget int     // data zones open at once
	// gcStreams is the zones GC may have open beside the data budget:
	// one per GC stream (see collector).
	gcStreams int

	mu     sync.Mutex
	free   []*zone // empty data zones
	open   []*zone // zones taking appends
	shared atomic.Pointer[zone]
	lives  lifeStreams // the hinted policy's per-class streams
	rr     atomic.Uint64
	clock  atomic.Uint64
	// reserved free zones that only GC may take.
	gcReserve int
	// opened and filled count zones placement opened and saw fill up
	// (or GC sealed, or a closing file finished: Stats.ZonesFilled);
	// sharedMRU counts files sent to another file's zone (mru) for want
	// of a zone of their own; sharedBusy the part of them sent into a zone
	// another file was still writing (no finished file's tail had room):
	// the two files' appends interleave there.
	opened, filled, sharedMRU, sharedBusy atomic.Int64
	// tailsFinished counts zones given up at a file's close with a tail
	// too short to be worth another file's start (Config.FinishTail).
	tailsFinished atomic.Int64
	// retiring are zones given up (an append to them failed, or a
	// closed file's short tail), for the engine's retirer to finish on
	// the device once their appends have landed (see giveUp).
	retiring []*zone
	// unfinished is the zones whose finish the device refused
	// (Engine.retire; zone.unfinished): each may still hold an open and
	// an active resource on the device, so each takes one zone off what
	// placement may open (openFreeLocked) until GC resets it (freeZone).
	// The engine cannot write to such a zone (it is full to placement):
	// the device's limits are the engine's budget, and without this a
	// placement that opened a zone in its place went one past them
	// (TestFailedFinishKeepsToActiveLimit).
	unfinished int
	// unalloc is the bytes not yet reserved in free and open zones, and
	// nfree the free zones: space() reads them on every client write, so
	// they are kept without the lock.
	unalloc atomic.Int64
	nfree   atomic.Int64
	// draining are zones retired from open whose reservations are not all
	// appended yet: the device counts a zone open and active until its
	// last write lands, so they count against the budget until then.
	draining []*zone
	// flush submits what the ring holds, so that draining zones' appends
	// queued under a plug can complete.
	flush func()
	// idle is signalled when a zone's writers reach zero.
	idle *wake.Wake
	// lowFree, if set, is called (under mu; it must not block) when
	// placement opens a zone for client data and leaves fewer than
	// lowWater zones free: it wakes the background collector, which
	// otherwise looks only on its tick. A writer that reaches GC's
	// reserve before then collects in its own writeback, inside its
	// fsync.
	lowFree  func()
	lowWater int
}

// claim reserves up to want bytes (at least minRecord) in z. It returns
// ok=false when z has no room for a record; a tail too short for one is
// claimed whole and reported as pad, so the zone still fills to capacity
// — unless padOK is false: then such a tail is left alone and reported
// as pad with ok=false.
func (z *zone) claim(want int64, padOK bool) (off, n int64, pad bool, ok bool) {
	for {
		a := z.alloc.Load()
		rem := z.cap - a
		if rem <= 0 {
			return 0, 0, false, false
		}
		if rem < minRecord {
			if !padOK {
				return 0, 0, true, false
			}
			if z.alloc.CompareAndSwap(a, z.cap) {
				return a, rem, true, true
			}
			continue
		}
		n = min(want, rem)
		if left := rem - n; left > 0 && left < minRecord {
			// Leave no unusable tail: take it if allowed, else leave a
			// full record's worth.
			if n > minRecord {
				n -= minRecord - left
			}
		}
		if z.alloc.CompareAndSwap(a, a+n) {
			return a, n, false, true
		}
	}
}

// reserve finds room for up to want bytes for a file whose MRU zone is
// mru, and updates it. want is at least minRecord. Under mru a file
// without a zone that cannot open one shares the least recently used.
func (p *placer) reserve(mru *atomic.Pointer[zone], want int64, forGC bool) (grant, error) {
	return p.reserveData(mru, nil, want, forGC, shareData)
}

// shareMode is how far a writer without a zone of its own may share.
type shareMode int8

const (
	// shareNot: a file that needs a zone while none is free beyond GC's
	// reserve gets errNoFreeZone, so that GC frees one for it.
	shareNot shareMode = iota
	// shareData: it shares a zone of client data.
	shareData
	// shareGC: its last resort, after GC reclaimed nothing: it may share
	// a zone GC opened for its copies too. Live data that fits is never
	// refused for want of a zone while one is open with room.
	shareGC
)

// reserveData is reserve; without share, a file that needs a zone while
// none is free beyond GC's reserve gets errNoFreeZone instead of a share
// of another file's zone.
func (p *placer) reserveData(mru *atomic.Pointer[zone], owner *file, want int64, forGC bool, share shareMode) (grant, error) {
	var g grant
	for attempt := 0; attempt < 1000; attempt++ {
		z := p.pick(mru, forGC)
		if z == nil {
			var err error
			z, err = p.choose(mru, owner, forGC, share)
			if errors.Is(err, errDraining) {
				if g.padZone != nil {
					// The pad is one of the appends a draining zone
					// waits for: the caller submits it, then retries.
					return g, err
				}
				p.waitDrain()
				attempt-- // waiting is progress, not a failed attempt
				continue
			}
			if err != nil {
				return g, err
			}
		}
		// Announce the reservation before checking the state: GC marks a
		// victim before it checks writers, so one of the two sees the other.
		z.writers.Add(1)
		if z.state.Load() != zoneOpen {
			z.doneWriting(p.idle)
			continue
		}
		off, n, pad, ok := z.claim(want, g.padZone == nil)
		if ok {
			p.unalloc.Add(-n)
		}
		if !ok {
			z.doneWriting(p.idle)
			if pad {
				// A second short tail: claimed here, it was a
				// reservation nobody appended, and its zone never
				// drained (GC then waited for it forever).
				return g, errPadFirst
			}
			p.retire(z)
			continue
		}
		z.lastUse.Store(p.clock.Add(1))
		if z.alloc.Load() >= z.cap {
			p.retire(z)
		}
		if pad {
			// A tail shorter than a record: the caller pads it, and
			// this reservation goes on elsewhere.
			g.padZone, g.padOff = z, off
			continue
		}
		g.z, g.off, g.n = z, off, n
		return g, nil
	}
	return g, errors.New("engine: placement did not converge")
}

// pick is the lock-free fast path: the zone this policy would use without
// choosing a new one, or nil.
func (p *placer) pick(mru *atomic.Pointer[zone], forGC bool) *zone {
	var z *zone
	switch p.policyFor(forGC) {
	case PolicyMRU:
		z = mru.Load()
	case PolicyNone:
		z = p.shared.Load()
	case PolicyRoundRobin:
		return nil
	}
	if z != nil && z.state.Load() == zoneOpen {
		return z
	}
	return nil
}

// choose takes the placement lock and picks a zone with room.
func (p *placer) choose(mru *atomic.Pointer[zone], owner *file, forGC bool, share shareMode) (*zone, error) {
	gcZones := forGC || share == shareGC
	p.mu.Lock()
	defer p.mu.Unlock()
	switch p.policyFor(forGC) {
	case PolicyRoundRobin:
		draining := false
		for len(p.open) < p.budget-p.unfinished && !draining {
			var opened bool
			if opened, draining = p.openFreeLocked(forGC); !opened {
				break
			}
		}
		if len(p.open) == 0 {
			if draining {
				return nil, errDraining
			}
			return nil, ErrNoSpace
		}
		z := p.open[int(p.rr.Add(1))%len(p.open)]
		mru.Store(z)
		return z, nil
	case PolicyNone:
		if z := p.shared.Load(); z != nil && z.state.Load() == zoneOpen {
			return z, nil
		}
		if opened, draining := p.openFreeLocked(forGC); !opened {
			if draining {
				return nil, errDraining
			}
			if z := p.lruLocked(false, false, gcZones); z != nil {
				p.shared.Store(z)
				return z, nil
			}
			return nil, ErrNoSpace
		}
		z := p.open[len(p.open)-1]
		p.shared.Store(z)
		return z, nil
	default:
		if z := mru.Load(); z != nil && z.state.Load() == zoneOpen {
			return z, nil // another writer of this file chose meanwhile
		}
		life := p.lifeOf(owner, forGC)
		if life != LifeNotSet {
			// A hinted file starts where a finished file of its class
			// left room, before it opens a fresh zone (ZenFS's rule:
			// a zone of the same lifetime, else an empty one): the
			// zone's data then dies together, and the open zones'
			// unwritten room stays about one tail per class and
			// writer instead of a tail per open zone.
			if z := p.classTailLocked(life); z != nil {
				return p.takeLocked(z, mru, owner, false, false), nil
			}
		}
		opened, draining := p.openFreeLocked(forGC)
		if opened {
			z := p.open[len(p.open)-1]
			mru.Store(z)
			z.owner.Store(owner)
			z.life.Store(uint32(life))
			return z, nil
		}
		if draining {
			// Wait a moment for a zone of its own rather than share
			// another file's until that one fills.
			return nil, errDraining
		}
		// Share the rest of a zone no file is writing to (the tail of
		// a file done being written), else the least recently used.
		z := p.lruLocked(true, forGC, gcZones)
		if share == shareNot && !forGC && p.dataOpenLocked() < p.budget-p.unfinished && (z == nil || p.policy != PolicyMRU || life != LifeNotSet) {
			// The budget has room, the free zones do not: GC can make
			// one. Sharing instead mixes files, so a file's delete or
			// overwrite no longer empties whole zones (GC pays later).
			// But under mru a finished file's tail is taken first:
			// only a file that shares it fills it, and until then its
			// room counts against the space GC chooses victims in.
			// bench lsm, 1 MiB tables in 4 MiB zones: up to 13 such
			// tails (31-33 MiB of 284) sat open while writers had GC
			// copy zones ~4 MB valid to free one each. (A hinted
			// class's stream zone has no owner and looks finished: it
			// is not taken so.) A hinted file under mru had its own
			// class's tails first (classTailLocked): another class's
			// would mix lifetimes, which GC pays for, so it asks GC
			// too, as hinted's streams do.
			return nil, errNoFreeZone
		}
		busy := z == nil
		if busy {
			z = p.lruLocked(false, forGC, gcZones)
		}
		if z != nil {
			return p.takeLocked(z, mru, owner, busy, !forGC), nil
		}
		return nil, ErrNoSpace
	}
}

// takeLocked makes z, an open zone another file wrote to last, the MRU
// zone of the writer whose pointer is mru (owner, nil for a stream with
// none). busy: that file may still write there; counted: the take is
// for want of a zone (Stats' shared counts), not a class match.
func (p *placer) takeLocked(z *zone, mru *atomic.Pointer[zone], owner *file, busy, counted bool) *zone {
	mru.Store(z)
	prev := z.owner.Swap(owner)
	z.sharedFrom.Store(prev)
	if !busy && prev != nil && prev != owner {
		// A closed file may still write back data dirtied before
		// its close: its next reservation must not land in the
		// tail just handed on, or two files fill one zone.
		prev.mru.CompareAndSwap(z, nil)
	}
	if counted {
		p.sharedMRU.Add(1)
		if busy {
			p.sharedBusy.Add(1)
		}
	}
	return z
}

// lifeOf is the class placement matches zones by for a client file
// under mru: its hint, LifeNotSet for GC, a class stream (owner nil) and
// the other policies.
func (p *placer) lifeOf(owner *file, forGC bool) WriteLife {
	if forGC || owner == nil || p.policy != PolicyMRU {
		return LifeNotSet
	}
	if l := WriteLife(owner.life.Load()); l < numLives {
		return l
	}
	return LifeNotSet
}

// classTailLocked is the open client zone of class life that no file is
// writing to (a finished file's tail) with the least room left, so that
// tails fill and close rather than stay open; nil if none.
func (p *placer) classTailLocked(life WriteLife) *zone {
	var best *zone
	for _, z := range p.open {
		if z.forGC || z.state.Load() != zoneOpen || z.remaining() < minRecord ||
			WriteLife(z.life.Load()) != life || !z.orphan() {
			continue
		}
		if best == nil || z.remaining() < best.remaining() {
			best = z
		}
	}
	return best
}

// policyFor is the policy a reservation follows: GC always keeps its own
// zone, whatever the policy for client data.
func (p *placer) policyFor(forGC bool) Policy {
	if forGC || p.policy == PolicyHinted {
		return PolicyMRU // hinted: its streams are MRU pointers (see stream)
	}
	return p.policy
}

// openFreeLocked moves a free zone to the open set, keeping the GC reserve
// unless forGC. It refuses beyond the open budget; draining reports that
// zones still finishing their appends are all that stand in the way.
func (p *placer) openFreeLocked(forGC bool) (opened, draining bool) {
	budget, keep, open := p.budget, p.gcReserve, p.dataOpenLocked()
	if forGC {
		// GC may open one zone per stream beyond the data budget (the
		// engine keeps them in the device's limits) and take the reserve.
		budget, keep, open = p.budget+p.gcStreams, 0, len(p.open)
	}
	// A zone the device would not finish may hold its resources still:
	// it counts against either budget.
	budget -= p.unfinished
	if open >= budget || len(p.free) <= keep {
		return false, false
	}
	if open+p.drainingLocked() >= budget {
		return false, true
	}
	z := p.free[0]
	p.free = p.free[1:]
	p.nfree.Add(-1)
	if !forGC && len(p.free) < p.lowWater && p.lowFree != nil {
		p.lowFree()
	}
	z.forGC = forGC
	z.state.Store(zoneOpen)
	p.open = append(p.open, z)
	p.opened.Add(1)
	return true, false
}

// dataOpenLocked is the open zones that count against the data budget:
// all but those GC appends its copies to. GC's zones have their own
// places in the device's limits (the engine keeps one per stream), so
// files do not lose one of theirs to them.
func (p *placer) dataOpenLocked() int {
	n := len(p.open)
	for _, z := range p.open {
		if z.forGC {
			n--
		}
	}
	return n
}

// drainingLocked drops the draining zones whose appends have all landed
// (and, for a retiring zone, that the device has finished) and counts the
// rest.
func (p *placer) drainingLocked() int {
	keep := p.draining[:0]
	for _, z := range p.draining {
		if !z.drained() {
			keep = append(keep, z)
		}
	}
	clear(p.draining[len(keep):])
	p.draining = keep
	return len(keep)
}

// waitDrain waits until a draining zone's last append has landed, so
// that choose can open a zone in its place. It submits what the ring holds
// first: those appends may be queued under a plug.
func (p *placer) waitDrain() {
	ch := p.idle.Wait()
	if p.drainedOne() {
		return
	}
	if p.flush != nil {
		p.flush()
	}
	if testHookWaitDrain != nil {
		testHookWaitDrain()
	}
	<-ch
}

// testHookWaitDrain, if set (by tests only), runs as waitDrain is about to
// block.
var testHookWaitDrain func()

// drainedOne reports whether a draining zone has no writers left (or none
// is draining): choose can then make progress.
func (p *placer) drainedOne() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, z := range p.draining {
		if z.drained() {
			return true
		}
	}
	return len(p.draining) == 0
}

// drained reports whether a zone placement took out of the open set no
// longer counts against the budget: its appends have landed, and if one
// failed, the device has finished it.
func (z *zone) drained() bool {
	return z.writers.Load() == 0 && z.state.Load() != zoneRetiring
}

// lruLocked is the least recently used open zone; with orphans, the
// least recently used of those no file is writing to. Zones of GC's
// streams (forGC) and of client data are told apart: GC takes one of its
// own kind if there is one, so that its copies, sorted by temperature,
// and fresh writes mix only when nothing else is open; client data
// takes a GC zone only with gcZones (its last resort, shareGC).
func (p *placer) lruLocked(orphans, forGC, gcZones bool) *zone {
	var best *zone
	for _, z := range p.open {
		if z.state.Load() != zoneOpen || z.remaining() <= 0 || (orphans && !z.orphan()) {
			continue
		}
		if z.forGC && !gcZones {
			// Client data never takes the room of GC's zones: GC opened
			// them from its reserve, and a writer filling them leaves
			// GC a pass it cannot finish, then the next reserve zone
			// to fill, until none is left (bench gc's lifetimes under
			// none/greedy ran out of space so). A writer with no zone
			// runs GC instead, and comes here only if GC reclaimed
			// nothing.
			continue
		}
		if best == nil || best.forGC != forGC && z.forGC == forGC ||
			best.forGC == z.forGC && z.lastUse.Load() < best.lastUse.Load() {
			best = z
		}
	}
	return best
}

// retire takes a zone without room out of the open set.
func (p *placer) retire(z *zone) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if z.state.Load() != zoneOpen || z.remaining() > 0 {
		return
	}
	z.state.Store(zoneFull)
	p.filled.Add(1)
	for i, o := range p.open {
		if o == z {
			p.open = append(p.open[:i], p.open[i+1:]...)
			break
		}
	}
	if z.writers.Load() > 0 {
		p.draining = append(p.draining, z)
	}
}

// takeOffline takes z, found offline, out of placement: a free zone
// leaves the free list and its room the free space; an open one is
// given up (giveUp: it reports true, for the retirer). Left there, the
// next append to it failed, and the fsync with it
// (TestAZoneFoundOfflineLeavesPlacement). It stays full for good (see
// zone.offline).
func (p *placer) takeOffline(z *zone) (retire bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if z.state.Load() != zoneFree {
		return p.giveUpLocked(z, true)
	}
	if i := slices.Index(p.free, z); i >= 0 {
		p.free = slices.Delete(p.free, i, i+1)
		p.nfree.Add(-1)
		p.unalloc.Add(-max(0, z.cap-z.alloc.Swap(z.cap)))
		z.state.Store(zoneFull)
	}
	return false
}

// idleOpen is the open zones GC may seal (see collector.sealIdle): no
// append in flight, and at least minGCGain of what they hold garbage.
func (p *placer) idleOpen() []*zone {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*zone
	for _, z := range p.open {
		if z.state.Load() != zoneOpen || z.writers.Load() > 0 || z.offline.Load() {
			continue
		}
		if valid := z.valid.Load(); z.alloc.Load()-valid >= minGCGain {
			out = append(out, z)
		}
	}
	return out
}

// seal takes an open zone that no append is in flight to out of the
// open set, for GC to collect. It reports false, changing nothing, if
// the zone is not open, a reservation has announced itself there, or
// its reservations no longer end at alloc, where GC looked at it
// (collector.collectSealedSoon: it looks first, and seals only a zone
// worth collecting as it looked).
// Placement announces a reservation (writers) before it checks the
// state, and seal changes the state before it checks writers, so either
// seal sees the reservation and backs off, or the reservation sees the
// zone sealed and goes elsewhere: no append lands in a sealed zone. Under
// mu, so that zoneFailed (which also takes it) sees the zone either open
// or sealed, never a seal that is backed out. The zone stays in the
// device's open and active limits until its finish: it waits among the
// draining zones, as zoneRetiring (drained reports false), and its
// unreserved room leaves the free space at once, so that admission does
// not count on it. unseal undoes it; finishSealed completes it.
func (p *placer) seal(z *zone, alloc int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if z.state.Load() != zoneOpen || z.writers.Load() > 0 {
		return false
	}
	z.state.Store(zoneRetiring)
	// No reservation can claim room past here: one that looked at the
	// state before the store announced itself first.
	if z.writers.Load() > 0 || z.alloc.Load() != alloc {
		z.state.Store(zoneOpen)
		return false
	}
	p.open = slices.DeleteFunc(p.open, func(o *zone) bool { return o == z })
	p.draining = append(p.draining, z)
	p.unalloc.Add(-max(0, z.remaining()))
	return true
}

// unseal returns a sealed zone, not yet finished, to the open set. It
// leaves the draining zones, so it wakes the writers waitDrain holds for
// them, as finishSealed does: no completion may ever come to do it.
func (p *placer) unseal(z *zone) {
	p.mu.Lock()
	p.draining = slices.DeleteFunc(p.draining, func(o *zone) bool { return o == z })
	p.open = append(p.open, z)
	p.unalloc.Add(max(0, z.remaining()))
	z.state.Store(zoneOpen)
	p.mu.Unlock()
	p.idle.Signal() // placement may take it again
}

// finishSealed records that a sealed zone is finished on the device: it
// holds no room any more, and no longer counts against the open budget.
// It stays with GC (zoneGC), its victim.
func (p *placer) finishSealed(z *zone) {
	p.mu.Lock()
	z.alloc.Store(z.cap)
	z.state.Store(zoneGC)
	p.filled.Add(1)
	// Out of the draining list now, not when drainingLocked next looks:
	// reset and opened again, it would count twice against the budget.
	p.draining = slices.DeleteFunc(p.draining, func(o *zone) bool { return o == z })
	p.mu.Unlock()
	p.idle.Signal() // placement may open a zone in its place
}

// freeZone returns a reset zone to the pool.
func (p *placer) freeZone(z *zone) {
	p.mu.Lock()
	defer p.mu.Unlock()
	z.alloc.Store(0)
	z.valid.Store(0)
	z.lastSeq.Store(0)
	z.gen.Add(1)
	z.forGC = false
	z.owner.Store(nil)
	z.life.Store(uint32(LifeNotSet))
	z.sharedFrom.Store(nil)
	z.resetPending.Store(false)
	if z.unfinished {
		// The reset gave the device's resources back.
		z.unfinished = false
		p.unfinished--
	}
	z.tornHeld.Store(false) // and took the torn record with it
	z.state.Store(zoneFree)
	p.free = append(p.free, z)
	p.nfree.Add(1)
	p.unalloc.Add(z.cap)
}

// space is the bytes appends can still take without GC: open zones'
// remaining room and the free zones, less GC's whole reserve, free or
// not. It takes no lock: every client write asks.
//
// Held back whole, space never falls but by what client appends take: a
// GC pass changes unalloc by what its resets free less what it copies,
// pads and seals, a gain wherever the copies go (its own zones, a client
// zone it shares, an idle client zone it sealed), so what admission
// promised stays. Any finer count promises room GC may take back before
// the reserve is whole again:
//   - the room left in a zone GC took from its reserve: GC's next copies
//     fill it and their victims' resets refill the reserve first; counted
//     (only the free reserve zones were), an fsync met ENOSPC for data
//     admission had accepted (TestH35aBorrowedReserveIsNotPromised), and
//     so even while GC has no victim as the write asks, since a remove
//     gives it one later (TestH36bBorrowedRoomIsGCsEvenWithNoVictim);
//   - the part of the reserve GC has filled: a writer's pass may seal an
//     idle client zone with garbage (sealIdle) and GC with no zone of its
//     own shares a client zone (lruLocked), and those resets too only
//     refill the reserve.
//
// Writeback of admitted data may still take that room as its last
// resort (shareGC); a refused writer's ENOSPC says how much room GC's
// zones hold (reserveTaken).
func (p *placer) space() int64 {
	if len(p.zones) == 0 {
		return 0
	}
	return p.unalloc.Load() - int64(p.gcReserve)*p.zones[0].cap
}

// reserveTaken is how many zones of GC's reserve GC holds (gcReserve
// less the free zones, 0 when the reserve is whole) and the room left in
// the open zones GC took for its copies: room space does not count while
// taken > 0, for ENOSPC reports.
func (p *placer) reserveTaken() (taken int, room int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	taken = max(p.gcReserve-len(p.free), 0)
	for _, z := range p.open {
		if z.forGC && z.state.Load() == zoneOpen {
			room += max(0, z.remaining())
		}
	}
	return taken, room
}

// pads is how many zones may end in a pad block while open: the data
// zones open at once, which the budget bounds, and so do the data zones
// outside GC's reserve. A budget above the zones there are (16 on a
// device of 10 data zones) made admission hold back a pad block for
// zones that cannot exist: on a device whose open zones had a record's
// room left each, every write was refused, the zones never filled, and GC
// (which collects full zones) could not reclaim the garbage in them.
func (p *placer) pads() int64 { return placerPads(p.budget, len(p.zones), p.gcReserve) }

// placerPads is placer.pads for a budget of open zones, data zones and
// GC's reserve.
func placerPads(budget, zones, gcReserve int) int64 {
	return int64(max(min(budget, zones-gcReserve), 0))
}

// zoneCap is the writable bytes of a data zone (at least one block).
func (p *placer) zoneCap() int64 {
	if len(p.zones) == 0 {
		return BlockSize
	}
	return max(p.zones[0].cap, BlockSize)
}

// recount derives unalloc and nfree from the zones, after setup and
// recovery placed them.
func (p *placer) recount() {
	p.mu.Lock()
	defer p.mu.Unlock()
	var n int64
	for _, z := range p.free {
		n += z.cap - z.alloc.Load()
	}
	for _, z := range p.open {
		n += max(0, z.remaining())
	}
	p.unalloc.Store(n)
	p.nfree.Store(int64(len(p.free)))
}

// lacksFreeZone reports whether no zone is free beyond GC's reserve: a
// file needing a zone of its own must wait for GC.
func (p *placer) lacksFreeZone() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free) <= p.gcReserve
}

// validBytes is the bytes files map in the data zones, but for those
// gone offline (offlineBytes): lost, they take no room.
func (p *placer) validBytes() int64 {
	var n int64
	for _, z := range p.zones {
		if !z.offline.Load() {
			n += z.valid.Load()
		}
	}
	return n
}

// offlineBytes counts the data zones found offline, their capacity and
// the bytes files map in them (lost).
func (p *placer) offlineBytes() (zones int, capacity, lost int64) {
	for _, z := range p.zones {
		if z.offline.Load() {
			zones++
			capacity += z.cap
			lost += z.valid.Load()
		}
	}
	return zones, capacity, lost
}

// freeCount is the number of empty zones.
func (p *placer) freeCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free)
}
