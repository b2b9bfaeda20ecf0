package engine

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/zonefold/zonefold/internal/wake"
	"github.com/zonefold/zonefold/zns"
)

// flushGroup merges concurrent device flushes: group commit, as a
// journalling file system commits the fsyncs that arrive while a commit
// is under way in the next one. Flushes are numbered as they start and
// run one at a time. A caller needs a flush that started after its data
// was written (the device persists what completed before a flush
// starts, nothing promised about the rest), so it takes the number of
// the next flush to start — its ticket — and returns once a flush with
// that number or a later one has ended. The first caller to find no
// flush running runs the next one, for every caller that took its
// number meanwhile; the others wait. N callers arriving while a flush
// runs cost one more flush, not N.
//
// A flush that fails persists nothing the caller can count on: callers
// of that number get its error, unless a later flush, which covers their
// data too, has succeeded since.
//
// mu is a leaf: held only for the counters, never across the flush.
type flushGroup struct {
	mu      sync.Mutex
	running bool
	started uint64 // flushes started (the number of the latest)
	done    uint64 // the number of the latest flush that ended
	lastOK  uint64 // the number of the latest flush that succeeded
	lastErr error  // the latest failed flush's error
	ended   wake.Wake

	flushes, joined atomic.Int64 // device flushes run; callers another's flush served
}

// ticket is the number of the first flush to start from now on: one that
// covers every write completed before the call.
func (g *flushGroup) ticket() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.started + 1
}

// covered reports whether a flush numbered t or later has succeeded.
func (g *flushGroup) covered(t uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lastOK >= t
}

// flush returns when a device flush that started after the call has
// ended: what completed before the call is durable if it returns nil.
func (g *flushGroup) flush(ctx context.Context, dev zns.Device) error {
	return g.flushFor(ctx, dev, 0)
}

// flushFor returns when a flush numbered t or later has succeeded, or
// one numbered t or later that started after the call has failed. t = 0
// means the next flush to start. ctx cancels the wait for another
// caller's flush, not a flush the caller runs itself.
func (g *flushGroup) flushFor(ctx context.Context, dev zns.Device, t uint64) error {
	g.mu.Lock()
	if t == 0 {
		t = g.started + 1
	}
	if g.lastOK >= t {
		g.mu.Unlock()
		return nil
	}
	// Every flush numbered t or later that ended has failed: wait for one
	// that has not ended yet (the one running, if any, started after the
	// data of ticket t was written).
	target := max(t, g.done+1)
	ran := false
	for g.done < target {
		if !g.running {
			g.running = true
			g.started++
			n := g.started
			g.mu.Unlock()
			err := dev.Flush()
			g.flushes.Add(1)
			ran = true
			g.mu.Lock()
			g.running = false
			g.done = n
			if err == nil {
				g.lastOK = n
			} else {
				g.lastErr = err
			}
			g.ended.Signal()
			continue
		}
		ch := g.ended.Wait()
		g.mu.Unlock()
		if testHookFlushWait != nil {
			testHookFlushWait()
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		g.mu.Lock()
	}
	var err error
	if g.lastOK < t {
		err = g.lastErr
	}
	g.mu.Unlock()
	if !ran {
		g.joined.Add(1)
	}
	return err
}

// testHookFlushWait, if set (by tests only), runs as a caller starts
// waiting for a flush another caller runs.
var testHookFlushWait func()

// flushDevice flushes the device, merged with the concurrent flushes of
// other callers (see flushGroup): when it returns nil, every write that
// completed before the call is durable.
func (e *Engine) flushDevice(ctx context.Context) error {
	return e.flushes.flush(ctx, e.dev)
}
