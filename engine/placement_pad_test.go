package engine

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A reservation that meets two zone tails too short for a record (its
// file's zone, then the zone it is sent to share) leaves no reservation
// behind that nobody will append: every zone placement filled drains once
// the caller's appends (its record and the pads it was handed) land.
// A leaked reservation kept its zone draining for good; with the open
// budget taken, GC's next reservation waited for it forever (the power-cut
// loop's hang at point 49).
func TestPlacementTwoPadTailsLeakNothing(t *testing.T) {
	const zcap = 64 * BlockSize
	p := newTestPlacer(PolicyMRU, 3, 2, 1, zcap)
	p.recount()
	var a, b, c atomic.Pointer[zone]
	// a and b each leave a one-block tail in a zone of their own: a
	// three-block record, then two-block ones (a two-block record takes
	// what it asked for even where it leaves a short tail).
	for _, m := range []*atomic.Pointer[zone]{&a, &b} {
		take(t, p, m, 3*BlockSize)
		for range (zcap/BlockSize - 4) / 2 {
			take(t, p, m, minRecord)
		}
	}
	za, zb := a.Load(), b.Load()
	if za == zb || za.remaining() != BlockSize || zb.remaining() != BlockSize {
		t.Fatalf("setup: zones %d and %d with %d and %d bytes left", za.idx, zb.idx, za.remaining(), zb.remaining())
	}
	// c writes in a's zone, then shares b's: both tails need a pad.
	c.Store(za)
	pads := 0
	for attempt := 0; ; attempt++ {
		if attempt == 10 {
			t.Fatal("no grant after 10 reservations")
		}
		g, err := p.reserveData(&c, nil, minRecord, false, shareData)
		if g.padZone != nil {
			pads++
			g.padZone.writers.Add(-1) // the caller appends the pad
		}
		if errors.Is(err, ErrNoSpace) {
			break // the GC reserve is all that is left
		}
		if err != nil {
			t.Logf("reservation %d: %v (the caller pads and asks again)", attempt, err)
			continue
		}
		g.z.writers.Add(-1)
		break
	}
	if pads != 2 {
		t.Errorf("%d pads handed out; want 2, one per short tail", pads)
	}
	for _, z := range p.zones {
		if z.writers.Load() != 0 {
			t.Errorf("zone %d: %d reservations nobody will append (alloc %d of %d, state %d)",
				z.idx, z.writers.Load(), z.alloc.Load(), z.cap, z.state.Load())
		}
	}
	if n := p.drainingLocked(); n != 0 {
		t.Errorf("%d zones still draining with every append landed", n)
	}
	// What a reservation does when the budget is taken by draining
	// zones: wait for one to drain. It must return, every append having
	// landed; a leaked reservation held it (and the GC pass or writer
	// waiting in it, with everything queued behind) forever.
	wd := startWatchdog(10 * time.Second)
	var wg sync.WaitGroup
	wg.Go(func() {
		p.waitDrain()
		wd.done()
	})
	wd.wait(t, &wg, "wait for a draining zone")
}
