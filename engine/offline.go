package engine

import (
	"context"
	"time"

	"github.com/zonefold/zonefold/zns"
)

// kickOffline asks the offline watcher to look for zones gone offline:
// a device read or a zone's finish failed. It never waits (it runs on
// the completer and the reaper too).
func (e *Engine) kickOffline() {
	select {
	case e.offlineKick <- struct{}{}:
	default:
	}
}

// Waits of the offline watcher between tries of its checkpoint.
const (
	offlineRetryMin = 10 * time.Millisecond
	offlineRetryMax = time.Second
)

// offlineReportEvery is the least time between two of the offline
// watcher's zone reports: a zone gone offline is found at most this long
// after the failed read that kicked the watcher.
const offlineReportEvery = 100 * time.Millisecond

// offlineWatcher handles the data zones the device reports offline, as
// the engine learns of them (kickOffline), until ctx ends. For each it
// finds, it makes the data the cache still holds of what files map there
// dirty again, so that writeback writes it elsewhere (the device lost
// its copy; the cache holds the file's bytes), and it takes a checkpoint
// (Engine.offlineOwed), which records the zone full: without one, a
// crash left a zone recovery could not rule out records newer than its
// checkpoint in, and the next Open refused the whole file system
// (ErrZoneOffline). What the cache does not hold is lost: reads of it
// fail, and fsck names the files.
//
// A report of every zone is what a kick costs, and every failed device
// read kicks: a client reading a bad block (EIO) in a loop cost a report
// per read (TestFailedReadsInALoopDoNotReportZonesEach). Kicks coalesce
// instead: one report at a time, at least offlineReportEvery apart, and
// a kick that comes while one runs or while the watcher waits out the
// interval is owed one more (the channel holds one), which covers it.
func (e *Engine) offlineWatcher(ctx context.Context) {
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.offlineKick:
		}
		if wait := offlineReportEvery - time.Since(last); !last.IsZero() && wait > 0 && !sleepCtx(ctx, wait) {
			return
		}
		// The report below covers every kick before it.
		select {
		case <-e.offlineKick:
		default:
		}
		last = time.Now()
		found := e.findOffline()
		if len(found) > 0 {
			e.offlineOwed.Store(true)
		}
		if e.offlineLate.Swap(false) {
			// A record was mapped into a zone found before: the
			// zone's list was made without it.
			found = e.foundOffline()
		}
		if len(found) > 0 {
			e.redirtyOffline(found)
		}
		if e.offlineOwed.Load() {
			e.checkpointOffline(ctx)
		}
	}
}

// findOffline returns the data zones the device reports offline that
// the engine had not found yet, and marks them found.
func (e *Engine) findOffline() []*zone {
	report := make([]zns.Zone, e.geo.Zones)
	n, err := e.dev.Report(0, report)
	if err != nil {
		e.log.Warn("engine: report zones (to look for zones gone offline)", "err", err)
		return nil
	}
	var found []*zone
	for i, rz := range report[:n] {
		if rz.Cond != zns.CondOffline || i >= len(e.zones) {
			continue
		}
		if z := e.zones[i]; z != nil && !z.offline.Swap(true) {
			e.log.Error("engine: a data zone is offline: the data files map there no longer reads; what the cache holds of it is written again elsewhere, reads of the rest fail (fsck names the files)",
				"zone", z.idx, "mapped_bytes", z.valid.Load())
			found = append(found, z)
			if e.placer.takeOffline(z) {
				e.kickRetirer()
			}
		}
	}
	return found
}

// foundOffline returns the data zones findOffline found so far.
func (e *Engine) foundOffline() []*zone {
	var found []*zone
	for _, z := range e.zones {
		if z != nil && z.offline.Load() {
			found = append(found, z)
		}
	}
	return found
}

// redirtyOffline makes the cached data of what files map in zones dirty
// again (cache.Redirty). The extents are listed under each file's lock,
// which is released before the cache's (lock order): a range written or
// cut meanwhile is written again as the cache holds it, which is the
// file's bytes either way. A record that lands in a zone before it goes
// offline may be mapped only after this list (the completer maps it
// later): mapRecord then sees the zone found and asks for another pass
// (offlineLate); its blocks may still be under writeback, which Redirty
// marks to go out again after it.
func (e *Engine) redirtyOffline(zones []*zone) {
	in := func(x extent) bool {
		z := e.zoneAt(x.dev)
		for _, o := range zones {
			if z == o {
				return true
			}
		}
		return false
	}
	e.idMu.RLock()
	files := make([]*file, 0, len(e.byID))
	for _, f := range e.byID {
		files = append(files, f)
	}
	e.idMu.RUnlock()
	var lost [][2]int64
	var redirtied int64
	for _, f := range files {
		lost = lost[:0]
		f.mu.RLock()
		f.ext.each(func(x extent) bool {
			if in(x) {
				lost = append(lost, [2]int64{x.off, x.end()})
			}
			return true
		})
		f.mu.RUnlock()
		for _, r := range lost {
			redirtied += e.cache.Redirty(f.id, r[0], r[1])
		}
	}
	if redirtied > 0 {
		e.log.Warn("engine: data of a zone gone offline that the cache holds is written again elsewhere", "bytes", redirtied)
		e.wb.Kick()
	}
}

// checkpointOffline takes the checkpoint an offline zone owes
// (settleStray, which keeps to the metadata switches' backoff), trying
// again with backoff until one lands, the engine closes (Close's
// checkpoint records the zone) or ctx ends.
func (e *Engine) checkpointOffline(ctx context.Context) {
	wait := offlineRetryMin
	for failures := 0; ; failures++ {
		if e.enter() != nil {
			return
		}
		err := e.settleStray()
		e.leave()
		if err == nil {
			return
		}
		if failures == 0 {
			e.log.Warn("engine: no checkpoint after a zone went offline (a crash before one makes the next open refuse); retrying", "err", err)
		}
		if !sleepCtx(ctx, wait) {
			return
		}
		wait = min(2*wait, offlineRetryMax)
	}
}

// sleepCtx waits for d, or until ctx ends (it reports false then).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
