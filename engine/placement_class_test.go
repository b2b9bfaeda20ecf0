package engine

import (
	"errors"
	"testing"
)

// TestMRUStartsHintedFileInItsClassTail: under mru a hinted file without
// a zone starts in the tail a finished file of its own class left (ZenFS's
// same-lifetime match) before it opens a fresh zone, and never in another
// class's tail while a fresh zone is there; an unhinted file still gets a
// fresh zone. Before the rule every new file opened a fresh zone while the
// budget allowed, so finished tables' tails piled up to the open budget
// and were then shared least recently used first, whatever their level:
// bench lsm at 4 MiB zones (1 MiB tables) had mru's device WAF above
// none's.
func TestMRUStartsHintedFileInItsClassTail(t *testing.T) {
	const zoneCap = 64 * BlockSize
	p := newTestPlacer(PolicyMRU, 10, 6, 1, zoneCap)
	p.recount()
	put := func(f *file) *zone {
		t.Helper()
		z, err := reserveFor(p, f)
		if err != nil {
			t.Fatalf("file %d: %v", f.id, err)
		}
		return z
	}
	long1, medium1 := openHinted(1, LifeLong), openHinted(2, LifeMedium)
	zl, zm := put(long1), put(medium1)
	if zl == zm {
		t.Fatal("two open files share a zone while the budget allows one each")
	}
	long1.handles.Add(-1) // both finished, their zones' tails open
	medium1.handles.Add(-1)

	long2 := openHinted(3, LifeLong)
	if z := put(long2); z != zl {
		t.Fatalf("a long-lived file started in zone %d, not the long-lived tail %d", z.idx, zl.idx)
	}
	plain := openHinted(4, LifeNotSet)
	if z := put(plain); z == zl || z == zm {
		t.Fatalf("an unhinted file started in a finished file's tail (zone %d) with fresh zones free", z.idx)
	}
	short := openHinted(5, LifeShort)
	if z := put(short); z == zm || z == zl {
		t.Fatalf("a short-lived file started in another class's tail (zone %d) with fresh zones free", z.idx)
	}
	medium2 := openHinted(6, LifeMedium)
	if z := put(medium2); z != zm {
		t.Fatalf("a medium-lived file started in zone %d, not the medium tail %d", z.idx, zm.idx)
	}
	if long1.mru.Load() != nil || medium1.mru.Load() != nil {
		t.Fatal("a finished file keeps as its MRU zone the tail another file now writes")
	}
	if n := p.sharedMRU.Load(); n != 0 {
		t.Fatalf("class matches counted as %d files short of a zone", n)
	}
}

// TestMRUHintedFileAsksGCBeforeAnotherClassTail: with no zone free beyond
// GC's reserve, an unhinted file under mru takes a finished file's tail
// (lsm40), but a hinted file with no tail of its class asks GC for a zone
// (errNoFreeZone) rather than mix lifetimes; with a tail of its class it
// takes that. It failed before: the hinted file took the other class's
// tail (bench lsm at 4 MiB zones: 337 such shares a run).
func TestMRUHintedFileAsksGCBeforeAnotherClassTail(t *testing.T) {
	const zoneCap = 64 * BlockSize
	p := newTestPlacer(PolicyMRU, 3, 3, 1, zoneCap)
	p.recount()
	long1, extreme1 := openHinted(1, LifeLong), openHinted(2, LifeExtreme)
	zl, err := reserveFor(p, long1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reserveFor(p, extreme1); err != nil {
		t.Fatal(err)
	}
	long1.handles.Add(-1) // finished; only GC's reserve is free now
	if z, err := reserveFor(p, openHinted(3, LifeExtreme)); !errors.Is(err, errNoFreeZone) {
		t.Fatalf("an extreme-lived file with no tail of its class got zone %d (err %v): want errNoFreeZone (GC frees one) rather than the long-lived tail %d", z.idx, err, zl.idx)
	}
	if z, err := reserveFor(p, openHinted(4, LifeLong)); err != nil || z != zl {
		t.Fatalf("a long-lived file: %v; want the long-lived tail %d", err, zl.idx)
	}
}

// openHinted is a file with one handle open and write-life hint l.
func openHinted(id uint64, l WriteLife) *file {
	f := &file{id: id}
	f.life.Store(uint32(l))
	f.handles.Add(1)
	return f
}

// reserveFor reserves a record's room for f as its writeback does (no
// share of another file's zone while GC could free one) and marks the
// append done at once.
func reserveFor(p *placer, f *file) (*zone, error) {
	g, err := p.reserveData(&f.mru, f, 4*BlockSize, false, shareNot)
	if err != nil {
		return nil, err
	}
	g.z.writers.Add(-1)
	return g.z, nil
}

// TestMRUKeepsHintedFileShortTailForItsClass: a hinted file closed with
// less room left than FinishTail keeps its zone open under mru, and the
// next file of its class starts there; an unhinted file's short tail is
// still finished (FinishTail, for bench gc's unhinted files).
func TestMRUKeepsHintedFileShortTailForItsClass(t *testing.T) {
	for _, life := range []WriteLife{LifeLong, LifeNotSet} {
		t.Run(life.String(), func(t *testing.T) {
			cfg := Config{CacheBytes: 2 << 20, Policy: PolicyMRU, OpenZones: 2}
			e := formatOpen(t, emuDevice(t, 24, "256K", "&max_open=5&max_active=5"), cfg)
			defer e.Close()
			write := func(name string, n int64) {
				t.Helper()
				writeWholeFile(t, e, name, n, life)
			}
			write("a", 200<<10) // leaves under a quarter zone
			write("b", 16<<10)
			finished := e.Stats().ZonesTailFinished
			if life == LifeNotSet && finished != 1 {
				t.Fatalf("unhinted: %d short tails finished, want 1", finished)
			}
			if life != LifeNotSet && finished != 0 {
				t.Fatalf("hinted: %d short tails finished, want 0 (the class's next file fills it)", finished)
			}
		})
	}
}
