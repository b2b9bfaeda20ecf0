package server

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/zonefold/zonefold/engine"
)

// execHook, set by tests, runs before each request: it lets a test hold
// a request in flight to observe what else proceeds meanwhile, or play a
// broken daemon (its reply, tag already set, is the second argument).
var execHook atomic.Pointer[func(*Request, *Reply)]

// exec runs one parsed request and fills in its reply. It never panics
// on what the request says: the parser bounded every range, and what
// depends on state (handles, names) is checked here.
func (c *conn) exec(sl *slot) {
	q, r := &sl.req, &sl.rep
	if hook := execHook.Load(); hook != nil {
		(*hook)(q, r)
	}
	stats := &c.s.stats
	stats.requests[q.Op].Add(1)
	e := c.s.e
	switch q.Op {
	case OpNop:
	case OpRead, OpWrite:
		h, st := c.handle(q.Handle)
		if st != StatusOK {
			r.Status = st
			return
		}
		buf := c.region[q.Addr : q.Addr+uint64(q.Len)]
		var n int
		var err error
		if q.Op == OpRead {
			n, err = h.f.ReadAtContext(c.ctx, buf, int64(q.Off))
			stats.bytesRead.Add(int64(n))
		} else {
			n, err = h.f.WriteAtContext(c.ctx, buf, int64(q.Off))
			stats.bytesWritten.Add(int64(n))
		}
		h.mu.RUnlock()
		r.Val = uint64(n)
		r.Status = c.status(err)
	case OpFsync, OpTruncate, OpFstat:
		if q.Op == OpFsync && q.Handle == 0 {
			r.Status = c.status(e.Sync(c.ctx))
			return
		}
		h, st := c.handle(q.Handle)
		if st != StatusOK {
			r.Status = st
			return
		}
		var err error
		switch q.Op {
		case OpFsync:
			err = h.f.SyncContext(c.ctx)
		case OpTruncate:
			if q.Flags&TruncateGrow != 0 {
				err = h.f.Grow(int64(q.Off))
			} else {
				err = h.f.Truncate(int64(q.Off))
			}
		default:
			var fi engine.FileInfo
			if fi, err = h.f.Fstat(); err == nil {
				r.Val, r.Val2 = uint64(fi.Size), fi.ID
			}
		}
		h.mu.RUnlock()
		r.Status = c.status(err)
	case OpOpen:
		c.open(q, r)
	case OpClose:
		r.Status = c.closeHandle(q.Handle)
	case OpRemove:
		remove := e.Remove
		if q.Flags&RemoveUnused != 0 {
			remove = e.RemoveUnused
		}
		name := c.name(q.Addr, q.Len)
		if r.Status = c.status(remove(name)); r.Status == StatusOK {
			c.forgetTemp(name)
		}
	case OpRename:
		old, to := c.name(q.Addr, q.Len), c.name(q.Addr+uint64(q.Len), q.Len2)
		if isTemporary(to) {
			r.Status = StatusReserved
			return
		}
		if r.Status = c.status(e.Rename(old, to)); r.Status == StatusOK {
			c.forgetTemp(old)
		}
	case OpStat:
		fi, err := e.Stat(c.name(q.Addr, q.Len))
		r.Status = c.status(err)
		r.Val, r.Val2 = uint64(fi.Size), fi.ID
	case OpList:
		c.list(q, r)
	case OpStats:
		b, err := json.Marshal(e.Stats())
		if err != nil {
			r.Status = StatusIO
			return
		}
		r.Val = uint64(len(b))
		if len(b) > int(q.Len) {
			r.Status = StatusOverflow
			return
		}
		copy(c.region[q.Addr:], b)
	default:
		r.Status = StatusNoOp // the parser refuses these; kept for safety
	}
}

// status maps an engine error onto a status, and logs the errors that
// are the daemon's problem rather than the client's. A device error
// joined to a cancellation is the device error (see statusOf).
func (c *conn) status(err error) Status {
	if err == nil {
		return StatusOK
	}
	if errors.Is(err, context.Canceled) && !errors.Is(err, syscall.EIO) {
		c.s.stats.canceled.Add(1)
		if c.stopping.Load() {
			return StatusShutdown
		}
		return StatusCanceled
	}
	st := statusOf(err)
	if st == StatusIO {
		c.log.Error("server: request failed", "err", err)
	}
	if st == StatusNoSpace && c.s.e.KeepsNoData() && !c.s.fullWarned.Swap(true) {
		// Clients see a bare ENOSPC on a device far from full of
		// live data: the log says why, once.
		c.log.Warn("server: device full: writes get ENOSPC from now on", "err", err)
	}
	if errors.Is(err, engine.ErrNamespaceFull) {
		// A bare ENOSPC at a create, with the data zones nearly
		// free: the log says why, at most once a minute.
		now := time.Now().UnixNano()
		if last := c.s.namesFullLogged.Load(); now-last >= int64(time.Minute) && c.s.namesFullLogged.CompareAndSwap(last, now) {
			c.log.Warn("server: the files' names fill the metadata: creates and renames to longer names get ENOSPC until files are removed", "err", err)
		}
	}
	return st
}

