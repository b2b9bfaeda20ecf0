package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/zonefold/zonefold/uring"
)

// GCPolicy chooses GC victims.
type GCPolicy int

const (
	// GCGreedy takes the full zone with the least valid data.
	GCGreedy GCPolicy = iota
	// GCCostBenefit maximises (1-u)·age/(1+u): free space gained per
	// byte copied, weighted by how long the zone's data has stayed cold.
	GCCostBenefit
)

func (p GCPolicy) String() string {
	if p == GCCostBenefit {
		return "cost-benefit"
	}
	return "greedy"
}

// ParseGCPolicy reads greedy or cost-benefit.
func ParseGCPolicy(s string) (GCPolicy, error) {
	switch s {
	case "greedy":
		return GCGreedy, nil
	case "cost-benefit":
		return GCCostBenefit, nil
	}
	return 0, fmt.Errorf("engine: unknown GC policy %q (want greedy or cost-benefit)", s)
}

// GCConfig tunes the garbage collector. Watermarks count free zones.
type GCConfig struct {
	Policy GCPolicy
	// Low starts GC when free zones fall below it; High stops it.
	Low, High int
	// Reserve is free zones only GC may take, so it can always run.
	Reserve int
	// Disabled turns background GC off (writers still get GC when space
	// runs out).
	Disabled bool
	// Streams is how many zones GC appends its copies to at once, each
	// one stream of data of one temperature (see collector): 1 or 2. 0
	// chooses 2 where the device has minZonesForGCStreams data zones or
	// more and its open limit leaves room for both beside the data zones
	// asked for (16 by default), else 1. Each stream takes
	// one of the device's open zones, and where Reserve, Low and High are
	// left to their defaults each stream beyond the first adds a zone to
	// them (see forStreams).
	Streams int

	// defaulted records which of Reserve, Low and High fill chose.
	defaulted struct{ reserve, low, high bool }
}

// maxGCStreams bounds GCConfig.Streams: a cold and a hot stream.
const maxGCStreams = 2

// minZonesForGCStreams is the fewest data zones on which the engine
// chooses a second GC stream by itself (GCConfig.Streams 0). A second
// stream adds a zone to GC's reserve and keeps another zone open for GC's
// copies; on a small device those two zones are a large share of the
// space that overwrites near full need, for a gain in WAF that only
// many zones show. From 64 zones on the extra zone is at most 1/64 of
// the space (bench gc's devices have 256).
const minZonesForGCStreams = 64

// metaZonesKept is the open zones the engine keeps for metadata beside
// the data budget and GC's streams: one, since a checkpoint finishes the
// old metadata zone before it writes the next.
const metaZonesKept = 1

// gcStreams is the GC streams an engine keeps: asked (0: choose), for a
// data budget (0: the default 16) on a device whose open limit is limit
// (0: none).
func gcStreams(asked, budget, limit int) int {
	if asked > 0 {
		return min(asked, maxGCStreams)
	}
	if budget <= 0 {
		budget = 16
	}
	if limit > 0 && limit-metaZonesKept-maxGCStreams < budget {
		return 1
	}
	return maxGCStreams
}

func (c *GCConfig) fill() {
	if c.Reserve <= 0 {
		// Two: relocating a victim can need the rest of the GC zone and
		// one more zone before the victim's reset pays the space back.
		c.Reserve = 2
		c.defaulted.reserve = true
	}
	if c.Low <= 0 {
		c.Low = c.Reserve + 2
		c.defaulted.low = true
	}
	if c.High <= c.Low {
		c.High = c.Low + 2
		c.defaulted.high = true
	}
}

// forStreams grows the defaulted reserve and watermarks by a zone per GC
// stream beyond the first. The reserve of two covers one stream: a pass
// may need the rest of its zone and one more before the victim's reset
// pays a zone back. With two streams each may need one more, and the
// room left in the other stream's zone is stranded: two zones taken, one
// given back. With the reserve at two, bench gc's lifetimes under
// none/greedy ran out of space that way (no free zone, every open zone
// full, GC unable to relocate).
func (c *GCConfig) forStreams(streams int) {
	more := max(streams-1, 0)
	if c.defaulted.reserve {
		c.Reserve += more
	}
	if c.defaulted.low {
		c.Low += more
	}
	if c.defaulted.high {
		c.High += more
	}
	c.defaulted.reserve, c.defaulted.low, c.defaulted.high = false, false, false
}

// minGainDiv: GC takes a zone only if at least 1/minGainDiv of it is
// garbage.
const minGainDiv = 16

// collector reclaims zones. One GC pass runs at a time.
//
// GC sorts what it copies by temperature, as f2fs sorts its logs into
// hot, warm and cold: with two streams, the copies of hot files go to one
// zone and those of cold files to another, and neither is shared with
// fresh writes. A file is hot while its bytes are overwritten more often
// than the average live byte: its client writes per byte since it was
// born exceed the host writes since then per live byte. Hot copies die
// again soon, so their zones empty with little more copying; cold copies
// stay valid together, and their zones are seldom worth collecting. One
// stream mixes the two: every zone GC writes is then partly hot, emptied
// by the hot data's overwrites, and collected again and again for the
// cold data in it.
type collector struct {
	e    *Engine
	mu   sync.Mutex // one pass at a time
	kick chan struct{}
	// streams are the zones GC appends to, by stream: coldStream, and
	// hotStream where the engine keeps two.
	streams [maxGCStreams]atomic.Pointer[zone]
	buf     *scanBuf
	w       *uring.Waiter
	kept    []extent // scratch for appendFile
	// logged are zones whose data is relocated and durable and whose
	// resets are logged, waiting for a device flush to make the records
	// durable before they are reset (see settle); loggedT is the flush
	// ticket that covers their records. Under mu.
	logged  []*zone
	loggedT uint64
	// sums are the block checksums of the pieces validPieces found,
	// copied from their records' headers.
	sums []uint32
	// unsettled is a file whose truncate's unsettled tail made the pass
	// running skip a victim (errTailUnsettled), nil if none: a writer
	// being admitted may wait for it (see Engine.admitTails). Set under
	// mu, reset by passIf.
	unsettled *file
	// failures is the run of failed passes being logged; under mu.
	failures gcFailures
	// victimFails counts victimFailed calls; under mu.
	victimFails int64
	// passSeq numbers the victim rounds of passLocked (zone.triedIn);
	// under mu. It moves on when such a pass starts and when it ends: it
	// is odd while victims are being taken, and pick outside that (even)
	// leaves no zone out.
	passSeq uint64
	// passes counts passes run, the clock of retryFinish's backoff;
	// under mu.
	passes uint64
	// unfinished is retryFinish's scratch; under mu.
	unfinished []*zone
	// gaveBack: the pass reported progress only for a place in the
	// budget retryFinish gave back, not a zone it reset (passEnded);
	// under mu.
	gaveBack bool
}

// maxFinishBackoff bounds the passes retryFinish waits before it asks
// the device again to finish a zone it refused.
const maxFinishBackoff = 32

