package engine

import "time"

// crashForTest stops the engine the way a killed process stops: no
// writeback, no checkpoint, no device flush. Appends already submitted
// finish (the emulated device's power cut then decides what survives).
func (e *Engine) crashForTest() {
	e.nsMu.Lock()
	e.closed = true
	e.nsMu.Unlock()
	e.cancel()
	e.bg.Wait()
	for e.inflight.Load() > 0 {
		_ = e.ring.Flush()
		time.Sleep(50 * time.Microsecond)
	}
	e.cache.Close()
	e.hdrs.close()
	e.scratch.close()
	e.meta.close()
}