// name copies a name out of the region: the client may change the
// region at any time, and the engine keeps names.
func (c *conn) name(addr uint64, n uint32) string {
	return string(c.region[addr : addr+uint64(n)])
}

func (c *conn) open(q *Request, r *Reply) {
	var flags engine.OpenFlag
	if q.Flags&OpenCreate != 0 {
		flags |= engine.OCreate
	}
	if q.Flags&OpenExcl != 0 {
		flags |= engine.OExcl
	}
	if q.Flags&OpenTrunc != 0 {
		flags |= engine.OTrunc
	}
	if q.Flags&OpenDeferSync != 0 {
		flags |= engine.ODeferSync
	}
	// The handle number first: an open refused for want of one
	// (EMFILE) must not have truncated or created the file, as open(2)
	// does neither when it fails so.
	id, st := c.reserveHandle()
	if st != StatusOK {
		r.Status = st
		return
	}
	name := c.name(q.Addr, q.Len)
	f, err := c.s.e.OpenFile(name, flags)
	if err != nil {
		c.releaseHandle(id)
		r.Status = c.status(err)
		return
	}
	// Only an exclusive create is known to have made the file: a plain
	// create may have opened another connection's temporary, which this
	// one's end must not remove.
	if flags&engine.OCreate != 0 && flags&engine.OExcl != 0 && isTemporary(name) {
		c.tempsMu.Lock()
		if c.temps == nil {
			c.temps = map[string]uint64{}
		}
		c.temps[name] = f.Stat().ID
		prune := len(c.temps) >= max(c.tempsPruneAt, minTempsPrune)
		c.tempsMu.Unlock()
		if prune {
			c.pruneTemps()
		}
	}
	c.setHandle(id, f)
	r.Val, r.Val2 = uint64(id), uint64(f.Size())
}

func (c *conn) list(q *Request, r *Reply) {
	out := c.region[q.Addr : q.Addr : q.Addr+uint64(q.Len)]
	n, need := 0, 0
	add := func(fi engine.FileInfo) bool {
		var ok bool
		if out, ok = appendListEntry(out, int(q.Len), fi.Size, fi.Name); !ok {
			if n == 0 {
				need = listEntryHeader + len(fi.Name)
			}
			return false
		}
		n++
		return true
	}
	if q.Flags&ListAfter != 0 {
		// From the cursor on, in name order: a page costs its entries,
		// not the whole namespace (engine.ListAfter).
		after := c.name(q.Addr, uint32(q.Off)) // read before the entries overwrite it
		r.Val2 = uint64(c.s.e.ListAfter(after, func(fi engine.FileInfo) bool {
			c.s.listScanned.Add(1)
			return add(fi)
		}))
	} else {
		all := c.s.e.List()
		c.s.listScanned.Add(int64(len(all)))
		r.Val2 = uint64(len(all))
		if q.Off < uint64(len(all)) {
			for _, fi := range all[q.Off:] {
				if !add(fi) {
					break
				}
			}
		}
	}
	if n == 0 && need > 0 {
		r.Status = StatusOverflow
		r.Val = uint64(need)
		return
	}
	r.Val = uint64(n)
}

// handle looks up an open handle and returns it read-locked; the caller
// unlocks it when done with the file.
func (c *conn) handle(id uint32) (*handle, Status) {
	if id == 0 || id > MaxHandles {
		return nil, StatusBadHandle
	}
	i := id - 1
	chunk := c.handles.chunks[i/handleChunk].Load()
	if chunk == nil {
		return nil, StatusBadHandle
	}
	h := &chunk[i%handleChunk]
	h.mu.RLock()
	if h.f == nil {
		h.mu.RUnlock()
		return nil, StatusBadHandle
	}
	return h, StatusOK
}

// reserveHandle takes a handle number for a file about to be opened;
// until setHandle gives it the file, requests find no handle there.
func (c *conn) reserveHandle() (uint32, Status) {
	t := &c.handles
	t.mu.Lock()
	defer t.mu.Unlock()
	var id uint32
	if n := len(t.free); n > 0 {
		id = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		if t.next == 0 {
			t.next = 1
		}
		if t.next > MaxHandles {
			return 0, StatusTooMany
		}
		id = t.next
		t.next++
	}
	i := id - 1
	if t.chunks[i/handleChunk].Load() == nil {
		t.chunks[i/handleChunk].Store(new([handleChunk]handle))
	}
	return id, StatusOK
}

