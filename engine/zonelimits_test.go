package engine

import (
	"sync/atomic"
	"testing"

	"github.com/zonefold/zonefold/internal/wake"
	"github.com/zonefold/zonefold/zns"
)

// activeZones counts the device's active zones.
func activeZones(t *testing.T, e *Engine) int {
	t.Helper()
	report := make([]zns.Zone, e.geo.Zones)
	n, err := e.dev.Report(0, report)
	if err != nil {
		t.Fatal(err)
	}
	active := 0
	for _, z := range report[:n] {
		if z.Cond.Active() {
			active++
		}
	}
	return active
}

// Format and every checkpoint leave one metadata zone active, not two:
// the open budget has room for one.
func TestOneActiveMetaZone(t *testing.T) {
	e := formatOpen(t, emuDevice(t, 16, "256K", ""), smallConfig())
	defer e.Close()
	if n := activeZones(t, e); n != 1 {
		t.Fatalf("%d active zones after format; want the one metadata zone", n)
	}
	for range 3 {
		if err := e.checkpoint(); err != nil {
			t.Fatal(err)
		}
		if n := activeZones(t, e); n != 1 {
			t.Fatalf("%d active zones after a checkpoint with no data; want the one metadata zone", n)
		}
	}
}

// With the device's active limit exactly at what the engine plans for
// (one zone per file, one for GC, one for metadata), heavy overwrites
// with GC and checkpoint switches never open a zone past the limit: a
// zone placement has filled still counts until its last append lands.
func TestOverwritesKeepToActiveLimit(t *testing.T) {
	for _, p := range []Policy{PolicyMRU, PolicyNone} {
		t.Run(p.String(), func(t *testing.T) {
			// 6 open zones: 4 data zones (one per file), GC, metadata.
			// 256 KiB metadata zones fill after a few dozen GC resets.
			// The dirty limit stays well under the device's slack (admission
			// keeps room for every dirty byte).
			cfg := Config{CacheBytes: 2 << 20, DirtyLimit: 512 << 10, Policy: p}
			e := formatOpen(t, emuDevice(t, 48, "256K", "&max_open=6&max_active=6"), cfg)
			defer e.Close()
			size := e.Capacity() * 6 / 10 / 4 / 8192 * 8192
			fill := Workload{Files: 4, BS: 8192, IODepth: 4, Size: size, RW: "write", Seed: 1}
			if _, err := RunWorkload(t.Context(), e, fill); err != nil {
				t.Fatal(err)
			}
			over := fill
			over.RW, over.Keep, over.Ops = "randwrite", true, 2*e.Capacity()/4/8192
			if _, err := RunWorkload(t.Context(), e, over); err != nil {
				t.Fatal(err)
			}
			st := e.Stats()
			if st.AppendErrs != 0 {
				t.Errorf("%d appends failed", st.AppendErrs)
			}
			if st.GCResets == 0 || st.Checkpoints == 0 {
				t.Errorf("GC resets %d, checkpoints %d: the test wants both", st.GCResets, st.Checkpoints)
			}
		})
	}
}

// A zone placement has filled still counts against the open budget until
// its last reservation is appended: the device counts it active until
// then. The next zone opens only after that.
func TestPlacementWaitsForFilledZoneToDrain(t *testing.T) {
	const zcap = 16 * BlockSize
	zones := make([]*zone, 3)
	p := placer{policy: PolicyNone, budget: 1, flush: func() {}, idle: new(wake.Wake)}
	for i := range zones {
		zones[i] = &zone{idx: i, cap: zcap}
		p.zones = append(p.zones, zones[i])
		p.free = append(p.free, zones[i])
	}
	var mru atomic.Pointer[zone]
	first, err := p.reserve(&mru, zcap, false)
	if err != nil || first.z != zones[0] || first.n != zcap {
		t.Fatalf("first reservation: %+v, %v; want all of zone 0", first, err)
	}
	got := make(chan grant, 1)
	go func() {
		g, err := p.reserve(&mru, minRecord, false)
		if err != nil {
			t.Error(err)
		}
		got <- g
	}()
	// The reservation waits parked on a channel, not polling.
	parkedIn(t, "engine.(*placer).reserve", "engine.(*placer).waitDrain")
	select {
	case g := <-got:
		t.Fatalf("zone %d opened while zone 0's append was in flight", g.z.idx)
	default:
	}
	zones[0].doneWriting(p.idle) // the append lands
	if g := <-got; g.z != zones[1] {
		t.Fatalf("second reservation in zone %d; want zone 1", g.z.idx)
	}
}
