// Package wake is a broadcast wake-up for goroutines that wait for a
// condition other goroutines change: memory freed, writeback ended, a
// count of operations in flight reaching zero. It replaces polling.
//
// Use: a waiter takes the channel with Wait, re-checks its condition, and
// only then blocks on the channel; whoever changes the condition calls
// Signal afterwards. A change after the re-check closes the channel the
// waiter holds, so no wake-up is lost. Signal costs one atomic load while
// nobody waits. The zero value is ready to use.
package wake

import (
	"sync"
	"sync/atomic"
)

// Wake wakes every goroutine waiting on it at once.
type Wake struct {
	armed atomic.Bool // someone holds ch: Signal has work to do
	mu    sync.Mutex  // a leaf: nothing is taken under it
	ch    chan struct{}
}

// Wait returns a channel that Signal closes.
func (w *Wake) Wait() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	w.armed.Store(true)
	return w.ch
}

// Signal wakes every goroutine waiting on a channel from Wait.
func (w *Wake) Signal() {
	if !w.armed.Load() {
		return
	}
	w.mu.Lock()
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
	w.armed.Store(false)
	w.mu.Unlock()
}
