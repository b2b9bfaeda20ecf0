package bench

import (
	"fmt"
	"time"

	"github.com/zonefold/zonefold/uring"
)

// BatchResult is what one configuration of the batching benchmark did.
type BatchResult struct {
	Ops     int64
	Elapsed time.Duration
	Stats   uring.Stats // the ring's counters over the run
}

// IOPS is operations per second.
func (b BatchResult) IOPS() float64 {
	if b.Elapsed <= 0 {
		return 0
	}
	return float64(b.Ops) / b.Elapsed.Seconds()
}

// Add accumulates another run of the same configuration.
func (b *BatchResult) Add(o BatchResult) {
	b.Ops += o.Ops
	b.Elapsed += o.Elapsed
	b.Stats.SQEs += o.Stats.SQEs
	b.Stats.SubmitEnters += o.Stats.SubmitEnters
	b.Stats.WaitEnters += o.Stats.WaitEnters
	b.Stats.Completions += o.Stats.Completions
}

// RunBatches issues rounds of qd operations for about d: each round submits
// qd operations through submit (its argument is the operation's number,
// its Completion the round's), then waits for all of them. Plugged, a round
// enters the kernel once; unplugged, once per operation — the aio
// request-batching comparison.
func RunBatches(r *uring.Ring, qd int, plugged bool, d time.Duration, submit func(i int64, c uring.Completion) error) (BatchResult, error) {
	var g uring.Group
	var res BatchResult
	before := r.Stats()
	start := time.Now()
	deadline := start.Add(d)
	for time.Now().Before(deadline) {
		if plugged {
			r.Plug()
		}
		g.Add(qd)
		var subErr error
		for i := range qd {
			if err := submit(res.Ops+int64(i), &g); err != nil {
				// The rest of the round never reaches the kernel.
				subErr = err
				for range qd - i {
					g.Complete(uring.Result{})
				}
				break
			}
		}
		if plugged {
			if err := r.Unplug(); err != nil && subErr == nil {
				subErr = err
			}
		}
		if _, err := r.WaitGroup(&g, "batch"); err != nil && subErr == nil {
			subErr = err
		}
		if subErr != nil {
			return res, fmt.Errorf("batching benchmark (plugged=%v): %w", plugged, subErr)
		}
		res.Ops += int64(qd)
	}
	res.Elapsed = time.Since(start)
	res.Stats = r.Stats().Sub(before)
	return res, nil
}
