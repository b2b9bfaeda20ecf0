package engine

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// fullZoneWithoutGC is a full zone of an engine without background GC
// (a file written to fill more than one zone).
func fullZoneWithoutGC(t *testing.T) (*Engine, *zone) {
	t.Helper()
	e := writersGCOnly(t, 12, 2<<20)
	f := mustCreate(t, e, "a")
	if _, err := f.WriteAt(bytes.Repeat([]byte{'a'}, 1<<20), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, z := range e.zones {
		if z != nil && z.state.Load() == zoneFull {
			return e, z
		}
	}
	t.Fatal("no full zone")
	return nil, nil
}

// TestPassThatOnlyGivesBackABudgetPlaceIsNoReclaim: a GC pass whose only
// progress is a place in the open budget given back (retryFinish
// finished a zone the device had refused to) reports it, so that a
// writer short of zones looks again, but does not count as a zone
// reclaimed: a run of failed passes is not ended by it (passEnded would
// log "gc passes succeed again" with no zone reset).
//
// Failed before the fix: the run of failures was ended (n 0).
func TestPassThatOnlyGivesBackABudgetPlaceIsNoReclaim(t *testing.T) {
	e, z := fullZoneWithoutGC(t)
	defer e.Close()
	c := e.gc
	p := &e.placer
	p.mu.Lock()
	z.unfinished = true
	p.unfinished++
	p.mu.Unlock()
	resets := e.stats.gcResets.Load()
	c.mu.Lock()
	c.failures.n = 2
	c.mu.Unlock()
	moved, err := c.pass(gcUrgent)
	if err != nil || !moved {
		t.Fatalf("pass: moved %v, %v; want the budget place given back (true, nil)", moved, err)
	}
	c.mu.Lock()
	n := c.failures.n
	c.mu.Unlock()
	if e.stats.gcResets.Load() != resets {
		t.Fatal("set-up: the pass reset a zone")
	}
	if n != 2 {
		t.Fatalf("a pass that reset no zone ended the run of failed passes (n %d, want 2)", n)
	}
	p.mu.Lock()
	still := z.unfinished
	p.mu.Unlock()
	if still {
		t.Fatal("set-up: the zone's place was not given back")
	}
}

// TestVictimThatKeepsFailingIsLeftLonger: each failure of the same
// victim zone in a row doubles how long GC leaves it (from 10 s, up to
// victimRetryMax), so a zone that refuses every reset no longer costs a
// logged reset record and a device flush every 10 s for good; a zone
// reset starts it over. No timing decides: the waits are read from the
// zone's retry time, set from the clock at each failure.
//
// Failed before the fix: every wait was 10 s.
func TestVictimThatKeepsFailingIsLeftLonger(t *testing.T) {
	e, z := fullZoneWithoutGC(t)
	defer e.Close()
	c := e.gc
	want := victimRetryWait
	for i := range 8 {
		wait := failFor(c, z)
		if wait < want || wait > want+time.Second {
			t.Fatalf("failure %d in a row: the zone is left %v; want %v", i+1, wait, want)
		}
		want = min(2*want, victimRetryMax)
	}
	// The zone's data removed, a pass resets it: the next failure is
	// left victimRetryWait again.
	if err := e.Remove("a"); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	z.retryAt = time.Time{} // as if its wait had passed
	c.mu.Unlock()
	resets := e.stats.gcResets.Load()
	if _, err := c.pass(gcUrgent); err != nil {
		t.Fatal(err)
	}
	if e.stats.gcResets.Load() == resets || z.state.Load() == zoneFull {
		t.Fatalf("set-up: the pass did not reset the empty zone (state %d)", z.state.Load())
	}
	if wait := failFor(c, z); wait < victimRetryWait || wait > victimRetryWait+time.Second {
		t.Fatalf("after a reset, a failure leaves the zone %v; want %v", wait, victimRetryWait)
	}
}

var errVictimTest = errors.New("a victim failure (test)")

// failFor records a failure of victim z and returns how long GC leaves
// it from then.
func failFor(c *collector, z *zone) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	before := time.Now()
	c.victimFailed(z, errVictimTest)
	return z.retryAt.Sub(before)
}
