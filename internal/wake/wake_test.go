package wake

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestNoLostWakeup: a waiter that re-checks its condition after Wait and
// then blocks is always woken by a Signal that follows a change, however
// the two race.
func TestNoLostWakeup(t *testing.T) {
	var w Wake
	for range 2000 {
		var cond atomic.Bool
		var wg sync.WaitGroup
		wg.Go(func() {
			for !cond.Load() {
				ch := w.Wait()
				if cond.Load() {
					return
				}
				<-ch
			}
		})
		cond.Store(true)
		w.Signal()
		wg.Wait()
	}
}

func TestSignalWithoutWaiters(t *testing.T) {
	var w Wake
	w.Signal()
	ch := w.Wait()
	w.Signal()
	<-ch
	w.Signal()
}
