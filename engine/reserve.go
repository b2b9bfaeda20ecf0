package engine

// SetReserved keeps n bytes of the device's free space (what appends can
// take without GC, beyond GC's own reserve) for the files allowed to use
// it (File.SetUseReserved), as ext4's reserved blocks are kept for root:
// a write to any other file is admitted only if n bytes stay free after
// it, counting garbage GC can reclaim as free (keepsReserve), and is
// refused with ENOSPC when they would not. Writes of a file allowed the
// reserve are admitted as without one, and when admission would refuse
// one for the cost of GC's passes (admitGain) they run passes of any
// gain instead. n <= 0 keeps none, the default.
//
// An application on a full device whose log write is fatal (Pebble's WAL
// and MANIFEST) reserves what those files may need beyond the space its
// other files hold, so that its other writes (tables, which it retries)
// meet ENOSPC first. Truncates and a failed truncate's undo, which do not
// take new space, are not held to the reserve.
func (e *Engine) SetReserved(n int64) { e.reserved.Store(max(n, 0)) }

// Reserved is the bytes SetReserved keeps.
func (e *Engine) Reserved() int64 { return e.reserved.Load() }

// SetUseReserved allows the file's writes the space SetReserved keeps
// (or, with ok false, no longer). It holds for every handle of the file,
// until the engine closes; it is not logged.
func (h *File) SetUseReserved(ok bool) { h.f.useReserved.Store(ok) }

// keepFor is the space a write to f must leave free: the reserve, unless
// f may use it.
func (e *Engine) keepFor(f *file) int64 {
	if f != nil && f.useReserved.Load() {
		return 0
	}
	return e.reserved.Load()
}

// keepsReserve reports whether keep bytes stay for the files allowed
// the reserve once the writes admitted so far (the caller's among them)
// and the dirty data are on the device: free for appends now, or, as the
// reserve is of space (ext4's of free blocks), once GC has reclaimed the
// garbage: the live bytes leave keep of the capacity outside GC's
// reserve. Counting free space alone (garbage as used), bench lsm's
// small runs, whose garbage sits thinly in every zone, had every table
// write refused with a tenth of the device live.
func (e *Engine) keepsReserve(keep int64) bool {
	if keep <= 0 {
		return true
	}
	need := e.cache.DirtyBytes() + e.admitted.Load()
	if e.placer.space() >= need+keep {
		return true
	}
	return e.placer.validBytes()+need+keep <= e.usableBytes()
}

// usableBytes is the capacity outside GC's reserve.
func (e *Engine) usableBytes() int64 {
	return e.Capacity() - int64(e.placer.gcReserve)*e.placer.zoneCap()
}
