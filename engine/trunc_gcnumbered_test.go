package engine

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
)

// TestTruncateGCWhileZerosNumberedNotSubmitted: a GC pass that relocates
// the file after the zeros' record took its number but before that record
// is submitted must not make the new size durable without the zeros. It
// carried the new size and flushed it (the zeros not on the device yet),
// and a crash then (modelled by copying the device as of GC's flush)
// brought the file back cut to 5000 over the tail block's old bytes,
// which a grow showed. The pass now leaves the file for later; a pass
// after the truncate collects the zone.
func TestTruncateGCWhileZerosNumberedNotSubmitted(t *testing.T) {
	r := newTruncGCRig(t)
	armed, ran := false, false
	var victim *zone
	testHookTruncateTail = func(*Engine) { armed = true }
	testHookNumbered = func(e *Engine, ff *file) {
		if !armed || ran || ff != r.f.f {
			return
		}
		ran = true
		victim = r.collectAndCopy(t, "in the window")
	}
	t.Cleanup(func() { testHookTruncateTail, testHookNumbered = nil, nil })
	if err := r.f.Truncate(5000); err != nil {
		t.Fatal(err)
	}
	testHookTruncateTail, testHookNumbered = nil, nil
	if !ran {
		t.Fatal("hook never ran")
	}
	if victim != nil && victim.state.Load() == zoneFull {
		// Left for later: once the truncate is done a pass takes it.
		ok, err := collectVictim(r.e, victim)
		if err != nil || !ok {
			t.Fatalf("collect after the truncate: %v %v", ok, err)
		}
	}
	r.checkCopy(t, "crash during the truncate")
}

// TestTruncateFlushEIOGCDuringUndo: a truncate whose flush failed puts
// the file back (undoCut) in records numbered after the zeros'. A GC
// pass in between, whose record carries the old size and whose flush
// makes the zeros durable without undoCut's records, would bring the
// file back with the old size over the zeroed block and holes past it:
// GC leaves the file alone until the undo is durable.
func TestTruncateFlushEIOGCDuringUndo(t *testing.T) {
	r := newTruncGCRig(t)
	ran := false
	testHookNumbered = func(e *Engine, ff *file) {
		ff.mu.RLock()
		undoing := ff.tailSeq == tailUndoing
		ff.mu.RUnlock()
		if ran || ff != r.f.f || !undoing {
			return
		}
		ran = true
		r.collectAndCopy(t, "during the undo")
	}
	t.Cleanup(func() { testHookNumbered = nil })
	emuOf(t, r.e).FailFlush(1)
	if err := r.f.Truncate(5000); !errors.Is(err, syscall.EIO) {
		t.Fatalf("truncate: %v", err)
	}
	testHookNumbered = nil
	if !ran {
		t.Fatal("hook never ran")
	}
	sameBytes(t, "after the failed truncate", readAll(t, r.e, "a"), r.before)
	r.checkCopy(t, "crash during the failed truncate's undo")
}

// truncGCRig is a file "a" of 10000 bytes written and synced 20 times
// over (its zone full of garbage and the file's latest copy) plus 2 MiB
// past a hole, on an emu device without background GC; copyName names a
// second image collectAndCopy writes, the device as a crash at that
// moment would leave it.
type truncGCRig struct {
	devName        string
	cfg            Config
	e              *Engine
	f              *File
	small, before  []byte
	path, copyName string
}

func newTruncGCRig(t *testing.T) *truncGCRig {
	devName, cfg, e, f := fileWithoutGC(t)
	t.Cleanup(func() { e.Close() })
	r := &truncGCRig{devName: devName, cfg: cfg, e: e, f: f}
	r.small = copiesThenBig(t, f, 20, 2<<20)
	r.image()
	r.before = readAll(t, e, "a")
	return r
}

// onUndoRecord has fn run as each record of the file's failed
// truncate's undo takes its number, with how many have (1 for the
// first); it ends at cleanup.
func (r *truncGCRig) onUndoRecord(t *testing.T, fn func(e *Engine, n int)) {
	t.Cleanup(func() { testHookNumbered = nil })
	n := 0
	testHookNumbered = func(e *Engine, ff *file) {
		ff.mu.RLock()
		undoing := ff.tailSeq == tailUndoing
		ff.mu.RUnlock()
		if ff != r.f.f || !undoing {
			return
		}
		n++
		fn(e, n)
	}
}

// image sets the names of the device's image and of its copy.
func (r *truncGCRig) image() {
	r.path = strings.TrimPrefix(r.devName[:strings.Index(r.devName, "?")], "emu:")
	r.copyName = strings.Replace(r.devName, r.path, r.path+"2", 1)
}

// collectAndCopy runs a GC pass over the file's full zone, then copies
// the device image (a crash right after GC's flush). It runs inside a
// hook, so it reports with t.Error; it returns the victim.
func (r *truncGCRig) collectAndCopy(t *testing.T, when string) *zone {
	e := r.e
	e.gc.mu.Lock()
	victim := fileZone(t, e, r.f)
	if !victim.state.CompareAndSwap(zoneFull, zoneGC) {
		e.gc.mu.Unlock()
		t.Errorf("the file's zone is not full: state %d", victim.state.Load())
		return nil
	}
	ok, err := e.gc.collect(victim, minGCGain)
	e.gc.mu.Unlock()
	if err != nil {
		t.Errorf("collect: %v", err)
		return victim
	}
	t.Logf("collect %s: %v", when, ok)
	r.copyImage(t)
	return victim
}

// copyImage copies the device image as it stands (what a crash now would
// leave of what the device flushed) to copyName, for checkCopy. It runs
// inside hooks, so it reports with t.Error.
func (r *truncGCRig) copyImage(t *testing.T) {
	b, err := os.ReadFile(r.path)
	if err != nil {
		t.Error(err)
		return
	}
	if err := os.WriteFile(r.path+"2", b, 0o600); err != nil {
		t.Error(err)
	}
}

// checkCopy reopens the copied image: the file is whole as before the
// truncate, or cut to 5000 bytes that read as zeros past the cut once
// it grows again.
func (r *truncGCRig) checkCopy(t *testing.T, what string) {
	e2 := reopen(t, r.copyName, r.cfg)
	defer e2.Close()
	got := readAll(t, e2, "a")
	if len(got) != 5000 {
		sameBytes(t, what+" (before it)", got, r.before)
		return
	}
	g, err := e2.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Truncate(8192); err != nil {
		t.Fatal(err)
	}
	want := append(r.small[:5000:5000], make([]byte, 8192-5000)...)
	sameBytes(t, what+" (after it), then grow", readAll(t, e2, "a"), want)
}

// copiesThenBig writes 10000 bytes at 0 to f copies times over, each
// synced, then big bytes at 16384, synced; it returns the 10000 bytes.
func copiesThenBig(t *testing.T, f *File, copies, big int) []byte {
	t.Helper()
	small := bytes.Repeat([]byte("truncate"), 10000/8)
	for range copies {
		if _, err := f.WriteAt(small, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte("filler!!"), big/8), 16384); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	return small
}
