package engine

// Review of create14 and FinishTail (rev34): a durable create over a
// deferred one, finishing a zone another open file writes to, and giveUp
// racing a lock-free claim.

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// A durable OCreate of a name an ODeferSync create made (record logged,
// not flushed) returns only once the create is durable.
func TestDurableCreateOverDeferredCreate(t *testing.T) {
	devName, emu, held, e := openHeldFlush(t, false)
	f, err := e.OpenFile("x", OCreate|ODeferSync)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	g, err := e.OpenFile("x", OCreate) // durable: x must survive once it returns
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	if err := emu.PowerCut(); err != nil {
		t.Fatal(err)
	}
	e.crashForTest()
	held.Close()
	e = reopen(t, devName, smallConfig())
	defer e.Close()
	if _, err := e.Stat("x"); err != nil {
		t.Fatalf("durable OCreate of x returned nil, then a power cut: %v", err)
	}
}

// f shares g's zone while g writes there (busy share: owner := f);
// f closes with a short tail: finishTail gives up the zone g, still open
// and writing, appends to.
func TestFinishTailLeavesAnOpenWritersZone(t *testing.T) {
	cfg := Config{CacheBytes: 2 << 20, Policy: PolicyMRU, OpenZones: 1}
	e := formatOpen(t, emuDevice(t, 24, "256K", "&max_open=4&max_active=4"), cfg)
	defer e.Close()
	write := func(h *File, off, n int64) {
		t.Helper()
		if _, err := h.WriteAt(make([]byte, n), off); err != nil {
			t.Fatal(err)
		}
		if err := h.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	g := mustCreate(t, e, "g")
	defer g.Close()
	write(g, 0, 180<<10)
	f := mustCreate(t, e, "f")
	write(f, 0, 8<<10)
	before := e.Stats()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	write(g, 180<<10, 8<<10) // g keeps writing: its zone still has room
	st := e.Stats()
	t.Logf("shared %d busy %d; after f's close: tails finished %d, zones opened %d -> %d",
		st.ZonesShared, st.ZonesSharedBusy, st.ZonesTailFinished, before.ZonesOpened, st.ZonesOpened)
	if st.ZonesTailFinished != 0 {
		t.Errorf("f's close finished the zone g (open, writing) was appending to; g had to open zone #%d", st.ZonesOpened)
	}
}

// giveUp's open case reads remaining(), then stores alloc = cap,
// without excluding a lock-free claim in between: a writer (the closing
// file's own writeback) that claims there is subtracted from unalloc twice.
func TestFinishTailKeepsFreeSpaceCount(t *testing.T) {
	cfg := Config{CacheBytes: 8 << 20, Policy: PolicyMRU, FinishTail: 1 << 40}
	e := formatOpen(t, emuDevice(t, 64, "256K", ""), cfg)
	defer e.Close()
	buf := make([]byte, 12<<10)
	for round := 0; round < 300; round++ {
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			name := fmt.Sprintf("f%d-%d", w, round%8)
			f, err := e.Create(name)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(buf, 0); err != nil {
				t.Fatal(err)
			}
			wg.Add(2)
			go func() { defer wg.Done(); _ = f.Sync() }()
			go func() { defer wg.Done(); _ = f.Close() }()
		}
		wg.Wait()
	}
	if err := e.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	p := &e.placer
	e.waitUntil(func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.retiring) == 0 && p.drainingLocked() == 0
	})
	p.mu.Lock()
	var n int64
	for _, z := range p.free {
		n += z.cap - z.alloc.Load()
	}
	for _, z := range p.open {
		n += max(0, z.remaining())
	}
	got := p.unalloc.Load()
	p.mu.Unlock()
	t.Logf("tails finished %d, unalloc %d, recount %d", e.Stats().ZonesTailFinished, got, n)
	if got != n {
		t.Errorf("unalloc %d, zones say %d (drift %d)", got, n, got-n)
	}
}

// placer.giveUp (open case) against a concurrent lock-free reserve
// in the same zone (the closing file's writeback): unalloc must still
// equal what the zones hold unreserved.
func TestGiveUpRacesClaim(t *testing.T) {
	const zoneCap = 1024 * BlockSize
	drift := 0
	for i := 0; i < 20000; i++ {
		p := newTestPlacer(PolicyMRU, 4, 4, 0, zoneCap)
		p.recount()
		var mru atomic.Pointer[zone]
		z := take(t, p, &mru, 8*BlockSize)
		var wg sync.WaitGroup
		var start atomic.Bool
		wg.Add(2)
		go func() {
			defer wg.Done()
			for !start.Load() {
				runtime.Gosched()
			}
			p.giveUp(z, true)
		}()
		go func() {
			defer wg.Done()
			start.Store(true)
			for {
				g, err := p.reserve(&mru, 2*BlockSize, false)
				if err != nil {
					return
				}
				g.z.writers.Add(-1)
				if g.z != z {
					return
				}
			}
		}()
		wg.Wait()
		var n int64
		for _, z := range p.free {
			n += z.cap - z.alloc.Load()
		}
		for _, z := range p.open {
			n += max(0, z.remaining())
		}
		if got := p.unalloc.Load(); got != n {
			drift++
			if drift == 1 {
				t.Errorf("iteration %d: unalloc %d, zones hold %d unreserved (drift %d)", i, got, n, got-n)
			}
		}
	}
	if drift > 0 {
		t.Errorf("%d of 20000 runs drifted", drift)
	}
}