// retryFinish asks the device again to finish the zones it refused to
// (zone.unfinished: retire, or recovery's settleZone), each after a
// backoff in passes that doubles with each refusal, and gives a zone's
// place in the budget back once the device no longer counts it active.
// Until then only a reset gave it back, and GC does not pick a zone of
// mostly valid data: a few transient refusals on finished tails left no
// zone to open on an empty device
// (TestTransientFinishFailuresDoNotStarveBudget). The backoff is skipped
// while unfinished zones take the whole budget: no zone can be opened
// then. Called with c.mu held; it reports whether a zone was given back.
func (c *collector) retryFinish() bool {
	e := c.e
	p := &e.placer
	c.passes++
	p.mu.Lock()
	starved := p.unfinished >= p.budget
	c.unfinished = c.unfinished[:0]
	if p.unfinished > 0 {
		for _, z := range p.zones {
			if z.unfinished && (starved || c.passes >= z.finishRetry) {
				c.unfinished = append(c.unfinished, z)
			}
		}
	}
	p.mu.Unlock()
	if len(c.unfinished) == 0 || e.readOnly {
		return false
	}
	held := false
	for _, z := range c.unfinished {
		// Due by its own backoff even when starved: a checkpoint that
		// keeps failing is not tried on every pass.
		held = held || z.tornHeld.Load() && c.passes >= z.finishRetry
	}
	if held {
		// A torn zone recovery left active for want of a checkpoint
		// is finished only once one numbers its torn record below
		// itself (zone.tornHeld): finished first, a crash left the
		// record below a full zone's write pointer for the next
		// recovery to replay (TestH17cTornZoneNotFinishedByGCBeforeCheckpoint).
		e.nsMu.RLock()
		err := e.checkpoint()
		e.nsMu.RUnlock()
		if err != nil {
			e.log.Debug("engine: checkpoint before finishing torn zones", "err", err)
		} else {
			for _, z := range c.unfinished {
				z.tornHeld.Store(false)
			}
		}
	}
	freed := false
	for _, z := range c.unfinished {
		if z.tornHeld.Load() {
			z.finishBackoff = min(max(2*z.finishBackoff, 1), maxFinishBackoff)
			z.finishRetry = c.passes + z.finishBackoff
			continue
		}
		// Only GC resets a zone, under c.mu: z stays full and
		// unfinished while it is asked.
		if err := e.dev.FinishZone(z.idx); err != nil && e.zoneMayBeActive(z) {
			e.stats.finishErrs.Add(1)
			z.finishBackoff = min(max(2*z.finishBackoff, 1), maxFinishBackoff)
			z.finishRetry = c.passes + z.finishBackoff
			e.log.Debug("engine: finish an unfinished zone again", "zone", z.idx, "err", err, "next_in_passes", z.finishBackoff)
			continue
		}
		p.mu.Lock()
		if z.unfinished {
			z.unfinished = false
			p.unfinished--
			freed = true
		}
		p.mu.Unlock()
		z.finishBackoff, z.finishRetry = 0, 0
	}
	if freed {
		e.idle.Signal() // placement may open a zone in its place
	}
	return freed
}

// The GC streams.
const (
	coldStream = 0
	hotStream  = 1
)

// stream is the GC stream for a file's copies, given the host bytes
// written so far and the bytes files map.
func (c *collector) stream(f *file, host, live int64) int {
	if c.e.placer.gcStreams < 2 || live <= 0 {
		return coldStream
	}
	f.mu.RLock()
	size := f.size
	f.mu.RUnlock()
	// Hot: written/size > (host-born)/live, cross-multiplied in floats
	// (the products overflow int64 on large devices).
	if size > 0 && float64(f.written.Load())*float64(live) > float64(host-f.born)*float64(size) {
		return hotStream
	}
	return coldStream
}

// gcBatch counts a relocation's appends.
type gcBatch struct {
	wg  sync.WaitGroup
	err atomic.Pointer[error]
}

func (b *gcBatch) done(err error) {
	if err != nil {
		b.err.CompareAndSwap(nil, &err)
	}
	b.wg.Done()
}

func newCollector(e *Engine) *collector {
	return &collector{e: e, kick: make(chan struct{}, 1), w: uring.NewWaiter()}
}

// run collects in the background while free zones are below the low
// watermark. After a failed pass it backs off (gcBackoff): on a device
// whose writes all fail, every pass fails, and retrying at once spun a CPU
// and logged a warning thousands of times a second. Wakeups during the
// backoff (ticks, kicks) are skipped: the device failed the last pass,
// and a kick says only that space is short, not that the device works.
func (c *collector) run(ctx context.Context) {
	t := time.NewTicker(gcTick)
	defer t.Stop()
	var b gcBackoff
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.kick:
		case <-t.C:
		}
		if c.e.cfg.GC.Disabled || c.e.placer.freeCount() >= c.e.cfg.GC.Low || b.waiting(time.Now()) {
			continue
		}
		for c.e.placer.freeCount() < c.e.cfg.GC.High && ctx.Err() == nil {
			moved, err := c.pass(gcBackground)
			if err != nil {
				b.failed(time.Now())
				break
			}
			if !moved {
				break
			}
			b = gcBackoff{}
		}
	}
}

// kickGC wakes the background collector without waiting; a kick already
// pending covers this one.
func (e *Engine) kickGC() {
	select {
	case e.gc.kick <- struct{}{}:
	default:
	}
}

// gcTick is how often the background collector looks at the free zones
// without a kick (placement kicks it when it opens a zone below GC.Low:
// placer.lowFree). A variable for tests.
var gcTick = 100 * time.Millisecond

// The background collector's backoff after a failed pass: it starts at
// gcBackoffMin and doubles with each failure, up to gcBackoffMax. Waits
// shorter than the collector's tick last until the next tick.
const (
	gcBackoffMin = 5 * time.Millisecond
	gcBackoffMax = time.Second
)

// gcBackoff is the background collector's wait after failed passes. A
// pass that reclaims a zone ends it (a pass that moves nothing may have
// written nothing, and proves nothing about the device).
type gcBackoff struct {
	wait  time.Duration // the last wait; 0: no failure since a pass worked
	until time.Time     // no background pass before then
}

// failed starts the next, longer wait at now.
func (b *gcBackoff) failed(now time.Time) {
	b.wait = min(max(2*b.wait, gcBackoffMin), gcBackoffMax)
	b.until = now.Add(b.wait)
}

// waiting reports whether a pass must wait still at now.
func (b *gcBackoff) waiting(now time.Time) bool {
	return now.Before(b.until)
}

// gcFailures keeps GC's log to one WARN per run of failed passes (as
// writeback's episode does): the first failure warns, the next log at
// debug level, and the first pass that reclaims a zone after them ends
// the run with an info line counting them. Guarded by collector.mu.
type gcFailures struct {
	n int64
}

func (f *gcFailures) failed(err error) {
	if f.n++; f.n == 1 {
		slog.Warn("engine: gc pass failed (further failures are logged at debug level until a pass succeeds)", "err", err)
		return
	}
	slog.Debug("engine: gc pass failed again", "err", err, "failures", f.n)
}

// reclaimed ends a run of failures: a pass reclaimed a zone.
func (f *gcFailures) reclaimed() {
	if f.n > 0 {
		slog.Info("engine: gc passes succeed again", "failures", f.n)
		f.n = 0
	}
}

// reclaimFor runs one GC pass for a writer that found no space. It reports
// whether a zone was reclaimed with a net gain of space; false means GC
// can free nothing more, or, with the pass's error, that the device
// failed the pass: the writer then reports that error, not a full
// device. A writer short of space takes any zone whose
// reclaim gains space, however little garbage it holds. need, if set, is
// asked again once the pass holds the collector: a writer queued behind
// other writers' passes may find its room made meanwhile, and then nothing
// is collected for it (reclaimFor reports true: it looks again). Collecting
// anyway took victims before overwrites had emptied them, which costs
// copies: WAF. minGain is the least net space a victim's reclaim must
// free to be taken: minGCGain for writeback of data already admitted,
// admitGain for admission (see there).
//
// It also returns, when it reclaimed nothing and failed nothing, a file
// whose truncate's unsettled tail made the pass skip a victim (nil if
// none). A pass that reclaimed a zone and then
// failed (another zone's reset) reports the zone, not the error, which
// passEnded has counted and logged: the writer looks for its room again.
func (c *collector) reclaimFor(need func() bool, minGain int64) (bool, *file, error) {
	moved, unsettled, err := c.passIf(need, gcUrgent, minGain)
	switch {
	case moved:
		return true, nil, nil
	case err != nil:
		return false, nil, err
	}
	return false, unsettled, nil
}

