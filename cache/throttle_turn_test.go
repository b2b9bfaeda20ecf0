package cache

import (
	"context"
	"runtime"
	"testing"
)

// TestThrottleServesWritersInTurn: writers throttled behind dirty data go
// on in the order they came, and a writer that comes while others wait
// waits behind them even when dirty bytes are under the limit just then.
// Before, every waiter waited for dirty bytes to fall and a writer coming
// back from its last write found them under the limit before the woken
// waiters ran: on bench gc's uniform workload (64 writers, a 4 MiB cache,
// a device near full) the two busiest writers did every write of each
// 5 ms, and the other files went unwritten for hundreds of milliseconds.
func TestThrottleServesWritersInTurn(t *testing.T) {
	c := newTestCache(t, Config{Bytes: 4 << 20, MaxOrder: 9, DirtyLimit: 64 << 10})
	turn := func(w *throttleWaiter) bool {
		select {
		case <-w.turn:
			return true
		default:
			return false
		}
	}

	// Nothing is dirty, but a writer waits its turn: a new write waits
	// behind it, and goes on once it has left.
	first := c.throttleJoin()
	if !c.Throttling() {
		t.Fatal("Throttling() is false while a writer waits its turn")
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Write(context.Background(), c.File(2), 0, fill(4096, 2), nil)
		done <- err
	}()
	for c.throttledN.Load() < 2 {
		runtime.Gosched()
	}
	select {
	case err := <-done:
		t.Fatalf("a write went ahead of a writer waiting its turn (%v)", err)
	default:
	}
	c.throttleLeave(first)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if c.Throttling() {
		t.Fatal("Throttling() is true with nothing dirty and nobody waiting")
	}

	// Turns go in the order writers came; one that gives up out of turn
	// hands nothing on.
	a, b, d := c.throttleJoin(), c.throttleJoin(), c.throttleJoin()
	if !turn(a) || turn(b) || turn(d) {
		t.Fatalf("turns after three joins: %v %v %v, want only the first's", turn(a), turn(b), turn(d))
	}
	c.throttleLeave(b)
	if turn(d) {
		t.Fatal("the third writer got its turn when the second gave up while the first still had it")
	}
	c.throttleLeave(a)
	if !turn(d) {
		t.Fatal("the third writer did not get its turn when the first left")
	}
	c.throttleLeave(d)
	if n := c.throttledN.Load(); n != 0 {
		t.Fatalf("%d writers queued after all left", n)
	}
}
