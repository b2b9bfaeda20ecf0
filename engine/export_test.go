package engine

// crashForTest stops the engine the way a killed process stops: no
// writeback, no checkpoint, no device flush. Appends already submitted
// finish (the emulated device's power cut then decides what survives).
func (e *Engine) crashForTest() {
	e.closeOnce.Do(func() {}) // a later Close does nothing
	e.active.Or(closingBit)
	// The settlers' waits end (Close's drain would wait for a try in
	// progress; a crash leaves it running on a closed cache, which
	// panicked the power-cut loop), and they are waited for below.
	select {
	case <-e.closingCh:
	default:
		close(e.closingCh)
	}
	e.cancel()
	e.bg.Wait()
	e.raWG.Wait()
	e.settlers.Wait() // before the appends' wait: a try appends
	e.waitUntil(func() bool { return e.inflight.Load() == 0 })
	// No cold read runs now, nor can one begin: the finisher ends too.
	// Left running, it kept each crashed engine (its sum cache, its
	// zone table) reachable: CI's engine tests grew to 22 GiB and were
	// killed by the OOM killer.
	e.stopColdFinisher()
	e.stopCompleter()
	e.cache.Close()
	e.hdrs.close()
	e.scratch.close()
	e.coldScratch.close()
	e.meta.close()
}

// reclaim is collector.reclaimFor for tests that look only at progress.
func (c *collector) reclaim(need func() bool, minGain int64) bool {
	moved, _, _ := c.reclaimFor(need, minGain)
	return moved
}
