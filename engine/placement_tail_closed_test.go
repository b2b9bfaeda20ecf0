package engine

import (
	"errors"
	"testing"
)

// TestTailOfClosedFileWithDirtyDataIsNotShared: File.Close does
// not write back a file's dirty data (writeback does, later, through
// WriteExtents, which reserves on &f.mru with owner f). So a file with
// no handle open may still be writing its MRU zone. Under mru, since
// lsm40, a file short of a zone takes such a zone as "a finished file's
// tail" (orphan: handles == 0) even while free zones and budget remain
// for GC to make one; the closed file's writeback then appends to the
// same zone (pick's fast path: its mru is still that zone), so two files
// write one zone at once and sharedBusy does not count it.
func TestTailOfClosedFileWithDirtyDataIsNotShared(t *testing.T) {
	p := newTestPlacer(PolicyMRU, 3, 3, 1, 16*BlockSize)
	p.recount()
	try := func(f *file) (*zone, error) {
		g, err := p.reserveData(&f.mru, f, minRecord, false, shareNot)
		if err != nil {
			return nil, err
		}
		g.z.writers.Add(-1)
		return g.z, nil
	}
	take := func(f *file) *zone {
		t.Helper()
		z, err := try(f)
		if err != nil {
			t.Fatalf("file %d: %v", f.id, err)
		}
		return z
	}
	a, next, b := &file{id: 1}, &file{id: 2}, &file{id: 3}
	for _, f := range []*file{a, next, b} {
		f.handles.Add(1)
	}
	za := take(a)     // a writes (and syncs) its first record
	a.handles.Add(-1) // a is closed with more data dirty in the cache
	_ = take(next)    // the last zone beyond GC's reserve
	zb, err := try(b) // b needs a zone: takes a's "finished" tail
	if errors.Is(err, errNoFreeZone) {
		return // it asks GC for a zone of its own (before lsm40): fine
	}
	if err != nil {
		t.Fatal(err)
	}
	if zb != za {
		t.Fatalf("b got zone %d, not a's %d: the tail was not taken (the set-up no longer reaches the case)", zb.idx, za.idx)
	}
	// a's writeback runs now (WriteExtents -> reserveData(&a.mru, a, ...)).
	zw, err := try(a)
	if errors.Is(err, errNoFreeZone) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if zw == za {
		t.Fatalf("a's writeback (dirty data of a closed file) appended to zone %d after b was handed it as a finished file's tail: two files write one zone at once (sharedMRU %d, sharedBusy %d)",
			za.idx, p.sharedMRU.Load(), p.sharedBusy.Load())
	}
}