// reclaimTake is reclaimFor for admission: take reserves the writer's
// charge if there is room for it (and gives it back if not), and is
// called under the collector, before the pass (the writer's room may
// have been made while it queued: then nothing is collected, as
// reclaimFor's need says) and after a pass that reclaimed a zone, so
// that the room the pass made is the writer's that ran it. A writer
// that looked for its room only once it had left the collector found it
// taken by writers admitted meanwhile without queueing, and queued
// again behind every other writer's pass: under fio at iodepth 512 on a
// device 89% full, admissions of 1 MiB writes that took over a second
// had gone back to the collector 6-30 times, while no 4 KiB write's
// admission took a second (TestH37cPassersKeepTheRoomTheyMade). taken
// says the charge is reserved; moved, unsettled and err are
// reclaimFor's (a pass that reclaimed a zone whose room is still short
// of the charge, a pass's gain being less than a large write's or
// refilling GC's reserve first, reports moved: the writer looks again).
func (c *collector) reclaimTake(take func() bool, minGain int64) (taken, moved bool, unsettled *file, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if take() {
		return true, true, nil, nil
	}
	c.unsettled = nil
	moved, err = c.passLocked(gcUrgent, minGain)
	c.passEnded(moved, err)
	unsettled = c.unsettled
	c.unsettled = nil
	switch {
	case moved:
		return take(), true, nil, nil
	case err != nil:
		return false, false, nil, err
	}
	return false, false, unsettled, nil
}

// GC passes by how much garbage a victim must hold (see pick): the
// divisor of the zone's capacity that its garbage must reach.
const (
	// gcUrgent: a writer short of space takes any zone whose reclaim
	// gains space.
	gcUrgent = 0
	// gcBackground: background GC takes a zone at least 1/minGainDiv
	// garbage.
	gcBackground = minGainDiv
	// gcOwnZone: a writer that could share a zone but would rather have
	// its own (freeZone), while more files are open than zones may be,
	// takes only a zone at least half garbage. Files share then anyway,
	// and a zone of its own is worth a cheap copy, not an expensive
	// one: on a device near full, passes for files writing a few
	// scattered blocks copied zones ~90% valid, and the zones they
	// opened held free room only their owner used, so GC ran more
	// still; mru's WAF was 1.5x none's
	// (TestMRUOwnZoneGCNotCostlierThanSharing). With a zone for each
	// file (TestMRUFilesWaitForGCRatherThanShare), files keep waiting
	// for GC rather than share.
	gcOwnZone = ownZoneGainDiv
)

// ownZoneGainDiv: a pass to give a writer a zone of its own takes a
// victim only if at least 1/ownZoneGainDiv of it is garbage.
const ownZoneGainDiv = 2

// passCandidates bounds the victims one pick offers: each costs a walk
// of the zone's record headers. A pass picks again only after a victim
// the device failed (passLocked).
const passCandidates = 4

// pass reclaims one victim zone: relocate its valid data, make that
// durable, log the reset, then reset it. It reports whether it reclaimed
// a zone; it never reports progress it did not make (a pass that says
// it moved nothing is how writers learn the device is full).
func (c *collector) pass(gainDiv int64) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	moved, err := c.passLocked(gainDiv, minGCGain)
	c.passEnded(moved, err)
	return moved, err
}

// passEnded counts and logs a pass that failed (Stats.GCFailed,
// gcFailures), and ends a run of failures with one that reclaimed a
// zone. Called with c.mu held.
func (c *collector) passEnded(moved bool, err error) {
	gaveBack := c.gaveBack
	c.gaveBack = false
	if err != nil {
		c.e.stats.gcFailed.Add(1)
		c.failures.failed(err)
	} else if moved && !gaveBack {
		c.failures.reclaimed()
	}
}

// passIf is pass, unless need (if set) says, once the collector is held,
// that the caller's room was made meanwhile: then it collects nothing and
// reports true, for the caller to look again (its room is there: no
// progress is claimed that a full device would need).
// It also returns a file whose truncate's unsettled tail made the pass
// skip a victim (collector.unsettled).
func (c *collector) passIf(need func() bool, gainDiv, minGain int64) (bool, *file, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if need != nil && !need() {
		return true, nil, nil
	}
	c.unsettled = nil
	moved, err := c.passLocked(gainDiv, minGain)
	c.passEnded(moved, err)
	u := c.unsettled
	c.unsettled = nil
	return moved, u, err
}

// freeZone runs a pass for a file that wants a zone of its own while
// none is free (need says whether that is still so once the pass holds
// the collector). It is not urgent: the file can share a zone instead, so
// it takes only victims background GC would; and where more files are
// open than zones may be (files must share anyway), only victims at
// least half garbage (gcOwnZone). It reports whether a zone was freed
// (or need no longer holds).
func (c *collector) freeZone(need func() bool) bool {
	div := int64(gcBackground)
	if c.e.writersOverBudget() {
		div = gcOwnZone
	}
	moved, _, err := c.passIf(need, div, minGCGain)
	if err != nil {
		return false
	}
	return moved
}

// passLocked is pass with the collector held; a victim must free at
// least minGain net of its copy. Full zones that hold no valid data go
// first, all of them at once (resetEmpty): they cost no copy, and their
// resets share one device flush.
func (c *collector) passLocked(gainDiv, minGain int64) (bool, error) {
	// A victim the device fails (a read of a damaged zone, a copy's
	// append, a reset) is left full and the next one tried: the error is
	// the pass's only if no other victim frees a zone. A pass that
	// stopped at it failed every writer short of space on a zone that
	// kept failing, which the policy (or resetEmpty, for an empty zone
	// that refuses its reset) takes first every time.
	//
	// Resets an earlier pass logged that a flush has covered since free
	// their zones at no cost.
	ok, victimErr := c.settle(false)
	if ok {
		return ok, victimErr
	}
	if c.retryFinish() {
		// A place in the budget is what a writer short of zones
		// needed; it looks again. No zone was reset: passEnded does
		// not count it as one reclaimed.
		c.gaveBack = true
		return true, victimErr
	}
	ok, err := c.resetEmpty()
	if ok {
		return ok, err
	}
	if victimErr == nil {
		victimErr = err
	}
	// Victims the device failed are left out of pick for a while
	// (victimFailed): if any failed, the pass picks again, so that
	// failing zones, however many rank first, do not hide every other
	// candidate. A pass considers each zone at most once (pick leaves
	// out those this pass took, tried), so every round takes a zone
	// not taken before and the rounds are bounded by the zones: a
	// fixed bound (4 rounds, 16 victims) failed a writer with EIO
	// while a later candidate could free its room
	// (TestGCPassTriesEveryCandidateBeforeEIO).
	c.passSeq++
	defer func() { c.passSeq++ }()
	for {
		failed := c.victimFails
		cands := c.pick(gainDiv, minGain)
		for _, victim := range cands {
			victim.triedIn = c.passSeq
			// Mark first, then look for writers (placement announces a
			// writer first, then looks at the state): a zone still being
			// appended to is left for a later pass; the next candidate is
			// tried instead.
			if !victim.state.CompareAndSwap(zoneFull, zoneGC) {
				continue
			}
			if victim.writers.Load() > 0 {
				victim.state.Store(zoneFull)
				continue
			}
			ok, err := c.collectSoon(victim, minGain)
			if ok {
				return ok, err
			}
			if err != nil {
				if victimErr == nil {
					victimErr = err
				}
				continue
			}
			// Not reclaimed, or only its reset logged (resetSoon): the
			// next candidate's relocation flush settles it. So the first
			// pass after an idle spell copies two victims to free one
			// (the second stays logged for the next flush, anyone's);
			// from then on each pass copies one and flushes once.
		}
		if len(cands) == 0 || c.victimFails == failed {
			break
		}
	}
	if len(c.logged) > 0 {
		// A victim's reset is logged and no later copy covered it:
		// a flush of its own frees it (a pass reports only a zone it
		// freed).
		ok, err := c.settle(true)
		if ok {
			return ok, err
		}
		return false, errors.Join(victimErr, err)
	}
	if gainDiv == gcUrgent {
		ok, err := c.sealIdle(minGain)
		if ok {
			return ok, err
		}
		return false, errors.Join(victimErr, err)
	}
	return false, victimErr
}

