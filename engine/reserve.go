package engine

import "fmt"

// SetReserved keeps n bytes of the device's free space (what appends can
// take without GC, beyond GC's own reserve) for the files allowed to use
// it (File.SetUseReserved), as ext4's reserved blocks are kept for root:
// a write to any other file is admitted only while n bytes stay free
// after it, and is refused with ENOSPC (after GC, as any write is) when
// they would not. Writes of a file allowed the reserve are admitted as
// without one. n <= 0 keeps none, the default.
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

// reservedNote says, in a refused write's error, that the reserve was
// kept from it.
func reservedNote(keep int64) string {
	if keep == 0 {
		return ""
	}
	return fmt.Sprintf(" (and %d reserved for other files)", keep)
}
