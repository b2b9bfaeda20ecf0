package engine

import (
	"errors"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// h42cHoldNext is a device whose armed append (the next one after arm)
// lands at once but completes to the engine only once gate closes: a
// GC record in flight, numbered, while other records land and are mapped.
// held is closed as that append is submitted.
type h42cHoldNext struct {
	zns.Device
	armed atomic.Bool
	held  chan struct{}
	gate  chan struct{}
}

func (d *h42cHoldNext) Append(zone int, bufs [][]byte, c zns.AppendCompletion) error {
	if d.armed.CompareAndSwap(true, false) {
		defer close(d.held)
		return d.Device.Append(zone, bufs, h38dLate{c, d.gate, nil})
	}
	return d.Device.Append(zone, bufs, c)
}

// h42cRig is truncGCRig's file "a" (10000 bytes written and synced 20
// times over, then 2 MiB past a hole) on a device that holds GC's copy
// of the file's first zone, the victim, in flight: start runs a GC pass
// over the victim that returns its result on done, and returns once the
// copy is numbered and on the device but not mapped; release lets it
// complete.
type h42cRig struct {
	*truncGCRig
	emu     *zns.Emu
	hold    *h42cHoldNext
	victim  *zone
	before  Stats
	done    chan h42cResult
	release func()
}

type h42cResult struct {
	ok  bool
	err error
}

func newH42cRig(t *testing.T) *h42cRig {
	devName, cfg := memDevice(t, 16, "1M"), smallConfig()
	cfg.GC.Disabled = true
	r := &h42cRig{hold: &h42cHoldNext{held: make(chan struct{}), gate: make(chan struct{})}, done: make(chan h42cResult, 1)}
	e := formatOpenThrough(t, devName, cfg, func(d *zns.Emu) zns.Device {
		r.emu, r.hold.Device = d, d
		return r.hold
	})
	released := false
	r.release = func() {
		if !released {
			released = true
			close(r.hold.gate)
		}
	}
	t.Cleanup(func() {
		r.release()
		e.Close()
	})
	r.truncGCRig = &truncGCRig{devName: devName, cfg: cfg, e: e, f: mustCreate(t, e, "a")}
	r.small = copiesThenBig(t, r.f, 20, 2<<20)
	r.image()
	r.truncGCRig.before = readAll(t, e, "a")
	r.victim = fileZone(t, e, r.f)
	if r.victim.state.Load() != zoneFull {
		t.Fatalf("set-up: a's first zone %d is not full (state %d)", r.victim.idx, r.victim.state.Load())
	}
	return r
}

func (r *h42cRig) start(t *testing.T) {
	e, victim := r.e, r.victim
	testHookGCWalk = func(_ *Engine, z *zone) {
		if z == victim {
			r.hold.armed.Store(true)
		}
	}
	t.Cleanup(func() { testHookGCWalk = nil })
	r.before = e.Stats()
	go func() {
		e.gc.mu.Lock()
		defer e.gc.mu.Unlock()
		victim.state.Store(zoneGC)
		ok, err := e.gc.collect(victim, minGCGain)
		r.done <- h42cResult{ok, err}
	}()
	<-r.hold.held
	testHookGCWalk = nil
	if e.Stats().GCHeaders != r.before.GCHeaders {
		t.Fatal("set-up: a GC record was mapped before the copy was held")
	}
}

// finish lets GC's copy complete and returns the pass's result, having
// checked that the copy was one record (the one held).
func (r *h42cRig) finish(t *testing.T) h42cResult {
	r.release()
	res := <-r.done
	if d := r.e.Stats().GCHeaders - r.before.GCHeaders; d != BlockSize {
		t.Fatalf("set-up: GC wrote %d header bytes; want one record (the one held)", d)
	}
	return res
}

// TestH42cGCCopyLandingAfterAnUndosRewriteLeavesItsVictim catches in the
// act what h41h's errVictimChanged skip was for (TestH41dFullDevice-
// FaultsAndPowerCuts, seed 41502: "zone 4 still holds 24576 valid bytes
// after relocation", a file whose tail block a failed truncate's undo
// had put back). GC numbers its copy of file a's pieces in the victim
// (a's tail block among them, the bytes past the truncate's end too)
// before a truncate of a begins, so appendFile does not see the file
// unsettled; the copy is in flight while the truncate's flush fails and
// its undo rewrites the tail block and the cut range in records without
// a size. Those records land first and map over the victim's extents
// with undoState.keep: the replaced extents, still in the victim, stay
// counted valid there (a crash before the commit maps them again) but
// are in no map. GC's copy then lands and moves only what the map still
// holds in the copied version, none of those, and the victim still
// holds exactly what undoState.replaced keeps in it when its reset is
// to be logged. Nothing is lost: the pass leaves the zone full (counted
// in GCVictimsChanged), and once the undo is committed (the file's
// fsync) it holds nothing valid and a pass resets it.
//
// The control: an overwrite of the same bytes landing before the copy
// (the other suspect) unmaps them from the victim (Engine.unmapped), and
// the pass reclaims the victim.
func TestH42cGCCopyLandingAfterAnUndosRewriteLeavesItsVictim(t *testing.T) {
	t.Run("overwrite", func(t *testing.T) {
		r := newH42cRig(t)
		r.start(t)
		p := make([]byte, 1<<20)
		for i := range p {
			p[i] = byte(i % 251)
		}
		if _, err := r.f.WriteAt(p[:10000], 0); err != nil {
			t.Fatal(err)
		}
		if _, err := r.f.WriteAt(p, 16384); err != nil {
			t.Fatal(err)
		}
		if err := r.f.Sync(); err != nil {
			t.Fatal(err)
		}
		res := r.finish(t)
		t.Logf("collect: %v %v; the victim holds %d valid bytes", res.ok, res.err, r.victim.valid.Load())
		if res.err != nil || !res.ok || r.victim.valid.Load() != 0 {
			t.Fatalf("collect after an overwrite of what its copy carried: reclaimed %v, err %v, valid %d; want true, nil, 0",
				res.ok, res.err, r.victim.valid.Load())
		}
		if d := r.e.Stats().Sub(r.before); d.GCVictimsChanged != 0 {
			t.Fatalf("%d victims counted changed; want 0", d.GCVictimsChanged)
		}
		want := append([]byte(nil), r.truncGCRig.before...)
		copy(want, p[:10000])
		copy(want[16384:], p)
		sameBytes(t, "after the overwrite and the pass", readAll(t, r.e, "a"), want)
	})
	t.Run("failed truncate", func(t *testing.T) {
		holdOwed(t)
		r := newH42cRig(t)
		e, victim := r.e, r.victim
		r.start(t)
		// The truncate's flush fails, and so does its undo's first
		// flush: the undo's records (no size) are mapped, its commit
		// owed.
		t.Cleanup(func() { testHookTruncateUndo = nil })
		testHookTruncateUndo = func(_ *Engine, back bool) {
			if back {
				r.emu.FailFlush(1) // undoCut's first flush
			}
		}
		r.emu.FailFlush(1)
		if err := r.f.Truncate(5000); !errors.Is(err, syscall.EIO) {
			t.Fatalf("truncate: %v, want EIO", err)
		}
		testHookTruncateUndo = nil
		if !r.f.f.undoOwed() {
			t.Fatal("set-up: the failed truncate's undo owes no commit")
		}
		r.f.f.mu.RLock()
		var kept int64
		for _, x := range r.f.f.undo.replaced {
			if e.zoneAt(x.dev) == victim {
				kept += x.len
			}
		}
		r.f.f.mu.RUnlock()
		if kept == 0 {
			t.Fatal("set-up: the undo's records replaced nothing in the victim")
		}

		res := r.finish(t)
		t.Logf("collect: %v %v; the victim holds %d valid bytes, the undo keeps %d there", res.ok, res.err, victim.valid.Load(), kept)
		if res.err != nil || res.ok {
			t.Fatalf("collect while the undo owes its commit: reclaimed %v, err %v; want the victim skipped", res.ok, res.err)
		}
		if v := victim.valid.Load(); v != kept {
			t.Fatalf("after the copy the victim holds %d valid bytes; the undo keeps %d there (what else holds it?)", v, kept)
		}
		if d := e.Stats().Sub(r.before); d.GCVictimsChanged != 1 || d.GCVictimsFailed != 0 {
			t.Fatalf("%d victims counted changed, %d failed; want 1, 0", d.GCVictimsChanged, d.GCVictimsFailed)
		}
		if victim.state.Load() != zoneFull || victim.resetPending.Load() {
			t.Fatalf("victim state %d, reset pending %v; want full, not pending", victim.state.Load(), victim.resetPending.Load())
		}
		// A crash now (GC's copy durable, the undo's commit not) finds
		// the file as it was, or cut.
		r.copyImage(t)
		r.checkCopy(t, "a crash after the skipped pass")

		// The file's fsync commits the undo: what it kept is garbage,
		// and a pass reclaims the victim.
		if err := r.f.Sync(); err != nil {
			t.Fatalf("fsync on a healthy device: %v", err)
		}
		if v := victim.valid.Load(); v != 0 {
			t.Fatalf("after the undo's commit the victim holds %d valid bytes", v)
		}
		e.gc.mu.Lock()
		ok, err := e.gc.resetEmpty()
		e.gc.mu.Unlock()
		if err != nil || !ok || victim.state.Load() == zoneFull {
			t.Fatalf("resetEmpty after the commit: %v %v, victim state %d; want the victim reset", ok, err, victim.state.Load())
		}
		sameBytes(t, "after the commit and the reset", readAll(t, e, "a"), r.truncGCRig.before)
	})
}