// sealIdle is a writer's last resort when no full zone's reclaim gains
// space: the garbage left may sit in zones still open, which fill only
// as their files write again (a file removed, a store's finished table,
// GC's own stream between passes), and a device whose free room is all
// there refused every write for good. It seals an open zone that no
// append is in flight to, most garbage first: takes it out of the open
// set, finishes it on the device (its unwritten rest, free room until
// then, is given up) and collects it like a full zone. Only a zone whose
// copy and headers take less than it holds, by minGCGain (by minGain,
// for a writer being admitted: its garbage, alloc less valid, is looked
// at first), is sealed: the reset then gives back more than the finish
// gave up. A zone with appends in flight is skipped, not waited for, as
// pick skips full ones.
func (c *collector) sealIdle(minGain int64) (bool, error) {
	cands := c.e.placer.idleOpen()
	sort.Slice(cands, func(i, j int) bool {
		return cands[i].alloc.Load()-cands[i].valid.Load() > cands[j].alloc.Load()-cands[j].valid.Load()
	})
	// A zone the device fails is left (victimFailed) and the next one
	// tried, as passLocked does with full victims: the error is
	// sealIdle's only if no other zone frees room.
	var zoneErr error
	tried := 0
	wall := time.Now()
	for _, z := range cands {
		if tried == passCandidates {
			break
		}
		if valid := z.valid.Load(); z.barren(valid) || z.short(valid, minGain) || z.alloc.Load()-valid < minGain || z.failedLately(wall) {
			continue
		}
		tried++
		logged := len(c.logged)
		ok, err := c.collectSealedSoon(z, minGain)
		if ok {
			return ok, err
		}
		if err != nil {
			if zoneErr == nil {
				zoneErr = err
			}
			continue
		}
		if len(c.logged) > logged {
			// Sealed and its reset logged: its own flush frees it.
			// Sealing another would give up that zone's unwritten
			// room too, for nothing this pass needs (review).
			break
		}
	}
	ok, err := c.settle(true) // a sealed zone's reset logged (see passLocked)
	if ok {
		return ok, err
	}
	return false, errors.Join(zoneErr, err)
}

// collectSealedSoon seals an idle open zone (see sealIdle), relocates its
// valid data and resets it, or only logs its reset (as collectSoon). It
// reports false, leaving the zone open, if
// the zone took an append meanwhile or relocating would not gain space.
//
// It looks before it seals: the zone's records up to alloc, all landed
// (no writers after alloc was read), are walked while the zone stays
// open, and it is sealed only if collecting it gains space and it took
// no append since (seal checks alloc). A zone sealed first and given
// back after the walk was out of placement, its room out of the free
// space, for the whole walk: on a full device, writeback of admitted
// data that looked for room then found none, after its own passes had
// found nothing to collect, and failed with ENOSPC (the walks of other
// writers' passes sealed the last open zone with room over and over:
// TestH35aSealLookKeepsRoomPlaceable).
func (c *collector) collectSealedSoon(z *zone, minGain int64) (bool, error) {
	e := c.e
	p := &e.placer
	end := z.alloc.Load()
	if z.state.Load() != zoneOpen || z.writers.Load() > 0 {
		return false, nil // an append in flight: left, as by seal
	}
	defer c.running()()
	// Every append below end has landed and is mapped: each announced
	// itself (writers) before it claimed room, and is done.
	var pieces []live
	if valid := z.valid.Load(); valid > 0 {
		gen := z.gen.Load()
		var gain bool
		var err error
		pieces, gain, err = c.gather(z, end, minGain)
		if (err != nil || !gain) && z.alloc.Load() != end {
			// It took an append during the look (which may have met
			// the new record's mapping, not its header): the zone is
			// not as looked at, and nothing is held against it.
			return false, nil
		}
		if err != nil || !gain {
			if err == nil {
				z.markBarren(valid, end, gen)
			} else if errors.Is(err, errGainShort) {
				z.markShort(valid, end, gen, minGain)
			}
			return false, c.failedVictim(z, err)
		}
	}
	if !p.seal(z, end) {
		return false, nil // it took an append: what was gathered is not all
	}
	if err := e.dev.FinishZone(z.idx); err != nil {
		p.unseal(z)
		return false, c.failedVictim(z, fmt.Errorf("engine: gc: finish idle zone %d: %w", z.idx, err))
	}
	p.finishSealed(z)
	e.stats.gcSealed.Add(1)
	if len(pieces) > 0 {
		if err := c.rewrite(z, pieces); err != nil {
			z.state.Store(zoneFull)
			return false, c.failedVictim(z, err)
		}
		return c.resetSoon(z) // rewrite flushed
	}
	return c.reset(z)
}

// collectSealed is collectSealedSoon that frees z itself when it only
// logged z's reset (see resetSoon): it reports whether z was reclaimed.
func (c *collector) collectSealed(z *zone, minGain int64) (bool, error) {
	return c.settleVictim(z)(c.collectSealedSoon(z, minGain))
}

// collect is collectSoon that frees victim itself when it only logged
// victim's reset (see resetSoon): it reports whether victim was
// reclaimed.
func (c *collector) collect(victim *zone, minGain int64) (bool, error) {
	return c.settleVictim(victim)(c.collectSoon(victim, minGain))
}

// settleVictim returns what completes a collection of z whose result is
// ok, err: if z's reset is only logged, it settles it with a flush.
func (c *collector) settleVictim(z *zone) func(bool, error) (bool, error) {
	return func(ok bool, err error) (bool, error) {
		if err != nil || !z.resetPending.Load() {
			return ok, err
		}
		settled, err := c.settle(true)
		return ok || settled, err
	}
}

// errTailUnsettled: a file with data in the victim (or its tail block's
// old bytes, file.tailOld) is in a truncate whose zeros' record is
// numbered and not flushed, or that is being put back (tailUnsettled);
// the victim is left for a later pass.
var errTailUnsettled = errors.New("a file in it is being truncated")

// errGainShort: relocating the victim would gain space, but less than
// the pass asked for (a writer being admitted: see admitGain). The
// victim is left, not marked barren: a pass that asks less (writeback's)
// may still take it. It is marked short (zone.markShort): a pass that
// asks as much skips it until it changes.
var errGainShort = errors.New("reclaiming it frees less than asked")

// collectSoon relocates victim's valid data and resets it, or only logs
// its reset (resetSoon: it then reports whether it freed an earlier
// victim); it reports false, leaving the zone as it was, when relocating
// would not gain space (or not minGain) or a file with data there is in
// a truncate's unsettled window.
func (c *collector) collectSoon(victim *zone, minGain int64) (bool, error) {
	defer c.running()()
	if valid := victim.valid.Load(); valid > 0 {
		gen := victim.gen.Load()
		gain, err := c.relocate(victim, minGain)
		if err != nil {
			if errors.Is(err, errGainShort) {
				victim.markShort(valid, victim.alloc.Load(), gen, minGain)
			}
			victim.state.Store(zoneFull)
			return false, c.failedVictim(victim, err)
		}
		if !gain {
			// Remember it: until the zone loses valid data (or is
			// reset), collecting it gains nothing either (see
			// zone.barrenValid).
			victim.markBarren(valid, victim.alloc.Load(), gen)
			victim.state.Store(zoneFull)
			return false, nil
		}
		return c.resetSoon(victim) // relocate flushed
	}
	return c.reset(victim)
}

// errVictimChanged: a victim still holds valid data when its reset is
// to be logged (logResets): a file mapped data there again while it was
// relocated, in a version the copy did not carry. The way seen: a GC
// copy numbered before a truncate began is still in flight when the
// truncate fails and its undo's rewrites (records without a size) land;
// they map over the victim's extents with undoState.keep, which keeps
// what they replaced counted valid in the victim (undoState.replaced)
// until the undo's commit, and the copy then finds nothing of its
// version to move (TestH42cGCCopyLandingAfterAnUndosRewriteLeavesItsVictim;
// an overwrite landing first unmaps the bytes instead, and the pass
// reclaims the zone).
// Nothing is lost and nothing failed: the zone goes back to full for a
// later pass, as one with a truncate in its unsettled window does, and
// is counted (Stats.GCVictimsChanged), so that a cause that keeps GC
// copying zones it cannot reset shows in stat and the metrics. As a
// pass's error it reached a writer short of space as "GC could not make
// room", which wraps neither EIO nor ENOSPC (the daemon answered EIO).
var errVictimChanged = errors.New("a file mapped data into it again while it was relocated")

