package cli

import (
	"context"
	"os"
	"syscall"
	"time"
)

// A signal barrier answers "has a signal that reached this process
// already been acted on?" for a command about to commit something it
// must not commit when interrupted.
//
// Why: Ctrl-C at a terminal sends SIGINT to the whole foreground
// pipeline, `producer | zonefold put - NAME`. The producer dies of it and
// put reads the end of its input; the kernel made the SIGINT pending for
// put before the producer could die, but Go hands it to Main's loop,
// which cancels the command's context, through goroutines the scheduler
// may run late. On a loaded machine put read the end, fsynced and renamed
// the part it got over NAME before its context ended (CI: 1 round of 8).
//
// How: the barrier raises barrierSignal at the process and waits until
// Main's loop has seen it. Pending standard signals are delivered lowest
// number first, barrierSignal is above every stop signal, and Go passes
// one process's signals through one goroutine to Main's one channel in
// the order it got them, so once Main has seen barrierSignal it has seen
// (and acted on) every stop signal that was pending when the barrier was
// raised. SIGWINCH's default is to be ignored, and one that a terminal
// sends on its own only answers a barrier early: no harm, as the signal
// it waits for was raised before.
const barrierSignal = syscall.SIGWINCH

type barrierKey struct{}

// signalBarrier is Main's half: commands ask through the context.
type signalBarrier struct {
	waiters chan chan struct{}
}

func newSignalBarrier() *signalBarrier {
	return &signalBarrier{waiters: make(chan chan struct{}, 16)}
}

// seen answers every waiter queued so far; Main calls it when
// barrierSignal reaches its loop.
func (b *signalBarrier) seen() {
	for {
		select {
		case w := <-b.waiters:
			close(w)
		default:
			return
		}
	}
}

// settleSignals returns once every signal that reached the process
// before the call has been acted on by Main (for a stop signal: ctx has
// ended), or after a second if Main does not answer (a caller outside
// Main, or Main's channel full and the signal dropped: then the caller
// is no worse off than without a barrier). The caller checks ctx after.
func settleSignals(ctx context.Context) {
	b, _ := ctx.Value(barrierKey{}).(*signalBarrier)
	if b == nil || ctx.Err() != nil {
		return
	}
	w := make(chan struct{})
	select {
	case b.waiters <- w:
	default:
		return
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	give := time.After(time.Second)
	for {
		// Raised again on each tick: Go drops a signal that finds
		// Main's channel full.
		if err := syscall.Kill(os.Getpid(), barrierSignal); err != nil {
			return
		}
		select {
		case <-w:
			return
		case <-ctx.Done():
			return
		case <-give:
			return
		case <-tick.C:
		}
	}
}
