package bench

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// smallLSM is a bench lsm of one zonefold run on a tiny DB (1000 keys),
// its emulated device in the temporary folder.
func smallLSM(t *testing.T) LSMOptions {
	return LSMOptions{Scale: 0.00001, ValueSize: 100, Util: 0.15, Passes: 0.1, Placements: []string{"mru"}, Rounds: 1,
		BlockCache: 1 << 20, Out: t.TempDir(), Seed: 1, Sample: DefaultLSM.Sample}
}

// runLSMGuarded runs measureLSM with the temporary folder set to a new
// one, which it returns, and fails the test if the run does not return
// within a minute: a hang guard, not a timing assertion.
func runLSMGuarded(t *testing.T, ctx context.Context, o LSMOptions) (string, error) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	done := make(chan error, 1)
	go func() {
		_, _, err := measureLSM(ctx, "", o)
		done <- err
	}()
	select {
	case err := <-done:
		return tmp, err
	case <-time.After(time.Minute):
		t.Fatal("bench lsm did not return within a minute (hang guard)")
		return "", nil
	}
}

// stallRig is a test's interruption of a run stalled in a write: a
// short lsmStopGrace, the context to cancel, the stalled write's release
// and a count of the runs runStoppable started that have returned.
type stallRig struct {
	ctx      context.Context
	cancel   context.CancelFunc
	release  chan struct{}
	runsDone atomic.Int32
	finished chan struct{}
}

// newStallRig sets it up. At the test's end it releases the stalled
// write and waits until runs runs have returned (the abandoned one goes
// on, and ends on the context), so that no run of this test is left
// to call the hooks of the next, nor to write where cleanup removes.
func newStallRig(t *testing.T, runs int32) *stallRig {
	r := &stallRig{release: make(chan struct{}), finished: make(chan struct{}, runs)}
	r.ctx, r.cancel = context.WithCancel(t.Context())
	grace := lsmStopGrace
	lsmStopGrace = 100 * time.Millisecond
	done := func() {
		r.runsDone.Add(1)
		r.finished <- struct{}{}
	}
	testHookLSMRunDone.Store(&done)
	t.Cleanup(func() {
		r.cancel()
		close(r.release)
		for range runs {
			select {
			case <-r.finished:
			case <-time.After(time.Minute):
				t.Error("an abandoned run did not return within a minute of its release (hang guard)")
				return
			}
		}
		testHookLSMRunDone.Store(nil)
		lsmStopGrace = grace
	})
	return r
}

// assertEmpty fails the test if dir holds anything.
func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("left behind in the temporary folder: %s", e.Name())
	}
}

// An interrupt (SIGTERM, ctrl-C: the context is cancelled) stops bench
// lsm even while Pebble is stalled in a write, and leaves no temporary
// device behind. The stall here is a write that never returns (the
// hook blocks it until the test ends), as a write stall waiting for
// compactions a full device fails does. Before, the run checked the
// context only between writes and waited for the stalled one forever:
// the hang guard fired.
func TestLSMInterruptedWhileStalledInAWrite(t *testing.T) {
	rig := newStallRig(t, 1)
	stall := func(i int64) {
		if i == 500 {
			rig.cancel()
			<-rig.release
		}
	}
	testHookLSMSet.Store(&stall)
	t.Cleanup(func() { testHookLSMSet.Store(nil) })
	tmp, err := runLSMGuarded(t, rig.ctx, smallLSM(t))
	t.Logf("bench lsm: %v", err)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("bench lsm returned %v, want an interruption (context.Canceled)", err)
	}
	assertEmpty(t, tmp)
}

// A panic in the goroutine that runs Pebble is bench lsm's error, and
// the temporary device goes all the same. Before, the panic ended the
// test binary.
func TestLSMPebblePanicIsAnError(t *testing.T) {
	boom := func(i int64) {
		if i == 500 {
			panic("test: Pebble fails an invariant")
		}
	}
	testHookLSMSet.Store(&boom)
	defer testHookLSMSet.Store(nil)
	tmp, err := runLSMGuarded(t, t.Context(), smallLSM(t))
	t.Logf("bench lsm: %v", err)
	var p *lsmPanic
	if !errors.As(err, &p) {
		t.Fatalf("bench lsm returned %v, want Pebble's panic as an error", err)
	}
	assertEmpty(t, tmp)
}

// An interrupted baseline run that Pebble does not stop within the grace
// is left running, and keeps its folder: Pebble's goroutines may still
// write there. Before, runLSMKernel removed the folder (deferred) as it
// returned, under a Pebble still running, whose failed writes could end
// the process in Pebble's fatal log before the interruption was reported.
func TestLSMAbandonedBaselineKeepsItsFolder(t *testing.T) {
	against, err := os.MkdirTemp("", "zonefold-lsm-against-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(against) }) // after the rig's wait
	// Two runs: zonefold's, which sizes the work, then the baseline's,
	// stalled at its 500th write.
	rig := newStallRig(t, 2)
	var stalled atomic.Bool
	stall := func(i int64) {
		if i == 500 && rig.runsDone.Load() == 1 && stalled.CompareAndSwap(false, true) {
			rig.cancel()
			<-rig.release
		}
	}
	testHookLSMSet.Store(&stall)
	t.Cleanup(func() { testHookLSMSet.Store(nil) })
	o := smallLSM(t)
	o.Against = against
	_, err = runLSMGuarded(t, rig.ctx, o)
	t.Logf("bench lsm: %v", err)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), lsmKernel) {
		t.Fatalf("bench lsm returned %v, want the baseline's interruption", err)
	}
	ents, err := os.ReadDir(against)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || !strings.HasPrefix(ents[0].Name(), "pebble-") {
		t.Fatalf("--against holds %v, want the abandoned run's folder", ents)
	}
	lsmTemps.remove(filepath.Join(against, ents[0].Name()))
}

// A device Pebble fills (here --util 0.6, above the cap: its files take
// two to three times the keys and values) ends the run with an error
// that says so, and the run returns: Pebble, which retries a compaction
// that met ENOSPC without end while its writes stall (at --util 0.36,
// 463 refused table writes in 5 minutes, until the run was killed), or
// panics on a WAL write, is left before either. Before, the hang guard
// fired or the process died.
func TestLSMFullDeviceEndsTheRun(t *testing.T) {
	rig := newStallRig(t, 0)
	limit := lsmUtilLimit
	lsmUtilLimit = 1
	t.Cleanup(func() { lsmUtilLimit = limit })
	o := LSMOptions{Scale: 0.0001, ValueSize: 1024, Util: 0.6, Passes: 1, Placements: []string{"mru"}, Rounds: 1,
		BlockCache: 1 << 20, Out: t.TempDir(), Seed: 1, Sample: DefaultLSM.Sample}
	_, err := runLSMGuarded(t, rig.ctx, o)
	t.Logf("bench lsm: %v", err)
	if !errors.Is(err, errLSMDeviceFull) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("bench lsm on a device Pebble fills: %v, want errLSMDeviceFull wrapping ENOSPC", err)
	}
}