// skipped is err, but nil for errTailUnsettled, errGainShort and
// errVictimChanged: the victim was skipped, not failed.
func skipped(err error) error {
	if errors.Is(err, errVictimChanged) {
		slog.Debug("engine: gc: a victim is left for a later pass", "err", err)
		return nil
	}
	if errors.Is(err, errTailUnsettled) || errors.Is(err, errGainShort) {
		return nil
	}
	return err
}

// running counts a pass at work on a victim (GCActive) until the
// function it returns is called, which adds the pass's time and run.
func (c *collector) running() func() {
	st := &c.e.stats
	start := time.Now()
	st.gcActive.Add(1)
	return func() {
		st.gcActive.Add(-1)
		st.gcNanos.Add(int64(time.Since(start)))
		st.gcRuns.Add(1)
	}
}

// maxEmptyResets bounds the empty zones one pass resets (resetEmpty):
// the records of their resets must fit the metadata log between two of
// its flushes, and a pass holds the collector while it runs.
const maxEmptyResets = 64

// resetEmpty resets every full zone that holds no valid data (up to
// maxEmptyResets), their resets logged and made durable by one device
// flush: a table or log removed whole leaves its zones empty, and a
// pass per zone, each waiting for a flush of its own, made writers that
// wanted a free zone queue behind as many flushes as zones (bench lsm:
// a 3 MiB WAL's sync waited 45 ms, most of it in GC passes, against
// 10 ms on a kernel file system). It reports whether it reset any.
func (c *collector) resetEmpty() (bool, error) {
	var victims []*zone
	now := time.Now()
	for _, z := range c.e.placer.zones {
		if len(victims) == maxEmptyResets {
			break
		}
		// A zone whose data GC failed to read or copy lately is taken
		// once it is empty (TestH19aEmptiedFailedVictimIsResetAtOnce):
		// its reset reads nothing, and writers on a device of empty
		// full zones got that old failure or ENOSPC for 10 s and more.
		if z.state.Load() != zoneFull || z.valid.Load() != 0 || z.writers.Load() > 0 || (z.failedLately(now) && z.failedReset) || z.offline.Load() {
			continue
		}
		// Marked first, then the writers looked at again (as in
		// passLocked).
		if !z.state.CompareAndSwap(zoneFull, zoneGC) {
			continue
		}
		if z.writers.Load() > 0 || z.valid.Load() != 0 {
			z.state.Store(zoneFull)
			continue
		}
		victims = append(victims, z)
	}
	if len(victims) == 0 {
		return false, nil
	}
	defer c.running()()
	return c.reset(victims...)
}

// reset logs the resets of victims whose valid data is relocated and
// durable, makes them durable by a device flush (one for all of them,
// and for any resets logged earlier and not yet settled), resets them and
// returns them to the free pool. It fails, leaving the zones full, if
// the log or its flush fails; it leaves them full with no error if
// anything is still mapped in one (errVictimChanged); a zone
// whose reset on the device fails stays full, and the others are reset.
func (c *collector) reset(victims ...*zone) (bool, error) {
	if err := c.logResets(victims); err != nil {
		return false, skipped(err)
	}
	return c.settle(true)
}

// resetSoon is reset for a victim whose copies the caller just made
// durable with a device flush: that flush made the resets logged before
// it durable too, so those zones are reset and freed now (it reports
// whether it freed any), and victim's reset is only logged, for a later
// flush to cover: the next victim's relocation flush, anyone's (a file's
// sync, a checkpoint: passLocked looks first), or one of its own at the
// end of a pass that freed nothing else. A copying pass then costs one
// device flush, not two: writers that wanted a free zone queued behind
// both (bench lsm: a WAL's sync at rotation waited for passes, 20-40 ms
// against 10 ms on a kernel file system). The order a crash needs holds:
// each reset record is written after the flush that made its zone's
// copies durable, and the zone is reset only after a flush made the
// record durable.
func (c *collector) resetSoon(victim *zone) (bool, error) {
	// The victim is logged even when settling an earlier one failed (a
	// zone's reset on the device): it is relocated and nothing else
	// would pick it again, so unlogged it stayed in zoneGC until a
	// restart (review).
	settled, serr := c.settle(false)
	if err := c.logResets([]*zone{victim}); err != nil {
		return settled, errors.Join(serr, skipped(err))
	}
	return settled, serr
}

// logResets logs the resets of victims, whose valid data is relocated
// and durable, and adds them to the zones waiting for a flush (logged).
// It fails, leaving them full, if anything is still mapped in one
// (errVictimChanged, which callers skip) or the log fails. Caller holds
// mu.
func (c *collector) logResets(victims []*zone) error {
	e := c.e
	for i, victim := range victims {
		if v := victim.valid.Load(); v != 0 {
			restoreFull(victims)
			e.stats.gcVictimsChanged.Add(1)
			return fmt.Errorf("engine: gc: zone %d still holds %d valid bytes after relocation: %w", victims[i].idx, v, errVictimChanged)
		}
	}
	// The resets are decided: a checkpoint from now on records the zones
	// as empty, and the logged resets tell a recovery from an older one
	// to scan them from their start. Both are durable before the resets
	// (settle). The records are written under nsMu (a checkpoint sees a
	// still namespace); their flush waits without it, so creates and
	// removes, which need nsMu exclusively, do not wait for GC's flush.
	t := c.loggedT
	for _, victim := range victims {
		victim.resetPending.Store(true)
		e.nsMu.RLock()
		vt, err := e.writeOp(nsOp{kind: opZoneReset, zone: victim.idx}, false)
		e.nsMu.RUnlock()
		if err != nil {
			// The records written may land: harmless, the zones hold
			// nothing valid, and are reset by a later pass. Every
			// victim goes back to full, those after i too: marked
			// zoneGC and in no list, nothing would pick them again
			// (TestGCBacksOffWhileWritesFail: a device failing writes
			// left resetEmpty's zones with GC for good, and GC stopped
			// short of its low watermark once writes worked).
			restoreFull(victims)
			return err
		}
		t = max(t, vt)
	}
	c.logged = append(c.logged, victims...)
	c.loggedT = t
	return nil
}

// restoreFull puts zones whose reset was decided back to full.
func restoreFull(zs []*zone) {
	for _, z := range zs {
		z.resetPending.Store(false)
		z.state.Store(zoneFull)
	}
}

// settle resets the zones whose resets are logged (logged) once a device
// flush made their records durable, and returns them to the free pool.
// If no flush since covers them, it runs one when force is set, and
// otherwise leaves them. It reports whether it reset any. Caller holds
// mu.
func (c *collector) settle(force bool) (bool, error) {
	if len(c.logged) == 0 {
		return false, nil
	}
	e := c.e
	victims := c.logged
	if !e.flushes.covered(c.loggedT) {
		if !force {
			return false, nil
		}
		// A failed append's or operation's record is superseded first:
		// this flush would make it durable as well as an fsync's would
		// (settleStray).
		err := e.settleStray()
		if err == nil {
			if err = e.flushes.flushFor(context.Background(), e.dev, c.loggedT); err != nil {
				err = fmt.Errorf("flush: %w", err)
			}
		}
		if err != nil {
			restoreFull(victims)
			c.logged, c.loggedT = c.logged[:0], 0
			return false, fmt.Errorf("engine: gc: log the reset of zone %d and %d more: %w", victims[0].idx, len(victims)-1, err)
		}
	}
	var reset bool
	var resetErr error
	for _, victim := range victims {
		e.waitUntil(func() bool { return victim.readers.Load() == 0 })
		if err := e.dev.ResetZone(victim.idx); err != nil {
			victim.state.Store(zoneFull)
			err = fmt.Errorf("engine: gc: reset zone %d: %w", victim.idx, err)
			c.resetFailed(victim, err)
			resetErr = errors.Join(resetErr, err)
			continue
		}
		victim.failWarned, victim.failWait, victim.failErr, victim.failedReset = false, 0, nil, false
		e.stats.gcResets.Add(1)
		e.placer.freeZone(victim)
		reset = true
	}
	clear(c.logged)
	c.logged, c.loggedT = c.logged[:0], 0
	return reset, resetErr
}