// setHandle gives a reserved handle number its file.
func (c *conn) setHandle(id uint32, f *engine.File) {
	i := id - 1
	h := &c.handles.chunks[i/handleChunk].Load()[i%handleChunk]
	h.mu.Lock()
	h.f = f
	h.mu.Unlock()
}

// releaseHandle gives back a reserved handle number whose open failed.
func (c *conn) releaseHandle(id uint32) {
	t := &c.handles
	t.mu.Lock()
	t.free = append(t.free, id)
	t.mu.Unlock()
}

// closeHandle closes a handle once no request is using it.
func (c *conn) closeHandle(id uint32) Status {
	if id == 0 || id > MaxHandles {
		return StatusBadHandle
	}
	t := &c.handles
	i := id - 1
	chunk := t.chunks[i/handleChunk].Load()
	if chunk == nil {
		return StatusBadHandle
	}
	h := &chunk[i%handleChunk]
	h.mu.Lock()
	f := h.f
	h.f = nil
	h.mu.Unlock()
	if f == nil {
		return StatusBadHandle
	}
	f.Close()
	t.mu.Lock()
	t.free = append(t.free, id)
	t.mu.Unlock()
	return StatusOK
}

// endTemps removes the temporaries this connection created (with an
// exclusive create, as zonefold put does) that still
// hold its files (not renamed away, nor replaced by another client's
// file at the name): their client is gone, nothing will rename them, and
// the next start would remove them anyway; until then they held their
// space (a killed put's copy). The removals are not flushed: a crash
// before the next flush brings them back for the next start to remove.
// No request is running.
func (c *conn) endTemps() {
	c.tempsMu.Lock()
	temps := c.temps
	c.temps = nil
	c.tempsMu.Unlock()
	for name, id := range temps {
		fi, err := c.s.e.Stat(name)
		if err != nil || fi.ID != id {
			continue
		}
		removeTemporary(c.log, c.s.e.RemoveDeferred, fi, "of a connection that ended")
	}
}

// minTempsPrune is the fewest temporaries a connection lists before
// pruneTemps looks for the ones gone from their names.
const minTempsPrune = 64

// forgetTemp drops name from the connection's temporaries once it
// renamed or removed the file there: nothing of its own is left at
// that name to remove when it ends. A client that lives for days and
// puts its files through temporaries listed one name per file for its
// whole life (TestH38bTemporariesListStaysBounded). The entry goes only
// if the name does not hold its file: a create of the name again that
// this connection pipelined beside the remove may have run between the
// remove and here, and its entry is the new file's, to be removed when
// the connection ends (TestForgetTempKeepsACreateThatRanBetween). The
// stat runs without tempsMu, a leaf lock.
func (c *conn) forgetTemp(name string) {
	if !isTemporary(name) {
		return
	}
	if hook := testHookForgetTemp.Load(); hook != nil {
		(*hook)(c, name)
	}
	c.tempsMu.Lock()
	id, ok := c.temps[name]
	c.tempsMu.Unlock()
	if !ok {
		return
	}
	if fi, err := c.s.e.Stat(name); err == nil && fi.ID == id {
		return
	}
	c.tempsMu.Lock()
	if c.temps[name] == id {
		delete(c.temps, name)
	}
	c.tempsMu.Unlock()
}

// testHookForgetTemp, set by tests only, runs as forgetTemp begins (an
// atomic: the race detector does not see the rings' synchronization).
var testHookForgetTemp atomic.Pointer[func(c *conn, name string)]

// pruneTemps drops the temporaries whose names no longer hold the files
// this connection created there (another connection renamed or removed
// them), and lets the list grow to twice what is left before the next
// pruning: the list stays within twice the temporaries still there (at
// least minTempsPrune), for a stat per temporary created, amortized.
// The stats run without tempsMu, a leaf lock.
func (c *conn) pruneTemps() {
	c.tempsMu.Lock()
	names := make([]string, 0, len(c.temps))
	ids := make([]uint64, 0, len(c.temps))
	for name, id := range c.temps {
		names = append(names, name)
		ids = append(ids, id)
	}
	c.tempsMu.Unlock()
	var gone []int
	for i, name := range names {
		if fi, err := c.s.e.Stat(name); err != nil || fi.ID != ids[i] {
			gone = append(gone, i)
		}
	}
	c.tempsMu.Lock()
	for _, i := range gone {
		if id, ok := c.temps[names[i]]; ok && id == ids[i] {
			delete(c.temps, names[i])
		}
	}
	c.tempsPruneAt = 2 * len(c.temps)
	c.tempsMu.Unlock()
}

// closeHandles closes every handle; no request is running.
func (c *conn) closeHandles() {
	for i := range c.handles.chunks {
		chunk := c.handles.chunks[i].Load()
		if chunk == nil {
			continue
		}
		for j := range chunk {
			if f := chunk[j].f; f != nil {
				f.Close()
				chunk[j].f = nil
			}
		}
	}
}
