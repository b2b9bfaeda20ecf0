package engine

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/zonefold/zonefold/internal/wake"
)

func newTestPlacer(policy Policy, zones, budget, reserve int, zoneCap int64) *placer {
	p := &placer{policy: policy, budget: budget, gcReserve: reserve, idle: new(wake.Wake)}
	for i := range zones {
		z := &zone{idx: i + 2, start: int64(i+2) * zoneCap, cap: zoneCap}
		p.zones = append(p.zones, z)
		p.free = append(p.free, z)
	}
	return p
}

// take reserves n bytes for a file and marks the append done at once.
func take(t *testing.T, p *placer, mru *atomic.Pointer[zone], n int64) *zone {
	t.Helper()
	g, err := p.reserve(mru, n, false)
	if err != nil {
		t.Fatalf("reserve %d: %v", n, err)
	}
	if g.padZone != nil {
		g.padZone.writers.Add(-1)
	}
	g.z.writers.Add(-1)
	return g.z
}

func TestPlacementPolicies(t *testing.T) {
	const zoneCap = 64 * BlockSize
	t.Run("mru gives each file its own zone and keeps it", func(t *testing.T) {
		p := newTestPlacer(PolicyMRU, 10, 4, 1, zoneCap)
		mrus := make([]atomic.Pointer[zone], 4)
		first := map[*zone]int{}
		for f := range mrus {
			z := take(t, p, &mrus[f], 2*BlockSize)
			if other, ok := first[z]; ok {
				t.Fatalf("files %d and %d share zone %d while the budget allows one each", other, f, z.idx)
			}
			first[z] = f
		}
		for round := 0; round < 5; round++ {
			for f := range mrus {
				if z := take(t, p, &mrus[f], 2*BlockSize); first[z] != f {
					t.Fatalf("file %d moved to zone %d with room left in its own", f, z.idx)
				}
			}
		}
	})
	t.Run("mru beyond the budget shares the least recently used zone", func(t *testing.T) {
		p := newTestPlacer(PolicyMRU, 10, 2, 1, zoneCap)
		var a, b, c atomic.Pointer[zone]
		za := take(t, p, &a, 2*BlockSize)
		zb := take(t, p, &b, 2*BlockSize)
		take(t, p, &b, 2*BlockSize) // b is now more recent than a
		if zc := take(t, p, &c, 2*BlockSize); zc != za || zc == zb {
			t.Fatalf("third file got zone %d; the LRU open zone is %d", zc.idx, za.idx)
		}
		if len(p.open) != 2 {
			t.Fatalf("%d zones open with a budget of 2", len(p.open))
		}
	})
	t.Run("none shares one stream", func(t *testing.T) {
		p := newTestPlacer(PolicyNone, 10, 4, 1, zoneCap)
		mrus := make([]atomic.Pointer[zone], 5)
		var first *zone
		for f := range mrus {
			z := take(t, p, &mrus[f], 2*BlockSize)
			if first == nil {
				first = z
			}
			if z != first {
				t.Fatalf("file %d got zone %d, not the shared zone %d", f, z.idx, first.idx)
			}
		}
	})
	t.Run("round-robin rotates over the open zones", func(t *testing.T) {
		p := newTestPlacer(PolicyRoundRobin, 10, 3, 1, zoneCap)
		var m atomic.Pointer[zone]
		seen := map[*zone]bool{}
		for range 6 {
			seen[take(t, p, &m, 2*BlockSize)] = true
		}
		if len(seen) != 3 {
			t.Fatalf("one file's appends used %d zones, want all 3 open ones", len(seen))
		}
	})
}

func TestPlacementFillsZonesExactly(t *testing.T) {
	const zoneCap = 16 * BlockSize
	p := newTestPlacer(PolicyMRU, 4, 2, 1, zoneCap)
	var m atomic.Pointer[zone]
	var total int64
	pads := 0
	for {
		g, err := p.reserve(&m, 3*BlockSize, false)
		if g.padZone != nil {
			pads++
			total += g.padZone.cap - g.padOff
			g.padZone.writers.Add(-1)
		}
		if errors.Is(err, ErrNoSpace) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if g.n < minRecord || g.off+g.n > g.z.cap {
			t.Fatalf("grant of %d at %d in a zone of %d", g.n, g.off, g.z.cap)
		}
		total += g.n
		g.z.writers.Add(-1)
	}
	// Everything but the GC reserve was handed out, to the byte.
	if want := int64(3) * zoneCap; total != want {
		t.Fatalf("handed out %d bytes of %d (pads %d)", total, want, pads)
	}
	for _, z := range p.zones[:3] {
		if z.alloc.Load() != z.cap || z.state.Load() != zoneFull {
			t.Fatalf("zone %d: alloc %d of %d, state %d", z.idx, z.alloc.Load(), z.cap, z.state.Load())
		}
	}
	if len(p.free) != 1 {
		t.Fatalf("%d free zones left; the reserve is 1", len(p.free))
	}
	// GC may take the reserve.
	var gc atomic.Pointer[zone]
	if _, err := p.reserve(&gc, minRecord, true); err != nil {
		t.Fatalf("GC could not take the reserve: %v", err)
	}
}