// victimRetryWait is how long GC leaves a zone whose collection the
// device failed (a read or copy of its data, its finish, its reset)
// before it takes the zone again: a zone gone read-only refuses every
// reset, and taking it first in every pass cost each pass a logged reset
// and a device flush for nothing; a zone whose reads fail (media damage)
// is ranked first again every pass, and passCandidates of them hid every
// other victim, so writers on a full device failed for good
// (TestGCVictimsThatFailReadsDoNotHideOthers).
const victimRetryWait = 10 * time.Second

// victimRetryMax bounds the wait victimFailed doubles for each failure
// of the same zone in a row: a zone that refuses every reset (gone
// read-only) cost a logged reset record and a device flush every
// victimRetryWait for as long as free zones stayed below GC.Low.
const victimRetryMax = 5 * time.Minute

// resetFailed is victimFailed for a failure of z's reset: resetEmpty
// leaves it too until its wait is over. Caller holds collector.mu.
func (c *collector) resetFailed(z *zone, err error) {
	c.victimFailed(z, err)
	z.failedReset = true
}

// failedLately reports whether GC's last collection of z failed less
// than victimRetryWait before now. Caller holds collector.mu.
func (z *zone) failedLately(now time.Time) bool {
	return now.Before(z.retryAt)
}

// victimFailed leaves z, a victim the device failed with err, to a pass
// victimRetryWait from now, twice as long for each failure of it in a
// row up to victimRetryMax (pick, resetEmpty and sealIdle skip it), and
// counts and logs the failure even if the pass goes on to reclaim
// another victim: the first failure of a zone warns, later ones (until
// it is reset) log at debug level. Caller holds collector.mu.
func (c *collector) victimFailed(z *zone, err error) {
	z.failedReset = false
	z.failWait = min(max(2*z.failWait, victimRetryWait), victimRetryMax)
	z.retryAt = time.Now().Add(z.failWait)
	z.failErr = err
	c.victimFails++
	c.e.stats.gcVictimsFailed.Add(1)
	if !z.failWarned {
		z.failWarned = true
		slog.Warn("engine: gc: a victim zone failed; it is left for a while and other zones collected (further failures of this zone are logged at debug level)",
			"zone", z.idx, "retry_after", victimRetryWait, "err", err)
		return
	}
	slog.Debug("engine: gc: a victim zone failed again", "zone", z.idx, "err", err)
}

// failingFor returns, if a zone whose collection would free minGain
// bytes or more is left out of pick because the device failed it lately
// (victimFailed), an error that says so and wraps that failure: a writer
// whose pass found nothing else to collect was kept out by the failing
// device, not by a full one, and reports the device's error (EIO) as the
// pass that failed the victim did, not ENOSPC. nil if there is none.
func (c *collector) failingFor(minGain int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	for _, z := range c.e.placer.zones {
		if z.state.Load() == zoneFull && z.failedLately(now) && z.failErr != nil && z.cap-z.valid.Load() >= minGain && !z.offline.Load() {
			return fmt.Errorf("engine: gc: zone %d, whose collection would free %d bytes, failed; retried in %v: %w",
				z.idx, z.cap-z.valid.Load(), z.retryAt.Sub(now).Round(time.Millisecond), z.failErr)
		}
	}
	return nil
}

// failedVictim records a failure err (one skipped returns, so not a
// victim merely skipped) of victim z (victimFailed) and returns it.
func (c *collector) failedVictim(z *zone, err error) error {
	if err = skipped(err); err != nil {
		c.victimFailed(z, err)
	}
	return err
}

// settleAll resets the zones whose resets are logged, flushing if no
// flush covers them yet: Close leaves none pending.
func (c *collector) settleAll() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.settle(true)
	return err
}

// pick chooses up to passCandidates victims among full zones at least
// 1/gainDiv garbage (any gain if gainDiv is 0) and minGain, best first
// by the configured policy, leaving out zones the pass in progress has
// taken already (zone.triedIn). Caller holds c.mu.
func (c *collector) pick(gainDiv, minGain int64) []*zone {
	e := c.e
	now := e.seq.Load()
	type cand struct {
		z     *zone
		score float64
	}
	var cands []cand
	wall := time.Now()
	for _, z := range e.placer.zones {
		if z.state.Load() != zoneFull || z.writers.Load() > 0 || z.failedLately(wall) || c.triedThisPass(z) || z.offline.Load() {
			continue // an offline zone: see zone.offline
		}
		valid := z.valid.Load()
		if z.cap-valid < minGain || z.barren(valid) || z.short(valid, minGain) {
			continue // nothing to gain
		}
		if gainDiv > 0 && z.cap-valid < z.cap/gainDiv {
			// Copying a zone this full frees little for a zone's worth
			// of reads and writes: background GC leaves it, a writer
			// wanting a zone of its own more so. A writer short of
			// space takes it (gcUrgent): while garbage exists, an
			// overwrite must not fail.
			continue
		}
		u := float64(valid) / float64(z.cap)
		var score float64
		switch e.cfg.GC.Policy {
		case GCCostBenefit:
			// The age is the time since the zone last took data: the
			// time over which its garbage, 1-u, accumulated, so that
			// (1-u)/age is how fast it empties. The age of its data (as
			// LFS ages a segment by its youngest block) makes a zone
			// GC has just filled with old cold copies look as if it
			// had stayed full for that long, and cost-benefit then
			// copied such zones again at u near 1: hotcold's WAF
			// went from 2.66 to 3.07-3.15 (mean or youngest data
			// version, raw or normalised as f2fs does).
			age := float64(now - min(now, z.lastSeq.Load()))
			score = (1 - u) * (age + 1) / (1 + u)
		default:
			score = 1 - u
		}
		cands = append(cands, cand{z, score})
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].score > cands[j].score })
	out := make([]*zone, 0, passCandidates)
	for _, cd := range cands[:min(len(cands), passCandidates)] {
		out = append(out, cd.z)
	}
	return out
}

// triedThisPass reports whether the pass taking victims now (passSeq
// odd) has taken z already. Caller holds c.mu.
func (c *collector) triedThisPass(z *zone) bool {
	return c.passSeq%2 == 1 && z.triedIn == c.passSeq
}

// writersOverBudget reports whether more files have handles open than
// the data zones placement may keep open: then not every file can have a
// zone of its own, and some share whatever GC does.
func (e *Engine) writersOverBudget() bool {
	n := 0
	e.idMu.RLock()
	defer e.idMu.RUnlock()
	for _, f := range e.byID {
		if f.handles.Load() > 0 {
			if n++; n > e.placer.budget {
				return true
			}
		}
	}
	return false
}

// minGCGain is the least garbage worth a pass: less cannot pay for the
// headers and pad the relocation itself writes.
const minGCGain = 4 * BlockSize

// live is one valid piece found in a victim.
type live struct {
	file *file
	x    extent
	sum  int // where its blocks' checksums start in the collector's sums
}

// relocate copies the victim's valid extents, sorted by (file, offset),
// into the GC zone as GC records, and waits until they are durable. The
// mapping moves only where it still holds the copied version. It reports
// false, copying nothing, if the copy would take as much space as the
// reset frees: a pass without a net gain is how GC spun without progress
// while writers waited.
func (c *collector) relocate(victim *zone, minGain int64) (bool, error) {
	pieces, gain, err := c.gather(victim, victim.cap, minGain)
	if err != nil || !gain {
		return false, err
	}
	if err := c.rewrite(victim, pieces); err != nil {
		return false, err
	}
	return true, nil
}

