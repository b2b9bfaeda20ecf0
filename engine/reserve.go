package engine

// SetReserved keeps n bytes of the device's free space (what appends can
// take without GC, beyond GC's own reserve) for the files allowed to use
// it (File.SetUseReserved), as ext4's reserved blocks are kept for root:
// a write to any other file is admitted only if n bytes stay free after
// it in the room appends can take (keepsReserve), GC running passes
// (of admission's gain, admitGain) to make that room, and is refused
// with ENOSPC when GC cannot. Garbage counts as free only once GC has
// reclaimed it: headers, pads and garbage too thin to collect never are. Writes of a file allowed the
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

// keepsReserve reports whether, with the writes admitted so far (the
// caller's among them) and the dirty data on the device, keep bytes
// (with their record headers and pads, as roomFor counts them) stay in
// the space appends can take without GC. It counts only that room as
// free, as ext4's reserve is of free blocks: when it is short, the
// writer runs GC passes for charge+keep (admitTails), so garbage counts
// once GC has reclaimed it. Counting every byte that is not live as free
// once GC had run (validBytes) admitted other files into the room the
// reserve stands for: record headers, pads and garbage under minGCGain
// in a zone are never reclaimed, and the file allowed the reserve met
// ENOSPC (TestReserveCountsOnlyReclaimableSpace). Counting free space
// alone without running GC for it refused every table write in bench
// lsm's small runs, whose garbage sits thinly in every zone.
func (e *Engine) keepsReserve(keep int64) bool {
	return e.roomFor(max(keep, 0))
}

// usableBytes is the capacity outside GC's reserve and the zones gone
// offline, which take nothing again (and what files map there is not
// in validBytes).
func (e *Engine) usableBytes() int64 {
	_, offline, _ := e.placer.offlineBytes()
	return e.Capacity() - offline - int64(e.placer.gcReserve)*e.placer.zoneCap()
}

// Available is about how many more bytes of file data the device takes
// from a writer without the reserve (SetReserved): the capacity outside
// GC's reserve, less the valid bytes, the dirty data and the writes
// admitted, and the reserve. GC may need to run to give it (garbage
// counts as available), and record headers and pads take a little of it.
func (e *Engine) Available() int64 {
	return max(0, e.usableBytes()-e.placer.validBytes()-e.cache.DirtyBytes()-e.admitted.Load()-e.reserved.Load())
}
