package engine

import (
	"context"
	"fmt"
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
// A device that is a zns.CutFlusher covers what completed before a point
// inside its flush (the emulator's copy of its zone table), not only
// before the call: until the running flush reports that cut, a new
// caller takes its number rather than the next one, and is served by it.
// A caller that came after the cut still waits for the next flush.
//
// A flush that fails persists nothing the caller can count on: callers
// of that number get its error, unless a later flush, which covers their
// data too, has succeeded since.
//
// mu is a leaf: held only for the counters, never across the flush.
type flushGroup struct {
	mu      sync.Mutex
	running bool
	// cut: the running flush has taken its cut (see above); a caller
	// from now on needs the next one. Set as it starts on a device that
	// is no zns.CutFlusher.
	cut     bool
	started uint64 // flushes started (the number of the latest)
	done    uint64 // the number of the latest flush that ended
	lastOK  uint64 // the number of the latest flush that succeeded
	lastErr error  // the latest failed flush's error
	ended   wake.Wake

	flushes, joined atomic.Int64 // device flushes run; callers another's flush served
}

// ticket is the number of the first flush that covers every write
// completed before the call: the running one if it has not taken its cut
// yet, else the next to start.
func (g *flushGroup) ticket() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.nextLocked()
}

// nextLocked is ticket's number: the running flush's while it has not
// taken its cut, else the next one's. Caller holds mu.
func (g *flushGroup) nextLocked() uint64 {
	if g.running && !g.cut {
		return g.started
	}
	return g.started + 1
}

// covered reports whether a flush numbered t or later has succeeded.
func (g *flushGroup) covered(t uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lastOK >= t
}

// flush returns when a device flush whose cut came after the call has
// ended: what completed before the call is durable if it returns nil.
func (g *flushGroup) flush(ctx context.Context, dev zns.Device) error {
	return g.flushFor(ctx, dev, 0)
}

// flushFor returns when a flush numbered t or later has succeeded, or
// one numbered t or later that started after the call has failed. t = 0
// means the call's ticket (see ticket). ctx cancels the wait for another
// caller's flush, not a flush the caller runs itself.
func (g *flushGroup) flushFor(ctx context.Context, dev zns.Device, t uint64) error {
	g.mu.Lock()
	if t == 0 {
		t = g.nextLocked()
	}
	if g.lastOK >= t {
		g.mu.Unlock()
		return nil
	}
	// Every flush numbered t or later that ended has failed: wait for one
	// that has not ended yet (the one running, if any, took its cut
	// after the data of ticket t was written).
	target := max(t, g.done+1)
	ran := false
	for g.done < target {
		if !g.running {
			g.running = true
			g.started++
			n := g.started
			cf, ok := dev.(zns.CutFlusher)
			g.cut = !ok
			g.mu.Unlock()
			var err error
			if ok {
				err = cf.FlushCut(g.cutTaken)
			} else {
				err = dev.Flush()
			}
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

// cutTaken is the running flush's cut (zns.CutFlusher): callers from
// now on need the next flush. The device calls it with its own locks
// held; mu is a leaf.
func (g *flushGroup) cutTaken() {
	g.mu.Lock()
	g.cut = true
	g.mu.Unlock()
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

// settledFlush is flushDevice for a caller outside metaLog.mu: a failed
// append's or operation's record is superseded first (settleStray), so
// that the flush does not make it durable. Every device flush but the
// checkpoint's own (which runs under metaLog.mu, after the checkpoint
// has superseded such records) goes through here or flushAcked.
func (e *Engine) settledFlush(ctx context.Context) error {
	if err := e.settleStray(); err != nil {
		return err
	}
	if err := e.flushDevice(ctx); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	return nil
}