// gather finds the victim's valid pieces, sorted by (file, offset), and
// reads their bytes back to back into the scan buffer. gain is false,
// and nothing is read, if copying them would not gain space: if they and
// their headers would take more than room (the zone's capacity, or for a
// zone sealed open, what it holds: its unwritten rest was free already),
// less minGCGain. If they would gain that but less than minGain, err is
// errGainShort.
func (c *collector) gather(victim *zone, room, minGain int64) (pieces []live, gain bool, err error) {
	e := c.e
	if c.buf == nil {
		if c.buf, err = newScanBuf(int(max(e.geo.ZoneCap, 1<<20))); err != nil {
			return nil, false, err
		}
	}
	// Only the records below room for a zone still open (collectSealedSoon
	// looks before it seals): past it, appends may be in flight.
	pieces, err = c.validPieces(victim, min(room, victim.alloc.Load()))
	if err != nil {
		return nil, false, err
	}
	if found := livelen(pieces); found < victim.valid.Load() {
		if e.keepsNoData {
			// The maps say where the live pieces are, but their
			// block sums are in headers the device did not keep.
			return nil, false, fmt.Errorf("engine: gc: zone %d holds %d live bytes: %w", victim.idx, victim.valid.Load(), errNoDataKept)
		}
		// Records the header walk cannot reach: on NVMe, appends that
		// landed past one that failed (torn) in this zone. The maps say
		// where they are.
		pieces = e.mappedIn(victim)
		if err := c.headerSums(victim, pieces); err != nil {
			return nil, false, err
		}
	}
	sort.Slice(pieces, func(i, j int) bool {
		if pieces[i].file.id != pieces[j].file.id {
			return pieces[i].file.id < pieces[j].file.id
		}
		return pieces[i].x.off < pieces[j].x.off
	})
	// Checked again as each record is numbered (appendFile); this spares
	// the copy of the other files' pieces in the common case.
	for i, p := range pieces {
		if i > 0 && p.file == pieces[i-1].file {
			continue
		}
		p.file.mu.RLock()
		busy := p.file.tailUnsettled()
		p.file.mu.RUnlock()
		if busy {
			c.unsettled = p.file
			return nil, false, errTailUnsettled
		}
	}
	// Read them all into the scan buffer (a zone's worth at most).
	var total int64
	var headers int64
	for i, p := range pieces {
		total += p.x.len
		if i == 0 || p.file != pieces[i-1].file {
			headers++ // one record per file at least
		}
	}
	headers += total / e.maxRecordData()
	cost := total + headers*BlockSize
	if cost > room-minGCGain {
		return nil, false, nil
	}
	if cost > room-minGain {
		return nil, false, errGainShort
	}
	if total > int64(len(c.buf.mem)) {
		return nil, false, fmt.Errorf("engine: gc: %d valid bytes exceed the scan buffer", total)
	}
	// One batch: a victim of small overwrites holds hundreds of valid
	// pieces, and reading them one round trip at a time was most of a
	// GC pass. A piece lies within one record, so within a max append.
	offs := make([]int64, len(pieces))
	for i, off := 1, int64(0); i < len(pieces); i++ {
		off += pieces[i-1].x.len
		offs[i] = off
	}
	_, err = e.readBatch(len(pieces), func(i int) (int64, []byte) {
		return pieces[i].x.dev, c.buf.mem[offs[i] : offs[i]+pieces[i].x.len]
	})
	if err != nil {
		return nil, false, fmt.Errorf("engine: gc: read zone %d: %w", victim.idx, err)
	}
	e.stats.gcRead.Add(total)
	return pieces, true, nil
}

// rewrite appends the gathered pieces (their bytes back to back in the
// scan buffer) as GC records, one file per record, each file's to the
// GC stream of its temperature, and waits until they are durable.
func (c *collector) rewrite(victim *zone, pieces []live) error {
	e := c.e
	// Each file's copies go to the stream of its temperature.
	host, live := e.stats.hostWritten.Load(), e.placer.validBytes()
	var b gcBatch
	e.quiesce.RLock()
	e.ring.Plug()
	data := int64(0)
	var werr error
	for i := 0; i < len(pieces) && werr == nil; {
		j := i
		for j < len(pieces) && pieces[j].file == pieces[i].file {
			j++
		}
		werr = c.appendFile(pieces[i:j], c.buf.mem[data:], c.stream(pieces[i].file, host, live), &b)
		for _, p := range pieces[i:j] {
			data += p.x.len
		}
		i = j
	}
	uerr := e.ring.Unplug()
	e.quiesce.RUnlock()
	// Another holder of the ring's plug (the flusher) may keep our
	// appends queued: submit them before waiting.
	if err := e.ring.Flush(); err != nil && uerr == nil {
		uerr = err
	}
	b.wg.Wait()
	if werr == nil {
		werr = uerr
	}
	if p := b.err.Load(); werr == nil && p != nil {
		werr = *p
	}
	if werr != nil {
		return fmt.Errorf("engine: gc: relocate zone %d: %w", victim.idx, werr)
	}
	// The flush that makes the copies durable would make a failed
	// append's record durable too (TestFailedOverwriteKeepsFsyncedBytes
	// "gc"): it is superseded first. The victim keeps its data until a
	// later pass gets this far. It lands nothing held for a pack (only
	// an acknowledging flush does): a deferred create of a file copied
	// here rides on the victim's reset record, and a power cut between
	// leaves the copies as records of a file no durable create names,
	// whose id recovery never hands out again (scanDataZone;
	// TestH44bOrphanRecordFromAGCRelocation).
	if err := e.settledFlush(context.Background()); err != nil {
		return fmt.Errorf("engine: gc: relocate zone %d: %w", victim.idx, err)
	}
	e.stats.gcCopied.Add(1)
	return nil
}

