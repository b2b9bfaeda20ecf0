package engine

// crashForTest stops the engine the way a killed process stops: no
// writeback, no checkpoint, no device flush. Appends already submitted
// finish (the emulated device's power cut then decides what survives).
func (e *Engine) crashForTest() {
	e.closeOnce.Do(func() {}) // a later Close does nothing
	e.active.Or(closingBit)
	e.cancel()
	e.bg.Wait()
	e.raWG.Wait()
	e.waitUntil(func() bool { return e.inflight.Load() == 0 })
	e.stopCompleter()
	e.cache.Close()
	e.hdrs.close()
	e.scratch.close()
	e.meta.close()
}

// reclaim is collector.reclaimFor for tests that look only at progress.
func (c *collector) reclaim(need func() bool, minGain int64) bool {
	moved, _, _ := c.reclaimFor(need, minGain)
	return moved
}
