package bench

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// smallLSM is a bench lsm of one zonefold run on a tiny DB (1000 keys),
// its emulated device in the temporary folder.
func smallLSM(t *testing.T) LSMOptions {
	return LSMOptions{Scale: 0.00001, ValueSize: 100, Util: 0.3, Passes: 0.1, Placements: []string{"mru"}, Rounds: 1,
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
	grace := lsmStopGrace
	lsmStopGrace = 100 * time.Millisecond
	defer func() { lsmStopGrace = grace }()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	release := make(chan struct{})
	defer close(release) // the abandoned run goes on, and ends on the context
	stall := func(i int64) {
		if i == 500 {
			cancel()
			<-release
		}
	}
	testHookLSMSet.Store(&stall)
	defer testHookLSMSet.Store(nil)
	tmp, err := runLSMGuarded(t, ctx, smallLSM(t))
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