// appendFile writes one file's pieces (their bytes back to back in mem)
// as GC records to a GC stream.
//
// Each record takes its sequence number under the file's lock, and in
// the same hold keeps of every piece only what the file still maps to
// it: a truncate (or an overwrite, or a remove) since gather either came
// first, and the record leaves those bytes out, or comes after, with a
// higher number, and replays after it. Replaying a record that carried
// bytes a truncate had cut before the record's number would bring them
// back when the file grows again. Room the record reserved and no
// longer fills is padded.
func (c *collector) appendFile(pieces []live, mem []byte, stream int, b *gcBatch) error {
	e := c.e
	f := pieces[0].file
	i, used := 0, int64(0) // piece and bytes of it taken
	pos := int64(0)        // bytes of mem taken
	for i < len(pieces) {
		var want int64 = BlockSize
		for j, u := i, used; j < len(pieces) && j-i < MaxRecordExtents && want-BlockSize < e.maxRecordData(); j++ {
			want += pieces[j].x.len - u
			u = 0
		}
		want = min(want, BlockSize+e.maxRecordData())
		g, err := e.placer.reserve(&c.streams[stream], want, true)
		if g.padZone != nil {
			e.appendPad(g.padZone, g.padOff, nil)
		}
		if errors.Is(err, errDraining) || errors.Is(err, errPadFirst) {
			continue // the pad was what a zone waited for, or comes first
		}
		if err != nil {
			return err
		}
		op := e.takeOp()
		op.f, op.z, op.p, op.gc = f, g.z, nil, b
		op.hdr.Kind = KindGC
		op.hdr.File = f.id
		op.hdr.Extents = op.hdr.Extents[:0]
		op.bufs = op.bufs[:0]
		op.hdrI, op.bufs = e.takeHeader(op.bufs)
		op.hdr.Sums = op.hdr.Sums[:0]
		carried := int64(0)
		f.mu.RLock()
		if f.tailUnsettled() {
			// Left for a later pass (see tailUnsettled), as a zone
			// with appends in flight is.
			f.mu.RUnlock()
			e.releaseOp(op)
			e.appendFiller(g.z, g.n, nil)
			c.unsettled = f
			return errTailUnsettled
		}
		op.hdr.Seq = e.seq.Add(1)
		// The file's size, as a data record carries it: once GC resets
		// the zones of a file's data records, its GC records may be all
		// that recovery finds of it after the last checkpoint.
		// A truncate whose tail's zeros are not numbered yet is not
		// in it (carriedSize).
		op.hdr.Size = uint64(f.carriedSize())
		for left := g.n - BlockSize; left > 0 && i < len(pieces); {
			p := pieces[i].x
			n := min(p.len-used, left)
			part := p.clip(p.off+used, p.off+used+n)
			c.kept = c.kept[:0]
			if !f.gone {
				f.ext.lookup(part.off, part.len, func(m extent) {
					if m.ver == part.ver && m.dev == part.dev+(m.off-part.off) {
						c.kept = append(c.kept, m)
					}
				})
			}
			if room := MaxRecordExtents - len(op.hdr.Extents); len(c.kept) > room {
				// The next record takes the rest of the piece.
				if room == 0 {
					break
				}
				c.kept = c.kept[:room]
				n = c.kept[room-1].end() - part.off
			}
			for _, m := range c.kept {
				src := mem[pos+(m.off-part.off) : pos+(m.off-part.off)+m.len]
				op.hdr.Extents = append(op.hdr.Extents, RecordExtent{FileOff: m.off, Len: uint32(m.len), Version: m.ver})
				op.bufs = append(op.bufs, src)
				// The sums the bytes were written with, not new ones:
				// a block that went bad stays detectably bad.
				first := pieces[i].sum + int((m.off-p.off)/BlockSize)
				op.hdr.Sums = append(op.hdr.Sums, c.sums[first:first+int(m.len/BlockSize)]...)
				carried += m.len
			}
			pos += n
			left -= n
			used += n
			if used == p.len {
				i++
				used = 0
			}
		}
		f.mu.RUnlock()
		if rest := g.n - BlockSize - carried; rest > 0 {
			// Bytes the file no longer maps here, or extents for the
			// next record: a pad fills the rest of the reservation,
			// so that the zone still fills to capacity exactly.
			if carried == 0 {
				e.releaseOp(op)
				e.appendFiller(g.z, g.n, nil)
				continue
			}
			g.z.writers.Add(1)
			e.appendFiller(g.z, rest, nil)
		}
		op.hdr.DataLen = uint32(carried)
		b.wg.Add(1)
		if err := e.submitRecord(op); err != nil {
			b.wg.Done()
			return err
		}
	}
	return nil
}

func livelen(pieces []live) int64 {
	var n int64
	for _, p := range pieces {
		n += p.x.len
	}
	return n
}

// mappedIn collects every extent any file maps into zone z, from the
// extent maps: slower than walking the zone's headers, and needed only
// when the headers cannot reach every record.
func (e *Engine) mappedIn(z *zone) []live {
	e.idMu.RLock()
	files := make([]*file, 0, len(e.byID))
	for _, f := range e.byID {
		files = append(files, f)
	}
	e.idMu.RUnlock()
	var out []live
	lo, hi := z.start, z.start+z.cap
	for _, f := range files {
		f.mu.RLock()
		f.ext.each(func(x extent) bool {
			if x.dev >= lo && x.dev < hi {
				out = append(out, live{file: f, x: x})
			}
			return true
		})
		if f.tailUnsettled() {
			// What a failed truncate may map again (file.tailOld):
			// the file's unsettled tail makes gather leave the zone.
			// The header walk never finds it (no map points there),
			// but it is counted valid (pinTail), so gather comes here.
			// So are the extents an undo owing its commit replaced
			// (undoState.replaced).
			for _, x := range f.tailOld {
				if x.dev >= lo && x.dev < hi {
					out = append(out, live{file: f, x: x})
				}
			}
			if f.undo != nil {
				for _, x := range f.undo.replaced {
					if x.dev >= lo && x.dev < hi {
						out = append(out, live{file: f, x: x})
					}
				}
			}
		}
		f.mu.RUnlock()
	}
	return out
}

// headerSums sets the block checksums of pieces found through the extent
// maps (mappedIn) from their records' headers, each read once: a GC
// record carries the sums its bytes were written with.
func (c *collector) headerSums(victim *zone, pieces []live) error {
	e := c.e
	c.sums = c.sums[:0]
	hb := c.buf.mem[:BlockSize]
	var h RecordHeader
	at := int64(-1)
	for i := range pieces {
		x := pieces[i].x
		if x.hdr != at {
			if err := e.readDev(x.hdr, hb, c.w); err != nil {
				return fmt.Errorf("engine: gc: read zone %d header at %d: %w", victim.idx, x.hdr-victim.start, err)
			}
			if err := DecodeHeader(hb, &h); err != nil {
				return fmt.Errorf("engine: gc: zone %d header at %d: %w", victim.idx, x.hdr-victim.start, err)
			}
			e.stats.gcRead.Add(BlockSize)
			at = x.hdr
		}
		first, n := x.firstBlock(), int(x.len/BlockSize)
		if first < 0 || first+n > len(h.Sums) {
			return fmt.Errorf("engine: gc: zone %d: the record at %d has %d blocks, file %d maps block %d of it: %w",
				victim.idx, x.hdr-victim.start, len(h.Sums), pieces[i].file.id, first+n-1, ErrCorruptRecord)
		}
		pieces[i].sum = len(c.sums)
		c.sums = append(c.sums, h.Sums[first:first+n]...)
	}
	return nil
}

// testHookGCWalk, if set (by tests only), runs as GC starts to walk a
// zone's record headers (validPieces), with the collector held.
var testHookGCWalk func(e *Engine, z *zone)

// validPieces walks the victim's record headers below end and keeps the
// extents the mapping still points at this zone with the same version.
func (c *collector) validPieces(victim *zone, end int64) ([]live, error) {
	e := c.e
	if testHookGCWalk != nil {
		testHookGCWalk(e, victim)
	}
	var out []live
	var h RecordHeader
	c.sums = c.sums[:0]
	hb := c.buf.mem[:BlockSize]
	for off := int64(0); off+BlockSize <= end; {
		if err := e.readDev(victim.start+off, hb, c.w); err != nil {
			if errors.Is(err, syscall.EIO) {
				// Bad media where a header would be: most often the
				// range where an append failed (null_blk zoned with
				// bad blocks fails every read of it, and the zone
				// was finished past it). As a torn record, it ends
				// the walk; gather takes what the maps still point
				// here from them (mappedIn), and fails the victim
				// only if a live record's own header fails to read.
				// Failing here failed the victim on every pass: the
				// retired zone and its live data were never
				// reclaimed.
				break
			}
			return nil, fmt.Errorf("engine: gc: read zone %d header at %d: %w", victim.idx, off, err)
		}
		err := DecodeHeader(hb, &h)
		if errors.Is(err, ErrNoRecord) || errors.Is(err, ErrCorruptRecord) || (err == nil && h.FS != e.sb.FS()) {
			break // the rest of the zone was never written whole
		}
		if err != nil {
			return nil, err
		}
		e.stats.gcRead.Add(BlockSize)
		hdr := victim.start + off
		dev := hdr + BlockSize
		if h.Kind != KindPad {
			f := e.fileByID(h.File)
			for _, x := range h.Extents {
				if f != nil {
					f.mu.RLock()
					f.ext.lookup(x.FileOff, int64(x.Len), func(m extent) {
						want := dev + (m.off - x.FileOff)
						if m.ver == x.Version && m.dev == want && m.hdr == hdr {
							out = append(out, live{file: f, x: m, sum: len(c.sums)})
							first := m.firstBlock()
							c.sums = append(c.sums, h.Sums[first:first+int(m.len/BlockSize)]...)
						}
					})
					f.mu.RUnlock()
				}
				dev += int64(x.Len)
			}
		}
		off += BlockSize + int64(h.DataLen)
	}
	return out, nil
}
