package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/btree"

	"github.com/zonefold/zonefold/cache"
	"github.com/zonefold/zonefold/uring"
)

// FileInfo describes a file.
type FileInfo struct {
	Name    string
	ID      uint64
	Size    int64
	Extents int
}

// File is an open file. Its methods have the semantics of os.File's:
// reads past the end return io.EOF, writes past it extend the file with
// zeros. A File may be used from several goroutines.
type File struct {
	e      *Engine
	f      *file
	closed atomic.Bool
	ra     readahead
	// errSeen is the handle's cursor in its file's writeback failures
	// (writeback.ErrCursor, guarded by the writeback's lock): its fsync
	// reports each failure after it once, so every handle open when a
	// writeback failed sees it, as every file descriptor does on Linux.
	errSeen uint64
}

// MaxNameLen bounds file names.
const MaxNameLen = 255

// CheckName says whether name can name a file, and if not, why (wrapping
// fs.ErrInvalid): a client can refuse a name before it writes a byte.
func CheckName(name string) error {
	var why string
	switch {
	case name == "":
		why = "an empty name"
	case len(name) > MaxNameLen:
		why = fmt.Sprintf("a name of %d bytes, more than %d (%q...)", len(name), MaxNameLen, name[:32])
	case strings.ContainsRune(name, 0):
		why = fmt.Sprintf("a name with a NUL byte (%q)", name)
	default:
		return nil
	}
	return fmt.Errorf("engine: invalid file name: %s: %w", why, fs.ErrInvalid)
}

// OpenFlag modifies OpenFile, like os.O_CREATE, os.O_EXCL and os.O_TRUNC.
type OpenFlag int

const (
	OCreate OpenFlag = 1 << iota // create the file if it does not exist
	OExcl                        // with OCreate: fail with fs.ErrExist if it does
	OTrunc                       // empty an existing file
	// ODeferSync, with OCreate, logs a creation without flushing the
	// device: the file is durable from the next flush that acknowledges
	// something — its own Sync, any other file's, SyncNamespace,
	// Engine.Sync, Close, or a namespace change made without it — as a
	// created file on a kernel file system is from the fsync of its
	// directory. A crash before that loses the file. On a device of
	// format 3 its record is held until then, packed with the others
	// held (metaPack), so that a burst of them takes a log block per
	// pack, not per file.
	ODeferSync
)

// Create opens name, creating it if it does not exist; like os.Create it
// truncates an existing file.
func (e *Engine) Create(name string) (*File, error) {
	return e.OpenFile(name, OCreate|OTrunc)
}

// Open opens an existing file.
func (e *Engine) Open(name string) (*File, error) {
	return e.OpenFile(name, 0)
}

// OpenFile opens name as flags say. Creation is durable when OpenFile
// returns (without ODeferSync); OCreate|OExcl decides atomically that this
// call created it. A created file is in the namespace from when its
// record is logged, before that record's flush ends (as a kernel file
// system's is before its directory's fsync); if the flush fails, the
// create returns the error and the file stays.
func (e *Engine) OpenFile(name string, flags OpenFlag) (h *File, err error) {
	create, trunc := flags&OCreate != 0, flags&OTrunc != 0
	if err := CheckName(name); err != nil {
		return nil, err
	}
	if err := e.enter(); err != nil {
		return nil, err
	}
	durable := flags&ODeferSync == 0
	if !create || durable {
		// Nothing it returns rests on Close's flush: an open, or a
		// create that is durable when it returns.
		defer e.leave()
	} else {
		defer func() {
			if e.leaveAcked("deferred create", &err) {
				e.dropHandle(h.f) // no handle is returned
				h = nil
			}
		}()
	}
	if !create {
		return e.openExisting(name, trunc)
	}
	e.nsMu.Lock()
	f := e.byName[name]
	if f == nil {
		if err := e.nsRoomFor(nsEntryLen(name)); err != nil {
			e.nsMu.Unlock()
			return nil, fmt.Errorf("engine: create %q: %w", name, err)
		}
		if e.nextID >= maxSeq {
			// Ids are below maxSeq (decodeOp); as Linux does out of
			// inodes, ENOSPC. Only a damaged or crafted create of
			// id maxSeq-1 gets here.
			e.nsMu.Unlock()
			return nil, fmt.Errorf("engine: create %q: no file id left (next %d): %w", name, e.nextID, ErrNoSpace)
		}
		f = &file{id: e.nextID, ext: newExtentMap(), born: e.stats.hostWritten.Load()}
		f.setName(name)
		t, err := e.writeOp(nsOp{kind: opCreate, file: f.id, name: name}, !durable)
		if err != nil {
			e.nsMu.Unlock()
			return nil, err
		}
		// Kept for every create, deferred ones too: a durable create
		// of the name meanwhile waits for it (awaitCreate).
		f.createFlush.Store(t)
		e.nextID++
		e.setName(name, f)
		e.nsBytes += nsEntryLen(name)
		e.idMu.Lock()
		e.byID[f.id] = f
		e.idMu.Unlock()
		f.handles.Add(1)
		e.nsMu.Unlock()
		// The record has landed: the flush that makes it durable runs
		// without nsMu, so concurrent creates share one (group commit)
		// instead of each waiting under nsMu for the one before it.
		if err := e.awaitCreate(name, f, durable); err != nil {
			e.dropHandle(f) // no handle was returned
			return nil, err
		}
		return &File{e: e, f: f, errSeen: e.wb.ErrCursor(f.id)}, nil
	}
	if flags&OExcl != 0 {
		e.nsMu.Unlock()
		return nil, fmt.Errorf("engine: create %q: %w", name, fs.ErrExist)
	}
	f.handles.Add(1) // see openHandle
	e.nsMu.Unlock()
	// Another create of name may still be waiting for its flush: this
	// one, which also says the file exists, returns once it is durable
	// too.
	if err := e.awaitCreate(name, f, durable); err != nil {
		e.dropHandle(f) // no handle was returned
		return nil, err
	}
	return e.openHandle(f, trunc)
}

// awaitCreate returns, if durable, once f's create is durable: at once
// if its flush has succeeded already. A create with ODeferSync keeps its
// ticket too, so that a durable create of the name waits for it. A failed flush leaves the file in the namespace, its
// record logged and perhaps on the device, as a kernel file system
// leaves a file whose directory's fsync failed; the next durable
// operation or SyncNamespace makes it durable.
func (e *Engine) awaitCreate(name string, f *file, durable bool) error {
	t := f.createFlush.Load()
	if !durable || t == 0 {
		return nil
	}
	if err := e.flushAcked(context.Background(), t); err != nil {
		return fmt.Errorf("engine: create %q: log operation: %w", name, err)
	}
	f.createFlush.CompareAndSwap(t, 0)
	return nil
}

// openExisting opens a file that must exist: a lookup, under nsMu shared
// (opening a table to read it need not wait for a create, a remove or a
// durable operation's flush).
func (e *Engine) openExisting(name string, trunc bool) (*File, error) {
	e.nsMu.RLock()
	f := e.byName[name]
	if f != nil {
		f.handles.Add(1) // see openHandle
	}
	e.nsMu.RUnlock()
	if f == nil {
		return nil, fmt.Errorf("engine: open %q: %w", name, fs.ErrNotExist)
	}
	return e.openHandle(f, trunc)
}

// openHandle returns a new handle to f, truncated if trunc. The caller
// counted the handle in f.handles under nsMu, in the lookup that found
// f by name: a remove of the name (which takes nsMu exclusive) then
// either came first, and the open found no file, or finds the handle and
// leaves the file to it (unlink). Counted after the lookup, a remove in
// between dropped the file, and the open returned a handle whose every
// operation failed with ENOENT.
func (e *Engine) openHandle(f *file, trunc bool) (*File, error) {
	h := &File{e: e, f: f, errSeen: e.wb.ErrCursor(f.id)}
	if trunc {
		if err := h.Truncate(0); err != nil {
			e.dropHandle(f) // no handle was returned
			return nil, err
		}
	}
	// A handle returned takes the file over from a RemoveUnused waiting
	// for its last close; an open that fails does not.
	f.unlinkAtClose.Store(false)
	return h, nil
}

// dropHandle gives back a handle count taken for a handle that is not
// returned: if it was the last, a RemoveUnused waiting for it removes
// the file, as File.Close would.
func (e *Engine) dropHandle(f *file) {
	if f.handles.Add(-1) == 0 {
		e.lastClosed(f)
	}
}

// lastClosed is what the close that leaves f without handles owes: the
// drop of a file removed while open, or the removal RemoveUnused asked
// for.
func (e *Engine) lastClosed(f *file) {
	if f.unnamed.Load() {
		e.dropUnnamed(f)
	} else if f.unlinkAtClose.Load() {
		e.removeAtClose(f)
	}
}

// unlink takes f, whose name the namespace has just lost (removed, or
// renamed over), out of it: at once if no handle has it open (true: the
// caller then calls forgetCached without nsMu), otherwise at its last
// close. nsMu is held. f is marked unnamed before its handles are
// counted, and a close counts its handle off before it looks at the
// mark, so one of the two sees the other and drops f (dropUnnamed drops
// it once).
func (e *Engine) unlink(f *file) bool {
	f.unnamed.Store(true)
	if f.handles.Load() > 0 {
		return false
	}
	e.dropFile(f)
	return true
}

// dropUnnamed drops f, unnamed while open, once no handle has it open.
// Nothing is logged: the remove or rename that unnamed it was, and
// recovery drops the file by it (records of the file after it map
// nothing).
func (e *Engine) dropUnnamed(f *file) {
	if err := e.enter(); err != nil {
		return // closing: the restart drops it (its remove was logged)
	}
	defer e.leave()
	e.nsMu.Lock()
	f.mu.RLock()
	gone := f.gone
	f.mu.RUnlock()
	if gone || f.handles.Load() > 0 {
		e.nsMu.Unlock()
		return
	}
	e.dropFile(f)
	e.nsMu.Unlock()
	e.forgetCached(f)
}

// Remove deletes a file's name, durably when it returns. As an unlink on
// a kernel file system, handles that have it open keep working (reads,
// writes, fsync, truncate) and its data stays until the last of them
// closes; then (at once if none has it open) its data becomes garbage
// for GC. A crash meanwhile loses the file, as it would an unlinked one.
func (e *Engine) Remove(name string) error { return e.remove(name, true, false) }

// ErrInUse is RemoveUnused's answer for a file some handle has open.
var ErrInUse = fmt.Errorf("engine: file is open: %w", syscall.EBUSY)

// RemoveUnused is Remove, but a file some handle has open stays until
// its last handle closes, which removes it (as RemoveDeferred), and the
// call fails with ErrInUse to say so; opening the file again before
// that keeps it. A client whose peers share a file and each remove it
// when they are done (fio's numjobs with unlink=1) removes it this way,
// so that the name stays until the last of them closes and none of their
// removes finds it gone (a rename before that keeps it). The removal
// waiting for a close is in memory only: a restart before it keeps the
// file.
func (e *Engine) RemoveUnused(name string) error { return e.remove(name, true, true) }

// RemoveDeferred is Remove without the device flush: the removal is
// durable from the next flush that acknowledges something (a file's
// Sync, SyncNamespace, Engine.Sync, Close, a durable namespace change),
// as an unlink on a kernel file system is from the fsync of its
// directory; its record is held and packed as ODeferSync's. A crash
// before that brings the file back whole. GC logs a zone's reset (its
// record carries what is held) and flushes before it resets the zone,
// so no data the file still had can be lost meanwhile.
func (e *Engine) RemoveDeferred(name string) error { return e.remove(name, false, false) }

func (e *Engine) remove(name string, durable, unused bool) (err error) {
	if err := e.enter(); err != nil {
		return err
	}
	if durable {
		defer e.leave()
	} else {
		defer e.leaveAcked("deferred remove", &err)
	}
	e.nsMu.Lock()
	f := e.byName[name]
	if f == nil {
		e.nsMu.Unlock()
		return fmt.Errorf("engine: remove %q: %w", name, fs.ErrNotExist)
	}
	if unused && f.handles.Load() > 0 {
		// The close that takes the last handle removes it (File.Close);
		// one that took it before the flag was set left that to here.
		f.unlinkAtClose.Store(true)
		if f.handles.Load() > 0 {
			e.nsMu.Unlock()
			return fmt.Errorf("engine: remove %q: %w", name, ErrInUse)
		}
	}
	return e.removeLocked(name, f, durable)
}

// removeLocked removes f, named name, with nsMu held, which it releases.
func (e *Engine) removeLocked(name string, f *file, durable bool) error {
	dropped := false
	t, err := e.logOpRecord(nsOp{kind: opRemove, file: f.id}, durable, !durable, func() {
		e.delName(name)
		e.nsBytes -= nsEntryLen(name)
		dropped = e.unlink(f)
	})
	e.nsMu.Unlock()
	if dropped {
		e.forgetCached(f)
	}
	if err == nil && durable {
		// Without nsMu: removes and renames arriving meanwhile share
		// the flush (see logOpRecord).
		err = e.awaitOp(t)
	}
	return err
}

// removeAtClose removes f, whose last handle just closed, if RemoveUnused
// asked for that and it is still in the namespace with no handle open.
// The removal is deferred, as RemoveDeferred's: durable from the next
// flush. A failure is logged: the close itself succeeded.
func (e *Engine) removeAtClose(f *file) {
	if err := e.enter(); err != nil {
		return // closing: the file stays, as after a restart
	}
	defer e.leave()
	e.nsMu.Lock()
	name := f.name()
	if !f.unlinkAtClose.Load() || f.handles.Load() > 0 || e.byName[name] != f {
		e.nsMu.Unlock()
		return
	}
	if err := e.removeLocked(name, f, false); err != nil {
		slog.Warn("engine: remove a file at its last close, as asked while it was open", "file", name, "err", err)
	}
}

// nsEntryLen is what a file named name takes in a checkpoint besides
// its extents (encodeCheckpoint: id, name, size, extent count).
func nsEntryLen(name string) int64 { return 8 + 4 + int64(len(name)) + 8 + 4 }

// ErrNamespaceFull is the ENOSPC of a create or a rename to a longer
// name that the files' names leave no room for (nsRoomFor), whatever
// room the data zones have: removes make room.
var ErrNamespaceFull = fmt.Errorf("engine: no room in the metadata for more file names: %w", ErrNoSpace)

// nsRoomFor refuses (ErrNamespaceFull) a namespace that grows by add bytes of
// checkpoint entries past what leaves room, in a metadata half, for a
// checkpoint with as many extents as the data zones have blocks (every
// extent covers a block no other covers: see ckptMax) and a create
// record with its shrink room after it. Without it a namespace of empty
// files could take the room format set aside for extents, and once the
// files got data no checkpoint fit: the next switch, Close and Open
// failed with every acknowledged byte still on the device. nsMu is held.
func (e *Engine) nsRoomFor(add int64) error {
	dataZones := int64(e.sb.UsedZones - 2*e.sb.MetaGroup)
	extents := dataZones * e.sb.ZoneCap / BlockSize
	need := func(ns int64) int64 {
		worst := 8 + 8 + 4 + extents*ckptExtSize + ns + 4 + int64(e.sb.UsedZones)*12
		return BlockSize + metaRecordLen(int(worst)) + metaRecordLen(1+8+8+4+4+MaxNameLen) + metaShrinkRoom
	}
	if need(0) > e.sb.metaHalfCap() {
		// Halves formatted before they were sized for the worst case
		// (one zone each) cannot keep this bound for any namespace:
		// the log's own ENOSPC is all there is, as before.
		return nil
	}
	if need(e.nsBytes+add) > e.sb.metaHalfCap() {
		return fmt.Errorf("engine: the namespace (%d files, %d bytes of checkpoint entries) would leave a %d-byte metadata half no room for the extents of %d data blocks: %w",
			len(e.byName), e.nsBytes, e.sb.metaHalfCap(), extents, ErrNamespaceFull)
	}
	return nil
}

// dropFile takes a removed (or renamed-over) file out of the namespace:
// its data becomes garbage, and appends of it still in flight map
// nothing. nsMu is held; the caller then calls forgetCached without it.
func (e *Engine) dropFile(f *file) {
	e.idMu.Lock()
	delete(e.byID, f.id)
	e.idMu.Unlock()
	f.mu.Lock()
	f.gone = true
	f.ext.each(func(x extent) bool { e.unmapped(x); return true })
	f.ext = newExtentMap()
	e.unpinTail(f) // a truncate in progress has nothing to put back
	e.endUndo(f)   // nor one owing its undo's commit
	f.mu.Unlock()
}

// forgetCached drops what the cache and writeback hold of a dropped file.
// It takes the cache's file lock, which a read holds while it calls
// ReadBacking, so nsMu must not be held (see the lock order in doc.go).
func (e *Engine) forgetCached(f *file) {
	e.cache.Forget(f.id)
	e.wb.Forget(f.id)
}

// errRemoved fails an access that begins after its file was removed.
var errRemoved = fmt.Errorf("engine: the file was removed: %w", fs.ErrNotExist)

// cacheFile is f's state in the cache, which every access of f's bytes
// goes through. It is made on f's first access, under f.mu and only while
// f is not gone, so it exists before dropFile marks f gone (and
// forgetCached then makes it dead) or never: an access that races f's
// remove ends with cache.ErrForgotten or errRemoved, both fs.ErrNotExist,
// and caches nothing of the removed file. Lock order: f.mu, then the
// cache's file table (a leaf).
func (e *Engine) cacheFile(f *file) (cache.File, error) {
	if cf := f.cached.Load(); cf != nil {
		return *cf, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if cf := f.cached.Load(); cf != nil {
		return *cf, nil
	}
	if f.gone {
		return cache.File{}, errRemoved
	}
	cf := e.cache.File(f.id)
	f.cached.Store(&cf)
	return cf, nil
}

// removed reports whether f was dropped: removed (or renamed over) with
// no handle open, or at its last close since.
func (f *file) removed() bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.gone
}

// Rename renames a file, replacing newName if it exists. A replaced file
// goes as with Remove: handles that have it open keep it until they
// close.
func (e *Engine) Rename(oldName, newName string) error {
	if err := CheckName(newName); err != nil {
		return err
	}
	if err := e.enter(); err != nil {
		return err
	}
	defer e.leave()
	e.nsMu.Lock()
	f := e.byName[oldName]
	if f == nil {
		e.nsMu.Unlock()
		return fmt.Errorf("engine: rename %q: %w", oldName, fs.ErrNotExist)
	}
	if oldName == newName {
		// Nothing to log, but a rename is durable when it returns: the
		// name must be, though its create may have deferred its flush
		// (TestH15RenameOntoItselfIsDurableWhenAnswered). It keeps a
		// file RemoveUnused marked, as any rename does.
		f.unlinkAtClose.Store(false)
		e.nsMu.Unlock()
		if err := e.syncNamespace(); err != nil {
			return fmt.Errorf("engine: rename %q: %w", oldName, err)
		}
		return nil
	}
	victim := e.byName[newName]
	grow := nsEntryLen(newName) - nsEntryLen(oldName)
	if victim != nil {
		grow -= nsEntryLen(newName)
	}
	if grow > 0 {
		if err := e.nsRoomFor(grow); err != nil {
			e.nsMu.Unlock()
			return fmt.Errorf("engine: rename %q: %w", oldName, err)
		}
	}
	victimDropped := false
	t, err := e.logOpRecord(nsOp{kind: opRename, file: f.id, name: newName}, true, false, func() {
		e.delName(oldName)
		e.setName(newName, f)
		e.nsBytes += grow
		f.mu.Lock()
		f.setName(newName)
		f.mu.Unlock()
		f.unlinkAtClose.Store(false) // the renamer's now, as an open's
		if victim != nil {
			victimDropped = e.unlink(victim)
		}
	})
	if err == nil {
		// The name is the file's from the record on, durable from its
		// flush, which the rename waits for without nsMu: a durable
		// create that finds the name meanwhile waits for that flush
		// too (awaitCreate), as for a create's.
		f.createFlush.Store(t)
	}
	e.nsMu.Unlock()
	if victimDropped {
		e.forgetCached(victim)
	}
	if err == nil {
		// Renames and removes arriving meanwhile share the flush (see
		// logOpRecord).
		if err = e.awaitOp(t); err == nil {
			f.createFlush.CompareAndSwap(t, 0)
		}
	}
	return err
}

// List returns every file, by name.
func (e *Engine) List() []FileInfo {
	var out []FileInfo
	e.ListAfter("", func(fi FileInfo) bool {
		if out == nil {
			out = make([]FileInfo, 0, len(e.byName)) // nsMu is held: fn runs under it
		}
		out = append(out, fi)
		return true
	})
	if out == nil {
		out = []FileInfo{}
	}
	return out
}

// ListAfter calls fn with each file whose name sorts after after, in
// name order, until fn returns false, and returns how many files there
// are. It costs the files fn saw plus a lookup, not the namespace: a
// client pages through n files by the last name it got. fn runs under
// the namespace lock (shared): it must not call the engine.
func (e *Engine) ListAfter(after string, fn func(FileInfo) bool) (total int) {
	e.nsMu.RLock()
	defer e.nsMu.RUnlock()
	if e.names != nil {
		e.names.AscendGreaterOrEqual(after, func(name string) bool {
			if name == after {
				return true
			}
			return fn(e.byName[name].info())
		})
	}
	return len(e.byName)
}

// setName names f name in the namespace, replacing whatever had it.
// nsMu is held (or recovery runs alone).
func (e *Engine) setName(name string, f *file) {
	if e.names == nil {
		e.names = btree.NewG(32, func(a, b string) bool { return a < b })
	}
	if _, ok := e.byName[name]; !ok {
		e.names.ReplaceOrInsert(name)
	}
	e.byName[name] = f
}

// delName takes name out of the namespace. nsMu is held (or recovery
// runs alone).
func (e *Engine) delName(name string) {
	if _, ok := e.byName[name]; ok {
		delete(e.byName, name)
		e.names.Delete(name)
	}
}

// Stat describes one file.
func (e *Engine) Stat(name string) (FileInfo, error) {
	e.nsMu.RLock()
	f := e.byName[name]
	e.nsMu.RUnlock()
	if f == nil {
		return FileInfo{}, fmt.Errorf("engine: stat %q: %w", name, fs.ErrNotExist)
	}
	return f.info(), nil
}

func (f *file) info() FileInfo {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return FileInfo{Name: f.name(), ID: f.id, Size: f.visibleSize(), Extents: f.ext.count()}
}

// visibleSize is the size a client sees (f.mu held): the size, less the
// piece an extending write is still copying into the cache (growing).
func (f *file) visibleSize() int64 {
	if f.growing {
		return f.shown
	}
	return f.size
}

// check refuses operations on closed handles and removed files.
func (h *File) check() error {
	if h.closed.Load() {
		return fmt.Errorf("engine: file %q: %w", h.Name(), fs.ErrClosed)
	}
	h.f.mu.RLock()
	gone := h.f.gone
	h.f.mu.RUnlock()
	if gone {
		return fmt.Errorf("engine: file %q was removed: %w", h.f.name(), fs.ErrNotExist)
	}
	return nil
}

// enter admits an operation on the handle (see Engine.enter), then
// checks the handle; it calls leave itself if it returns an error.
func (h *File) enter() error {
	if err := h.e.enter(); err != nil {
		return fmt.Errorf("engine: file %q: %w", h.Name(), err)
	}
	if err := h.check(); err != nil {
		h.e.leave()
		return err
	}
	return nil
}

// Name is the file's name.
func (h *File) Name() string { return h.f.name() }

// Stat describes the file.
func (h *File) Stat() FileInfo { return h.f.info() }

// Fstat is Stat for a client's handle: like every other operation on
// it, it fails with fs.ErrClosed once the handle is closed (a file
// removed or renamed over meanwhile is still the handle's: see Remove).
func (h *File) Fstat() (FileInfo, error) {
	if err := h.check(); err != nil {
		return FileInfo{}, err
	}
	return h.f.info(), nil
}

// Size is the file's size: the bytes a read can return, without the
// piece an extending write is still copying (file.growing).
func (h *File) Size() int64 {
	h.f.mu.RLock()
	defer h.f.mu.RUnlock()
	return h.f.visibleSize()
}

// ReadAt reads len(p) bytes at off; fewer at the end of the file, with
// io.EOF.
func (h *File) ReadAt(p []byte, off int64) (int, error) {
	return h.ReadAtContext(context.Background(), p, off)
}

// ReadAtContext is ReadAt with cancellation of cache waits.
func (h *File) ReadAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if err := h.enter(); err != nil {
		return 0, err
	}
	defer h.e.leave()
	if off < 0 {
		return 0, fmt.Errorf("engine: read at %d: %w", off, fs.ErrInvalid)
	}
	var n int
	var err error
	var cf cache.File
	var fill int64
	for try := 0; ; try++ {
		seq := h.f.shrinking.Load()
		size := h.Size()
		if off >= size {
			return 0, io.EOF
		}
		want := p
		if int64(len(p)) > size-off {
			want = p[:size-off]
		}
		if try == 0 {
			if cf, err = h.e.cacheFile(h.f); err != nil {
				break
			}
			fill = h.readAhead(off, int64(len(want)), size)
		}
		// A miss may fill past want, up to fill (within the size as the
		// first try saw it; bytes a shrink cuts meanwhile are dropped
		// as readahead's are).
		n, err = h.e.cache.ReadAhead(ctx, cf, off, want, fill, h.e)
		// A shrink that ran meanwhile drops what the cache holds past
		// the new end (an acknowledged overwrite, dirty) before it
		// cuts the extent map: a miss in between reads the bytes they
		// replaced from the device, or bytes the cut removes, which a
		// grow after the shrink would show. A read that raced a
		// shrink reads again (a shrink that has ended left nothing
		// stale behind: TestH16ReadRacingShrinkNeverReturnsOverwrittenBytes,
		// TestH15ShrinkRacingColdReadNeverResurrectsCutBytes). One that
		// keeps racing shrinks ends at the size as it is now, which the
		// shrink set before it dropped anything, as Linux's
		// filemap_read checks i_size again once it has the pages.
		if err != nil || seq%2 == 0 && h.f.shrinking.Load() == seq {
			break
		}
		if try == 2 {
			if now := h.Size(); off+int64(n) > now {
				n = int(max(0, now-off))
			}
			break
		}
	}
	h.e.stats.hostRead.Add(int64(n))
	if err != nil {
		return n, fmt.Errorf("engine: read %q at %d: %w", h.f.name(), off, err)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// ReadCached is ReadAt for a caller that must not wait (a connection's
// reader taking requests): it reads p whole, within the file's size,
// only if the cache holds every byte of it and no lock it needs is
// held; it never waits for the device, for memory, or for a lock but the
// leaves file.mu and readahead.mu. It reports whether it read; if not,
// it read nothing and counted nothing (not even toward readahead), and
// the caller reads with ReadAtContext, which may wait.
func (h *File) ReadCached(p []byte, off int64) bool {
	if off < 0 || len(p) == 0 {
		return false
	}
	cf := h.f.cached.Load()
	if cf == nil || h.e.enter() != nil {
		return false
	}
	defer h.e.leave()
	if h.check() != nil {
		return false
	}
	seq := h.f.shrinking.Load()
	size := h.Size()
	if seq%2 != 0 || off+int64(len(p)) > size || off+int64(len(p)) < off {
		return false
	}
	if !h.e.cache.TryRead(*cf, off, p) || h.f.shrinking.Load() != seq {
		return false // a shrink raced it (see ReadAtContext): p is overwritten by the read that follows
	}
	// After the copy: a hit of a sequential stream moves its window on
	// as ReadAtContext's would (the order does not matter to the stream,
	// only that each read is counted once).
	h.readAhead(off, int64(len(p)), size)
	h.e.stats.hostRead.Add(int64(len(p)))
	return true
}

// WriteAt writes p at off, extending the file if needed. The data is in
// the cache when WriteAt returns; Sync makes it durable.
func (h *File) WriteAt(p []byte, off int64) (int, error) {
	return h.WriteAtContext(context.Background(), p, off)
}

// WriteAtContext is WriteAt with cancellation of throttling waits. Like
// os.File.WriteAt it returns how many bytes it wrote: a write that fails
// leaves the file as it was past those bytes, its size included.
//
// A write is admitted (see admit) and copied in pieces of at most
// writePiece bytes, each piece's reservation given back block by block
// as the cache takes it (copyPiece; dirty data, or written back already,
// counts it from then): a write larger than
// the cache is written back while it is copied, and reserved whole it
// would count twice meanwhile, refusing other writes room that is free.
// A piece that does not fit ends the write short, with ErrNoSpace, as a
// kernel file system's write that runs out of space does.
//
// A write to a file whose failed truncate's undo owes its commit
// (file.undo) writes the commit first, as an fsync does (settleUndo): it
// costs a flush, after a failure only. While the commit is owed, GC
// leaves every zone holding the file's data alone (tailUnsettled), and a
// writer that waited for its own file's settler would wait for its own
// wmu; overwrites without an fsync then filled a healthy device
// (TestUndoOwedShiftedOverwritesFit). A commit that fails again fails
// the write, with nothing written; its writeback error stays for the
// file's fsync.
//
// A write still running when Close stops waiting for operations (see
// CloseContext) fails with ErrClosed and reports 0 bytes: Close has
// written back what it found, and nothing writes back what the write
// puts in the cache after that; how much of it is on the device is
// unspecified, as after any failed write.
func (h *File) WriteAtContext(ctx context.Context, p []byte, off int64) (n int, err error) {
	if err := h.enter(); err != nil {
		return 0, err
	}
	defer func() {
		h.f.changes.Add(1)
		if h.e.leaveAcked("write", &err) {
			n = 0
		}
	}()
	if off < 0 || off+int64(len(p)) < off || off+int64(len(p)) > MaxFileSize {
		return 0, fmt.Errorf("engine: write of %d bytes at %d: %w", len(p), off, fs.ErrInvalid)
	}
	if len(p) == 0 {
		return 0, nil
	}
	f := h.f
	end := off + int64(len(p))
	f.wmu.RLock()
	settle := !testWriteLeavesOwed
	if end <= h.Size() && !(settle && f.undoOwed()) {
		// Within the size, which cannot change while wmu is shared,
		// and no commit owed: one cannot begin while wmu is shared.
		defer f.wmu.RUnlock()
		return h.writePieces(ctx, p, off, false)
	}
	f.wmu.RUnlock()
	f.wmu.Lock()
	defer f.wmu.Unlock()
	if settle {
		if err := h.settleUndo(ctx, false); err != nil {
			return 0, fmt.Errorf("engine: write %q at %d: %w", h.Name(), off, err)
		}
	}
	return h.writePieces(ctx, p, off, true)
}

// testWriteLeavesOwed, if set (by tests only), keeps a write from writing
// its file's owed undo commit first. No client write lands while a commit
// is owed; the tests that check what the settler, Engine.Sync and fsync
// do with data dirtied while owed need one that does (otherwise the write
// settles, and they pass with those taking errors they must leave, review
// rev53).
var testWriteLeavesOwed bool

// writePiece returns how long the piece of a write that starts at pos may
// be: up to the next multiple of the piece size, at least 256 KiB and the
// cache's largest folio, so that pieces end where no folio the whole
// write would make could cross.
func (e *Engine) writePiece(pos int64) int64 {
	size := max(int64(256<<10), int64(BlockSize)<<e.cfg.MaxOrder)
	return size - pos%size
}

// writePieces does WriteAtContext's write under f.wmu: shared if the write
// lies within the size, exclusive if it extends the file (extend). An
// extending piece grows the size before its data enters the cache, so
// that any record that carries the data also carries a size that covers
// it.
func (h *File) writePieces(ctx context.Context, p []byte, off int64, extend bool) (int, error) {
	e, f := h.e, h.f
	done := 0
	for done < len(p) {
		pos := off + int64(done)
		piece := p[done:min(len(p), done+int(e.writePiece(pos)))]
		charge := writeCharge(pos, int64(len(piece)))
		if err := e.admit(ctx, charge, f); err != nil {
			return done, err
		}
		if testHookWritePiece != nil {
			testHookWritePiece(e)
		}
		old := int64(-1)
		if extend {
			f.mu.Lock()
			old = f.size
			f.size = max(old, pos+int64(len(piece)))
			f.growing, f.shown = true, old // readers see old until the data is in
			f.mu.Unlock()
		}
		n, err := e.copyPiece(ctx, f, pos, piece, charge)
		if extend {
			f.mu.Lock()
			f.growing = false
			f.mu.Unlock()
		}
		e.stats.hostWritten.Add(int64(n))
		f.written.Add(int64(n))
		done += n
		if err != nil {
			err = fmt.Errorf("engine: write %q at %d: %w", h.Name(), pos, err)
			if old >= 0 {
				err = h.keepSize(old, pos, n, err)
			}
			return done, err
		}
	}
	return done, nil
}

// copyPiece copies a write's piece at pos, admitted with charge (see
// writeCharge), into the cache and gives the charge back: each block as
// it is in the cache, where the dirty count holds it (and writeback's
// appends, once written back), the header's block at the end. A piece of
// up to 2 MiB that a small cache takes only as writeback frees memory
// counted its part copied twice meanwhile, against the room other
// writers were admitted to (TestAdmittedPieceCountsOnceWhileCopied).
// The progress closure does not escape (see cache.Cache.run): no
// allocation per write.
func (e *Engine) copyPiece(ctx context.Context, f *file, pos int64, piece []byte, charge int64) (int, error) {
	var released int64
	cf, err := e.cacheFile(f)
	if err != nil {
		e.admitted.Add(-charge)
		return 0, err
	}
	n, err := e.cache.WriteProgress(ctx, cf, pos, piece, e, func(n int) {
		r := ((pos+int64(n))/BlockSize - pos/BlockSize) * BlockSize
		if r > released {
			e.admitted.Add(released - r)
			released = r
		}
	})
	e.admitted.Add(released - charge)
	return n, err
}

// testHookWritePiece, if set (by tests only), runs as a write's piece,
// admitted, is about to enter the cache.
var testHookWritePiece func(*Engine)

// keepSize takes back the size that an extending piece at pos grew from
// old but wrote only n bytes of (f.wmu held exclusive).
func (h *File) keepSize(old, pos int64, n int, err error) error {
	f := h.f
	keep := old
	if n > 0 {
		keep = max(old, pos+int64(n))
	}
	if keep < h.Size() {
		// Nothing lies past keep (wmu kept other writers out), but a
		// record written back meanwhile may carry the grown size:
		// log the size that holds, as a truncate does. Not while a
		// failed truncate's undo owes its commit and has not begun
		// writing it: then no record of the file carries a size
		// (recordSize; the state began before this write took wmu,
		// and only a checkpoint or the commit ends it), and a logged
		// size would commit the undo's held records in recovery
		// (replayOp) whether or not the undo is complete: a piece it
		// failed to rewrite came back as a hole under the old size
		// (TestUndoOwedFailedExtendingWriteCommitsNothing).
		f.mu.Lock()
		f.size = keep
		sizeless := f.recordSize() == SizeUnknown
		f.mu.Unlock()
		if !sizeless {
			if lerr := h.e.logSize(f, keep); lerr != nil {
				err = errors.Join(err, lerr)
			}
		}
	}
	return err
}

// logSize makes the file's size, set in memory, durable as a truncate to
// size. If it fails, the next flush checkpoints first (Engine.unlogged).
func (e *Engine) logSize(f *file, size int64) error {
	e.nsMu.RLock()
	defer e.nsMu.RUnlock()
	err := e.logOp(nsOp{kind: opTruncate, file: f.id, size: size})
	if err != nil {
		e.setUnlogged(unloggedTruncate)
	}
	return err
}

// MaxFileSize bounds file sizes (and so offsets).
const MaxFileSize = 1 << 50

// Truncate sets the file's size. Bytes past a shrunk end read as zeros if
// the file grows again. Durable when Truncate returns.
func (h *File) Truncate(size int64) error { return h.seenWith(h.truncate(size, false)) }

// Changes counts the writes and truncates of the file that have ended,
// through any handle: a copy of its bytes read after Changes returned n
// is current as long as Changes still returns n (a handle's own
// readahead, say).
func (h *File) Changes() uint64 { return h.f.changes.Load() }

// Grow is Truncate that never shrinks: a file already at least size
// bytes long is left as it is. Grow waits for running writes, so unlike a
// stat followed by a truncate it never cuts one that extended the file in
// between. Left as it is means nothing is logged: a size that came from
// writes not yet synced is as durable as they are (Sync makes it so);
// only a Grow that extends the file is durable when it returns.
func (h *File) Grow(size int64) error { return h.seenWith(h.truncate(size, true)) }

func (h *File) truncate(size int64, grow bool) error {
	if err := h.enter(); err != nil {
		return err
	}
	defer h.e.leave()
	if size < 0 || size > MaxFileSize {
		return fmt.Errorf("engine: truncate to %d: %w", size, fs.ErrInvalid)
	}
	e, f := h.e, h.f
	ctx := context.Background()
	// No write runs until the truncate is logged: one that did could
	// grow the size under the cut, or be written back with a sequence
	// number below the truncate's, which recovery would then cut.
	f.wmu.Lock()
	defer f.wmu.Unlock()
	// The file's unreported writeback error is its fsync's, not the
	// truncate's (TestTruncateLeavesWritebackErrorToFsync): here and in
	// zeroTail the truncate reports only what fails during it.
	if err := h.settleUndo(ctx, false); err != nil {
		return fmt.Errorf("engine: truncate %q to %d: %w", f.name(), size, err)
	}
	f.mu.Lock()
	old := f.size
	f.mu.Unlock()
	if grow && old >= size {
		return nil
	}
	if size < old {
		f.shrinking.Add(1)
		defer f.shrinking.Add(1)
	}
	defer f.changes.Add(1)
	if tail := size % BlockSize; tail != 0 {
		if err := h.zeroTail(size, old); err != nil {
			return err
		}
	}
	f.mu.Lock()
	f.size = size
	f.mu.Unlock()
	e.cache.Truncate(f.id, size)
	// Records built before the truncate may still be in flight; once they
	// are mapped, the extent map can be cut without them resurrecting
	// the old bytes.
	if err := e.cache.WaitWriteback(ctx, f.id); err != nil {
		return err
	}
	// The cut makes the blocks past the end garbage: a GC pass could
	// then reset their zone and reuse it, durably, before the truncate is
	// logged, and a crash in between would bring them back from the last
	// checkpoint pointing at someone else's records. With the collector
	// held, no pass runs between the cut and the durable log record.
	err := e.cutAndLog(f, size)
	// A read that took the size before it changed may have filled the
	// cache past the new end from the extent map before the cut, after
	// the first Truncate dropped those blocks: drop them again, now that
	// no fill can find the cut bytes, or a grow (which needs wmu, held
	// until here) would show them (TestH15ShrinkRacingColdReadNeverResurrectsCutBytes).
	// Not under the collector's lock: the cache's locks are never held
	// with it.
	e.cache.Truncate(f.id, size)
	return err
}

// cutAndLog cuts the file's extent map at size and logs the size, with
// the collector held until the record has landed, then makes it durable
// without the collector (and without nsMu), so that concurrent truncates
// and grows share a flush: a pass that resets a zone the cut emptied
// logs the reset after the truncate's record and resets the zone only
// once a flush that started after its own record has succeeded
// (collector.settle), which makes the truncate's record durable too.
func (e *Engine) cutAndLog(f *file, size int64) error {
	t, err := e.cutAndLogRecord(f, size)
	if err == nil {
		err = e.awaitOp(t)
	}
	if err != nil {
		// The next flush checkpoints first, as logSize's failure
		// makes it.
		e.setUnlogged(unloggedTruncate)
	}
	return err
}

// cutAndLogRecord is cutAndLog up to the record, with the collector
// held: it returns the ticket of the record's flush.
func (e *Engine) cutAndLogRecord(f *file, size int64) (uint64, error) {
	e.gc.mu.Lock()
	defer e.gc.mu.Unlock()
	f.mu.Lock()
	f.ext.truncate(size, e.unmapped)
	f.mu.Unlock()
	if testHookTruncateCut != nil {
		testHookTruncateCut(e)
	}
	e.nsMu.RLock()
	defer e.nsMu.RUnlock()
	t, err := e.logOpRecord(nsOp{kind: opTruncate, file: f.id, size: size}, true, false, nil)
	if err != nil {
		e.setUnlogged(unloggedTruncate)
	}
	return t, err
}

// zeroTail makes the bytes of the block that holds a truncate's new end
// (size, not block aligned) zeros past it, on the device, before the
// truncate changes anything else (f.wmu held; old is the file's size).
// The block keeps its bytes past the end on the device; if the file grows
// again they must read as zeros, and recovery must never find the old
// tail under a logged size: the zeros are durable before the truncate is.
// Their record carries the new size, so once it is durable recovery finds
// the file cut even if the truncate's log record is lost. It is the first
// durable thing that may: the in-memory size changes before the zeros
// are written, but until their record takes its number (numberRecord) a
// GC record or a checkpoint of the file carries the old size
// (carriedSize). One that carried the new size, durable while the zeros
// were lost to a crash, brought the file back cut over the block's old
// bytes (a kill -9 during the truncate; the old bytes showed when the
// file grew again).
//
// The tail's rewrite takes a block and a record header before the cut
// frees anything, so it is admitted as a write (under wmu, after the
// file's dirty data is written back), and a device without room for it
// refuses the truncate with the file as it was. A tail that reads as
// zeros already (a truncate to the size, a grow, a tail the file never
// wrote, or wrote zeros to) needs no rewrite: nothing is admitted or
// written, and a full device does not refuse it.
//
// A truncate whose tail does not reach the device (EIO) fails with the
// file as it was, size and bytes, and nothing of it durable: first the
// file's dirty data is written back under the old size (a failure there
// changes nothing), so that the tail's record is the only one that
// carries the new size; if it fails, the size goes back, the bytes the
// zeros replaced within the old size go back into the cache, and those and
// the rest of the range the record's size would cut are written back,
// then committed by one record under the old size (undoCut): the record
// may reach the device all the same. That is
// stricter than Linux: XFS sets the in-memory size first and returns the
// flush's error with the new size in place but not logged (a crash brings
// the old one back), and ext4 logs the size and leaves the zeroed block to
// writeback, whose failure only the next fsync reports. The price is that a truncate into a block
// writes the file's dirty data back first, the bytes it cuts too. Its
// flushes leave the file's unreported writeback error (an earlier
// write's, or their own) for the file's next fsync, which reports it
// whether or not the truncate did (FlushFileLeaveError): the truncate
// is not the fsync (TestTruncateLeavesWritebackErrorToFsync).
func (h *File) zeroTail(size, old int64) error {
	e, f := h.e, h.f
	ctx := context.Background()
	if err := e.wb.FlushFileLeaveError(ctx, f.id); err != nil {
		return fmt.Errorf("engine: truncate %q to %d: write back: %w", f.name(), size, err)
	}
	end := (size/BlockSize + 1) * BlockSize
	// The block's bytes past size, as the device holds them: with the
	// dirty data written back and wmu held, the cache's copy is the
	// device's. saved is those the file holds now, which the zeros
	// replace.
	tail := make([]byte, end-size)
	cf, err := e.cacheFile(f)
	if err == nil {
		_, err = e.cache.Read(ctx, cf, size, tail, e)
	}
	if err != nil {
		return fmt.Errorf("engine: truncate %q to %d: read the tail: %w", f.name(), size, err)
	}
	if isZero(tail) {
		return nil
	}
	var saved []byte
	if old > size {
		saved = tail[:min(old, end)-size]
	}
	charge := writeCharge(size, end-size)
	if err := e.admitTails(ctx, charge, f, true, minGCGain, 0); err != nil {
		return fmt.Errorf("engine: truncate %q to %d: %w", f.name(), size, err)
	}
	defer e.admitted.Add(-charge)
	// The zeros' record carries the new size; nothing numbered before
	// it may (a GC record, a checkpoint): if the zeros were then lost,
	// the file would come back cut over the block's old bytes.
	blk := size / BlockSize * BlockSize
	f.mu.Lock()
	f.size = size
	f.tailPending, f.tailFrom, f.tailSeq = true, old, 0
	e.pinTail(f, blk)
	f.mu.Unlock()
	if testHookTruncateTail != nil {
		testHookTruncateTail(e)
	}
	_, err = e.cache.Write(ctx, cf, size, e.zeroBlk[:end-size], e)
	if f.removed() {
		// Removed meanwhile (dropFile ended the tail's pin and undo):
		// there is nothing to write back or put back.
		return fmt.Errorf("engine: truncate %q to %d: the file was removed: %w", f.name(), size, fs.ErrNotExist)
	}
	if err == nil {
		err = e.wb.FlushFileLeaveError(ctx, f.id)
	}
	if err == nil {
		// The zeros' record must be durable before the truncate's log
		// record is written: a device with a volatile cache may persist
		// the later write and lose the earlier one, and the file would
		// come back cut over its old tail.
		err = e.settledFlush(ctx)
		if err == nil {
			// The zeros' record's completion ended the pending tail
			// already; this only makes sure it never outlives the
			// truncate.
			f.mu.Lock()
			f.tailPending, f.tailSeq = false, 0
			e.unpinTail(f)
			f.mu.Unlock()
			e.idle.Signal() // a writer may wait for it (waitSettled)
			return nil
		}
	}
	err = fmt.Errorf("engine: truncate %q to %d: zero the tail: %w", f.name(), size, err)
	// The zeros may be numbered, even on the device: GC leaves the file
	// alone until undoCut's records are durable, else a GC record with
	// the old size, numbered after the zeros' and flushed with them,
	// would bring the file back with holes past the block.
	defer func() {
		f.mu.Lock()
		f.tailSeq = 0
		e.unpinTail(f)
		f.mu.Unlock()
		e.idle.Signal() // a writer may wait for it (waitSettled)
	}()
	if testHookTruncateUndo != nil {
		testHookTruncateUndo(e, false)
	}
	// The old size, the block's old mapping (tailOld) and its old bytes
	// in the cache come back at once, in one hold of the cache's lock of
	// the file: writeback takes the zeros (still dirty if their write
	// failed) before, numbered under the new size as the truncate's tail,
	// or the old bytes after, without a size until undoCut commits
	// (tailUndoing comes back with the old size). The zeros under the
	// old size, durable before undoCut's records, were a file of the old
	// size with zeros over its fsynced bytes; so was a checkpoint of the
	// old size while the map held the zeros.
	back := false
	putBack := func() {
		f.mu.Lock()
		back = true
		if f.gone {
			// Removed since (dropFile ended the undo): it owes
			// nothing, and its settler must not retry against it.
			f.mu.Unlock()
			return
		}
		f.size = old
		f.tailPending, f.tailSeq = false, tailUndoing
		f.undo = e.newUndoState(size, end, old)
		e.restoreTail(f, blk)
		f.mu.Unlock()
	}
	if len(saved) > 0 {
		// A failure here still leaves the bytes past end to put back:
		// undoCut goes on, so that the zeros' record, if durable, is
		// followed by as much of the old file as can be written.
		if _, rerr := e.cache.WriteThen(ctx, cf, size, saved, e, putBack); rerr != nil {
			err = errors.Join(err, fmt.Errorf("engine: truncate %q: put the tail back: %w", f.name(), rerr))
		}
	}
	if !back {
		putBack()
	}
	if f.removed() {
		return errors.Join(err, fmt.Errorf("engine: truncate %q: the file was removed: %w", f.name(), fs.ErrNotExist))
	}
	if testHookTruncateUndo != nil {
		testHookTruncateUndo(e, true)
	}
	if rerr := h.undoCut(ctx, false); rerr != nil {
		err = errors.Join(err, fmt.Errorf("engine: truncate %q: put the cut bytes back: %w", f.name(), rerr))
	}
	return err
}

// undoCut writes back what a failed zeroTail's record would take from the
// file if it reached the device after all (f.wmu held, the size back at
// old, the tail's old bytes [size, end) dirty in the cache again). The
// record may be on the device although its flush failed (or its append
// did), and any later device flush, another file's fsync or a checkpoint
// included, makes it durable: recovery then replays its size, cutting
// every extent past end. So the bytes the file maps in [end, old) are made
// dirty too and all of it is written back, in records numbered after the
// zeros' (holes stay holes; the cost is a rewrite of the cut range, on
// this error path only).
//
// Those records carry no size (file.recordSize): recovery holds their
// extents back until a later record of the file carries a size
// (Engine.replayRecord), so that a flush that makes only some of them
// durable, with the zeros', cannot bring the file back at its old size
// with zeros past the block, where the rest was cut. Once they are all
// durable (written back and the device flushed), the tail's old bytes
// are written once more, alone, in a record that carries the old size:
// that one record is the commit point. Recovered before it, the file is
// what the zeros' record says if it is durable (the truncated file, its
// block's tail zeros) and the old file if not; after it, the old file.
//
// take says whether its writeback takes the file's unreported writeback
// error (flushUndo).
func (h *File) undoCut(ctx context.Context, take bool) (err error) {
	e, f := h.e, h.f
	defer func() {
		if err != nil {
			e.settleLater(f) // the commit stays owed: try again later
		}
	}()
	f.mu.RLock()
	u := f.undo
	var redo, commit bool
	if u != nil {
		redo, commit = !u.scanned || len(u.failedPieces) > 0, u.commit
	}
	f.mu.RUnlock()
	if u == nil {
		return nil // removed since (dropFile): nothing to put back
	}
	if u.old <= u.size && !commit {
		// Nothing cut: the zeros' record carries a size no smaller,
		// and the file's records may carry its size at once.
		f.mu.Lock()
		u.commit, commit = true, true
		f.mu.Unlock()
	}
	var buf []byte
	if !commit {
		var errs error
		if redo {
			buf, errs = h.rewriteCut(u)
		}
		if errors.Is(errs, ErrNoSpace) {
			// The rewrite needs more room than GC can free while the
			// state keeps what it replaces counted valid and the
			// file's zones alone: retries would only fail the same.
			return h.commitByCheckpoint(u, errs)
		}
		// A piece that failed is reported and the rest written back
		// and flushed all the same, but not committed: the old size
		// over a hole where the piece was cut would be worse than
		// either the truncated file or the old one. The commit stays
		// owed, and its next try rewrites the pieces that failed.
		if err := h.flushUndo(ctx, take); err != nil || errs != nil {
			return errors.Join(errs, err)
		}
		f.mu.Lock()
		u.commit = true
		ended := f.undo != u
		f.mu.Unlock()
		if ended {
			// A checkpoint committed it (flushUndo's settleStray, or
			// one that ran meanwhile), or the file was removed.
			return nil
		}
	}
	if u.old > u.size {
		if buf == nil {
			buf = make([]byte, e.writePiece(0))
		}
		if err := h.rewritePiece(u.size, buf[:min(u.old, u.end)-u.size]); err != nil {
			return fmt.Errorf("commit: %w", err)
		}
	}
	if err := h.flushUndo(ctx, take); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	f.mu.Lock()
	if f.undo == u {
		e.endUndo(f)
	}
	f.mu.Unlock()
	e.idle.Signal() // a writer may wait for it (waitSettled)
	return nil
}

// rewriteCut makes every byte f maps in [u.end, u.old) dirty again, for
// undoCut, or on a later try the pieces that failed before (u.failedPieces), and
// returns its scratch buffer. A piece that fails is reported, kept in
// u.failedPieces and skipped: the rest is made dirty all the same. A client
// write since (its records are numbered after the zeros' too) or a
// piece made dirty again twice costs a rewrite, no more.
func (h *File) rewriteCut(u *undoState) ([]byte, error) {
	e, f := h.e, h.f
	f.mu.RLock()
	ranges := u.failedPieces
	if !u.scanned {
		f.ext.lookup(u.end, max(0, u.old-u.end), func(x extent) {
			if n := len(ranges); n > 0 && ranges[n-1][1] == x.off {
				ranges[n-1][1] = x.end()
			} else {
				ranges = append(ranges, [2]int64{x.off, x.end()})
			}
		})
	}
	f.mu.RUnlock()
	buf := make([]byte, e.writePiece(0))
	var errs error
	var failed [][2]int64
	full := false
	for _, r := range ranges {
		for pos := r[0]; pos < r[1]; {
			if full {
				// No room: the rest is left for the checkpoint
				// (commitByCheckpoint), each piece's admission would
				// run a GC pass that fails the same.
				failed = append(failed, [2]int64{pos, r[1]})
				break
			}
			n := min(e.writePiece(pos), r[1]-pos)
			if err := h.rewritePiece(pos, buf[:n]); err != nil {
				errs = errors.Join(errs, err)
				failed = append(failed, [2]int64{pos, pos + n})
				full = errors.Is(err, ErrNoSpace)
			}
			pos += n
		}
	}
	f.mu.Lock()
	u.scanned, u.failedPieces = true, failed
	f.mu.Unlock()
	return buf, errs
}

// commitByCheckpoint ends u, whose rewrite found no room (cause), with a
// durable checkpoint in place of the rewrite and its commit (f.wmu held
// exclusive). A checkpoint saves the file as it is, whole (the old size,
// the old block's mapping and what the map holds of [end, old), each
// durable before it), and nothing numbered before it, the zeros' record
// included, is replayed: it is the commit (Engine.endOwed). It costs a
// snapshot of the namespace instead of a copy of the cut range, which
// while the commit is owed needs as much free room again as the range,
// since what it replaces stays counted valid. What the rewrite made
// dirty before it ran out of room is written back later, as the file's
// other dirty data is. The checkpoint takes nsMu shared, as a log
// record that fills the metadata half does (lock order: under wmu).
func (h *File) commitByCheckpoint(u *undoState, cause error) error {
	e, f := h.e, h.f
	e.nsMu.RLock()
	err := e.checkpoint()
	e.nsMu.RUnlock()
	if err != nil {
		return errors.Join(cause, fmt.Errorf("no room to rewrite the cut range, and the checkpoint that would commit it instead failed: %w", err))
	}
	if f.undoIs(u) {
		return fmt.Errorf("engine: the checkpoint that commits an undo left its state: %w", cause)
	}
	e.log.Info("engine: a failed truncate's undo had no room to rewrite the cut range; a checkpoint committed it", "file", h.Name())
	return nil
}

// settleUndo writes the commit a failed truncate's undo still owes
// (file.undo), if it owes one, before anything that must not pass it
// (f.wmu held exclusive): an fsync, which would otherwise make the
// undo's records durable without a commit and so for recovery to drop,
// under the zeros' size (TestRev36UndoCommitFailsThenFsync), another
// truncate, whose own records and size must not mix with them, or a
// write (writeSettled). take is undoCut's: only the file's fsync takes
// its unreported writeback error; a truncate, a write, Engine.Sync and
// the background settler leave it for the fsync (doc.go, crash
// consistency), as ftruncate leaves a Linux file's errseq alone.
func (h *File) settleUndo(ctx context.Context, take bool) error {
	if !h.f.undoOwed() {
		return nil
	}
	if err := h.undoCut(ctx, take); err != nil {
		return fmt.Errorf("a failed truncate's undo owes its commit: %w", err)
	}
	return nil
}

// settleOwed is settleUndo for a caller without f.wmu (an fsync,
// Engine.Sync): it takes wmu only when the commit is owed, so fsyncs do
// not wait for writes otherwise, and gives up waiting for it when ctx is
// done.
func (h *File) settleOwed(ctx context.Context, take bool) error {
	if !h.f.undoOwed() {
		return nil
	}
	if err := lockContext(ctx, &h.f.wmu); err != nil {
		return fmt.Errorf("wait for the file's writes: %w", err)
	}
	defer h.f.wmu.Unlock()
	return h.settleUndo(ctx, take)
}

// lockContext locks mu exclusive, or returns ctx's error if ctx is done
// first. A goroutine waits for the lock then, and hands it over or, the
// caller gone, releases it at once.
func lockContext(ctx context.Context, mu *sync.RWMutex) error {
	if mu.TryLock() {
		return nil
	}
	if ctx.Done() == nil {
		mu.Lock()
		return nil
	}
	got := make(chan struct{}) // unbuffered: a send is a handover
	go func() {
		mu.Lock()
		select {
		case got <- struct{}{}:
		case <-ctx.Done():
			mu.Unlock()
		}
	}()
	select {
	case <-got:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// The background settler's waits between tries (Engine.settleLater): from
// settleRetryMin, doubling after each failed try, up to settleRetryMax.
const (
	settleRetryMin = 10 * time.Millisecond
	settleRetryMax = time.Second
)

// testNoSettler, if set (by tests only), keeps failed truncates' undos
// from being settled in the background: a test then sees the commit
// owed until the file's fsync, truncate, Engine.Sync or a checkpoint.
var testNoSettler bool

// settleLater settles f's owed undo commit in the background, if it owes
// one and no goroutine does so already: an owed commit keeps what the
// undo's records replaced counted valid and GC away from the file's
// zones, which a file that is overwritten but never fsynced would
// otherwise keep for ever, on a healthy device too. The goroutine takes
// f.wmu exclusive (holding no other lock) for each try, counted as an
// operation (Engine.enter, so Close waits for a try in progress and
// none starts after), and tries again after a wait that doubles with
// each failure (settleRetryMin to settleRetryMax), or at once when a
// writer short of space asks (settleSoon). It ends when the state does
// (a try succeeded, a checkpoint saved the file, the file was removed)
// or the engine closes.
func (e *Engine) settleLater(f *file) {
	if testNoSettler {
		return
	}
	f.mu.Lock()
	u := f.undo
	start := u != nil && !u.settling
	if start {
		u.settling = true
	}
	f.mu.Unlock()
	if start {
		e.settlers.Add(1)
		go func() {
			defer e.settlers.Done()
			e.settleInBackground(f, u)
		}()
	}
}

// settleSoon ends the wait of f's background settler before its next
// try, starting one if none runs.
func (e *Engine) settleSoon(f *file) {
	f.mu.RLock()
	u := f.undo
	f.mu.RUnlock()
	if u == nil {
		return
	}
	select {
	case u.kick <- struct{}{}:
	default:
	}
	e.settleLater(f)
}

// settleInBackground is settleLater's goroutine for f's undo state u.
func (e *Engine) settleInBackground(f *file, u *undoState) {
	h := &File{e: e, f: f}
	wait := settleRetryMin
	for failures := 0; ; failures++ {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-u.kick:
		case <-e.closingCh:
			t.Stop()
			return
		}
		t.Stop()
		if e.enter() != nil {
			return // closing: its checkpoint saves the file
		}
		f.wmu.Lock()
		var err error
		if f.undoIs(u) {
			err = h.undoCut(context.Background(), false) // the fsync's error
		}
		f.wmu.Unlock()
		e.leave()
		f.mu.Lock()
		u.tries++
		done := f.undo != u
		f.mu.Unlock()
		e.idle.Signal() // a writer short of space may wait for a try (waitSettled)
		if done {
			return
		}
		if failures == 0 {
			e.log.Warn("engine: a failed truncate's undo still owes its commit; retrying in the background", "file", h.Name(), "err", err)
		} else {
			e.log.Debug("engine: an owed undo commit failed again", "file", h.Name(), "err", err, "failures", failures+1)
		}
		wait = min(2*wait, settleRetryMax)
	}
}

// undoIs reports whether u is f's undo state.
func (f *file) undoIs(u *undoState) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.undo == u
}

// undoOwed reports whether a failed truncate's undo owes f its commit.
func (f *file) undoOwed() bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.undo != nil
}

// flushUndo writes back the file's dirty data and flushes the device,
// for undoCut: durable before the next step, since a device may persist
// a later write and lose an earlier one (or a prefix of a zone's
// unflushed writes), and before the truncate returns
// (TestTruncateFlushEIOThenTornCrashKeepsFile). With take false it
// leaves the file's unreported writeback error for its fsync
// (writeback.FlushFileLeaveError): the undo's caller is not the fsync
// then, and what it took no fsync would report
// (TestSettlerLeavesWritebackErrorToFsync).
func (h *File) flushUndo(ctx context.Context, take bool) error {
	flush := h.e.wb.FlushFileLeaveError
	if take {
		flush = h.e.wb.FlushFile
	}
	if err := flush(ctx, h.f.id); err != nil {
		return fmt.Errorf("write back: %w", err)
	}
	return h.e.settledFlush(ctx)
}

// rewritePiece makes the file's bytes at pos (len(p), within one write
// piece) dirty again as they are, for undoCut; p is scratch.
func (h *File) rewritePiece(pos int64, p []byte) error {
	e, f := h.e, h.f
	ctx := context.Background()
	if testHookRewritePiece != nil {
		testHookRewritePiece(e)
	}
	cf, err := e.cacheFile(f)
	if err != nil {
		return fmt.Errorf("at %d: %w", pos, err)
	}
	if _, err := e.cache.Read(ctx, cf, pos, p, e); err != nil {
		return fmt.Errorf("read at %d: %w", pos, err)
	}
	charge := writeCharge(pos, int64(len(p)))
	// Without waiting for truncates' tails: this is one settling (see
	// admitTails).
	if err := e.admitTails(ctx, charge, f, false, minGCGain, 0); err != nil {
		return fmt.Errorf("at %d: %w", pos, err)
	}
	defer e.admitted.Add(-charge)
	if _, err := e.cache.Write(ctx, cf, pos, p, e); err != nil {
		return fmt.Errorf("write at %d: %w", pos, err)
	}
	return nil
}

// testHookTruncateTail, if set (by tests only), runs in a truncate's
// zeroTail once the new size is set, before the tail's zeros are written.
var testHookTruncateTail func(*Engine)

// testHookTruncateUndo, if set (by tests only), runs as a failed
// truncate puts the file back (zeroTail): with back false before the
// tail's old bytes go back into the cache, with back true once they and
// the old size are back, before undoCut writes anything.
var testHookTruncateUndo func(e *Engine, back bool)

// testHookRewritePiece, if set (by tests only), runs as undoCut begins
// to make a piece of the cut range dirty again (rewritePiece).
var testHookRewritePiece func(*Engine)

// testHookTruncateCut, if set (by tests only), runs between a truncate's
// cut of the extent map and its log record.
var testHookTruncateCut func(*Engine)

// Sync writes back the file's dirty data and flushes the device: when it
// returns, the data survives a crash.
func (h *File) Sync() error { return h.SyncContext(context.Background()) }

// SyncContext is Sync with cancellation.
func (h *File) SyncContext(ctx context.Context) error {
	if err := h.enter(); err != nil {
		return err
	}
	defer h.e.leave()
	// The settle leaves the file's writeback failures to this handle's
	// cursor (take false): the flush below reports them, or, if the
	// settle fails, they go with its error.
	if err := h.settleOwed(ctx, false); err != nil {
		return fmt.Errorf("engine: sync %q: %w", h.f.name(), h.seenWith(err))
	}
	if err := h.e.wb.FlushFileSeen(ctx, h.f.id, &h.errSeen); err != nil {
		return fmt.Errorf("engine: sync %q: %w", h.f.name(), err)
	}
	if err := h.e.flushAcked(ctx, h.e.syncTicket(h.f)); err != nil {
		return fmt.Errorf("engine: sync %q: %w", h.f.name(), err)
	}
	return nil
}

// syncTicket is the ticket (see flushGroup) of the flush an fsync of f
// needs once it has written back f's dirty data and waited for its
// writeback in flight: the later of the flush that covers f's latest
// append (file.dataFlush) and the one that covers the latest namespace
// operation logged (metaLog.needFlush: f's create, grow, truncate or
// rename, and the deferred creates and removes of every file, which an
// fsync of any file makes durable: ODeferSync, RemoveDeferred), and at
// least the first flush since Open (recovery may have read records the
// device had not made durable; its checkpoint flushes them). If a flush
// numbered that or later has succeeded already, everything the fsync
// promises is durable and it runs no flush of its own (flushAcked still
// settles a failed operation's record). A failed flush covers nothing:
// the fsync then waits for one that succeeds or reports its failure.
// An fsync that always flushed cost fio laying out 1000 files (deferred
// create, grow, fsync) a device flush per file after each grow had
// flushed all of it. Writes that complete after the call need not be
// covered, so a ticket taken late is only ever more than needed.
//
// While operations are held for a pack (metaLog.pend), it is pendTicket:
// flushAcked lands them and takes the ticket after their record, which
// covers f's latest append too (tickets grow; a checkpoint that took
// them instead flushed after it). Read first: once none is held, every
// one held before has landed and needFlush covers it (opsLanded).
func (e *Engine) syncTicket(f *file) uint64 {
	if e.meta.pending.Load() {
		return pendTicket
	}
	return max(f.dataFlush.Load(), e.meta.needFlush.Load(), 1)
}

// seenWith is err, the failure of this handle's fsync or truncate, with
// the file's writeback failures the handle has not seen joined to it
// (unless err reports it already: a truncate takes the file's unreported
// error), and moves the handle's cursor past them (File.errSeen): the
// operation reported them to the handle, and its next fsync does not
// again.
func (h *File) seenWith(err error) error {
	if err == nil {
		return nil
	}
	if s := h.e.wb.TakeSeen(h.f.id, &h.errSeen); s != nil && !errors.Is(err, s) {
		return errors.Join(err, s)
	}
	return err
}

// Close releases the handle; the file's dirty data stays in the cache.
func (h *File) Close() error {
	if h.closed.Swap(true) {
		return fmt.Errorf("engine: file %q: %w", h.Name(), fs.ErrClosed)
	}
	if h.f.handles.Add(-1) == 0 {
		h.e.lastClosed(h.f)
		h.e.finishTail(h.f)
	}
	return nil
}

// finishTail gives up the rest of a closed file's zone when less room
// than Config.FinishTail is left there and no other file has taken it:
// the next file then gets a zone of its own instead of starting in this
// one's tail. bench gc's lifetimes (16 writers of whole files, a zone
// open per writer) started every new file in a finished file's tail,
// ~510 per run, and GC copied out whichever of the two outlived the
// other; finishing tails below a quarter zone cut GC's victims with data
// from 80-101 to 50-59 per run (see the commit).
func (e *Engine) finishTail(f *file) {
	limit := e.cfg.FinishTail
	z := f.mru.Load()
	if limit <= 0 || z == nil {
		return
	}
	if e.placer.finishTail(z, f, limit, e.reserveTail) {
		e.kickRetirer()
	}
}

// reserveTail reports whether the rest of a zone, rem bytes, can leave
// the free space without taking room admission promised (dirty data and
// writes admitted: see roomFor). It reserves rem as admission reserves a
// write, then checks with every reservation counted, so a write admitted
// meanwhile and the finish cannot both take the last room; the caller
// gives rem back (release) once the zone's rest has left the free space,
// or at once if it did not. Finishing a tail the device needs was room
// lost to accepted writes: one under minGCGain no GC pass reclaims, and
// their fsync failed with ENOSPC (TestH25cTailFinishKeepsAdmittedRoom).
// Atomics only: placer.finishTail calls it under placer.mu.
func (e *Engine) reserveTail(rem int64) (ok bool, release func()) {
	e.admitted.Add(rem)
	release = func() { e.admitted.Add(-rem) }
	if !e.roomFor(0) {
		release()
		return false, nil
	}
	return true, release
}

// writeCharge is what a write of n bytes at off may add to what
// writeback must append: the blocks it touches, and a record header in
// case the file had no dirty data (a file with dirty data is counted a
// header already, see roomFor).
func writeCharge(off, n int64) int64 {
	first, end := off/BlockSize, (off+n+BlockSize-1)/BlockSize
	return (end-first)*BlockSize + BlockSize
}

// admit makes room for a write that may add charge bytes to what
// writeback appends (see writeCharge) and reserves them: the caller
// gives them back with e.admitted.Add(-charge) once the write is in the
// cache, where the dirty count holds them. While the device's free space
// (less what dirty data and admitted writes will take) cannot hold it,
// the writer runs GC itself, so writers slow down as space runs out.
// Only when GC can free no more than a sliver of a zone (see admitGain)
// is the write refused with ENOSPC: a write admitted is one its fsync can
// make durable, as a kernel file system with delayed allocation reserves
// space when it accepts a write.
//
// A victim GC skips because a file in it is in a truncate's unsettled
// window (errTailUnsettled) may be the only one worth collecting: the
// writer then waits for that window to end (waitSettled) and tries
// again, rather than report a full device the truncate is about to free
// for GC.
func (e *Engine) admit(ctx context.Context, charge int64, own *file) error {
	keep := e.keepFor(own)
	err := e.admitTails(ctx, charge, own, true, e.admitGain(), keep)
	if err != nil && own != nil && own.useReserved.Load() && errors.Is(err, ErrNoSpace) {
		// A file allowed the reserve (SetReserved) is one whose failed
		// write the application cannot survive: GC passes of any gain,
		// which admission spares other writes for their cost.
		err = e.admitTails(ctx, charge, own, true, minGCGain, keep)
	}
	return err
}

// maxAdmitFlushes bounds the write-backs of the whole cache one
// admission runs to turn dirty overwrites into garbage GC can reclaim.
const maxAdmitFlushes = 256

// maxTailWaits bounds the truncate windows one admission waits for.
const maxTailWaits = 4

// tailSettleWait bounds each wait for a truncate window. A window ends
// with the completion of one record, or with a failed truncate's undo
// (a rewrite and a flush of the bytes it cut), so this is far more than
// it takes; it only keeps a device that stopped completing I/O from
// holding a writer for ever.
const tailSettleWait = 10 * time.Second

// admitTails is admit; waitTails says whether to wait for a truncate's
// window GC skipped. A truncate's own undo (undoCut) does not: the window
// it would wait for may be its own, which ends only when it returns.
// minGain is the least a GC pass run for it must free (admitGain for new
// data; minGCGain for a truncate, which frees space, and for an undo,
// which puts back bytes the file held: refusing those for the cost of
// their room left a durable cut, or a full device nobody could shrink).
//
// Waiting is safe because nothing that ends a window waits for a writer
// being admitted: the zeros' record completes once submitted, and
// WriteExtents submits what the ring holds before it waits for
// anything; an undo runs under its own file's wmu, admits its rewrites
// without waiting, and writes back and flushes only its own file (so
// does the background settler's try of an owed commit, whose wmu the
// writer does not hold: own, the writer's file, is never waited for).
// The waiter holds no engine lock but its own file's wmu (admission
// holds no reservation while it collects), and waits without the
// collector. No two writers wait for each other's file's settler: a
// writer that holds its file's wmu has settled that file's owed commit
// first (WriteAtContext; a truncate's settleUndo), and none can begin
// while it holds wmu, so the settler it waits for never needs a wmu held
// by a writer being admitted (TestUndoOwedTwoWritersNoCrossWait; when
// writes left the commit owed, two such writers waited out
// tailSettleWait, then reported ENOSPC on a device of garbage).
//
// keep is the space the write must leave free (SetReserved): 0 for a
// truncate's and an undo's, which put back or cut bytes.
func (e *Engine) admitTails(ctx context.Context, charge int64, own *file, waitTails bool, minGain, keep int64) error {
	flushes := 0
	resetsAtFlush := int64(0) // GC's resets when this admission last flushed
	waits := 0
	var gcErr error // the last pass's, if the device failed it
	// Reserve, then check with every reservation counted: two
	// writers racing for the last room cannot both take it.
	// keep (the reserve, SetReserved) must stay free beside it:
	// room appends can take, not garbage GC may never reclaim.
	take := func() bool {
		e.admitted.Add(charge)
		if e.keepsReserve(keep) {
			return true
		}
		e.admitted.Add(-charge)
		return false
	}
	for {
		if take() {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if waitTails && e.isClosing() {
			// Close stops writeback and GC; a truncate's undo (not
			// waitTails) goes on, to put its file back.
			return fmt.Errorf("engine: write of %d bytes: %w", charge, ErrClosed)
		}
		// The collector reserves the room for us when it has it, as
		// soon as its pass made it (reclaimTake).
		taken, moved, unsettled, err := e.gc.reclaimTake(take, minGain)
		if testHookAdmitReclaimed != nil {
			testHookAdmitReclaimed(e, charge, taken)
		}
		if taken {
			return nil
		}
		if moved {
			continue
		}
		gcErr = err
		if unsettled != nil && waitTails && waits < maxTailWaits {
			waits++
			if err := e.waitSettled(ctx, unsettled, own); err != nil {
				return fmt.Errorf("engine: write of %d bytes: wait for a truncate GC skipped: %w", charge, err)
			}
			continue
		}
		if e.cache.DirtyBytes() > 0 && (flushes == 0 ||
			flushes < maxAdmitFlushes && e.stats.gcResets.Load() != resetsAtFlush) {
			// Dirty data counts as needing space, but much of it may
			// overwrite data on the device: written back, it turns
			// those old copies into garbage GC can reclaim. Other
			// writers dirty the cache again meanwhile: one flush let
			// writers at a depth of 16 and more overwriting files of
			// 59% of the device find their room taken again by the
			// next ones' dirty data, and refused them ENOSPC
			// (TestH29bConcurrentOverwritesNoENOSPC). So the writer
			// flushes again as long as GC reset a zone since its last
			// flush: space is coming back, only others took it first.
			flushes++
			resetsAtFlush = e.stats.gcResets.Load()
			if err := e.wb.SyncAll(ctx); err != nil {
				return fmt.Errorf("engine: write of %d bytes: make room: %w", charge, err)
			}
			continue
		}
		if e.keepsNoData {
			return fmt.Errorf("engine: write needing %d bytes of the device: %w: %w", charge, ErrNoSpace, errNoDataKept)
		}
		if gcErr == nil {
			// The pass found nothing to collect, but zones it left
			// out because the device failed them lately would free
			// room: the device is failing, not full.
			gcErr = e.gc.failingFor(minGain)
		}
		if gcErr != nil {
			// Not full: failing. The client must see the cause.
			return fmt.Errorf("engine: write needing %d bytes of the device: GC could not make room: %w", charge, gcErr)
		}
		if keep > 0 {
			return fmt.Errorf("engine: write needing %d bytes of the device: %d more are reserved for other files, and no zone's reclaim frees %d bytes or more (%s): %w",
				charge, keep, minGain, e.spaceReport(), ErrNoSpace)
		}
		return fmt.Errorf("engine: write needing %d bytes of the device: no zone's reclaim frees %d bytes or more (%s): %w",
			charge, minGain, e.spaceReport(), ErrNoSpace)
	}
}

// testHookAdmitReclaimed, if set (by tests only), runs in admitTails
// each time a writer short of room comes back from the collector, holding
// nothing but its file's wmu: where another writer's admission may take
// the room a pass made (taken: it holds its room).
var testHookAdmitReclaimed func(e *Engine, charge int64, taken bool)

// waitSettled waits until f's truncate window has ended (tailSeq is 0
// again), ctx is done (its error) or tailSettleWait has passed (nil:
// the caller tries GC once more and, that failing, reports ENOSPC).
//
// A failed truncate's undo that owes its commit past the truncate
// (tailSeq back at 0, file.undo still set) keeps GC from f too: its
// background settler tries at once (settleSoon), and the writer waits
// for that try to end, however it ends, unless f is the writer's own
// file (own), whose wmu it holds and the settler needs: the settler
// then tries once the write has returned.
func (e *Engine) waitSettled(ctx context.Context, f, own *file) error {
	if testHookTailWait != nil {
		testHookTailWait(e)
	}
	f.mu.RLock()
	u := f.undo
	var tries int
	if u != nil {
		tries = u.tries
	}
	f.mu.RUnlock()
	if u != nil {
		e.settleSoon(f)
	}
	waitTry := u != nil && f != own && !testNoSettler
	settled := func() bool {
		f.mu.RLock()
		defer f.mu.RUnlock()
		return f.tailSeq == 0 && (!waitTry || f.undo != u || u.tries != tries)
	}
	timer := time.NewTimer(tailSettleWait)
	defer timer.Stop()
	for !settled() {
		ch := e.idle.Wait()
		if settled() {
			return nil
		}
		_ = e.ring.Flush() // the zeros' record may be what the ring holds
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-e.closingCh:
			return ErrClosed
		case <-timer.C:
			return nil
		}
	}
	return nil
}

// testHookTailWait, if set (by tests only), runs when a writer being
// admitted starts to wait for a truncate's window (waitSettled).
var testHookTailWait func(*Engine)

// admitGainDiv: a GC pass run to admit a write takes a victim only if
// its reclaim frees at least 1/admitGainDiv of a zone, net of the copy
// and its headers.
//
// Near a full device, garbage is a sliver of every zone, and a pass that
// took any victim gaining minGCGain copied a zone ~99% valid to free a
// few blocks, for each refused write in turn: bench lsm at --util 0.45
// copied 2.1 GB in 8 minutes that way while Pebble retried its
// compactions (TestAdmissionRefusesWhenGCFreesSlivers). At 1/32 a byte
// admitted costs GC at most 31 copied; below that the write is ENOSPC,
// which tells the application to free space, as it would on a kernel
// file system. A write larger than that gain takes several passes, each
// freeing at least as much. Writeback of data already admitted runs a
// pass at this gain too, then takes the room of a zone GC opened (which
// roomFor counts while GC's reserve is whole, placer.space), and only
// then any victim that gains minGCGain (WriteExtents): a write once
// accepted is never refused for the cost of its room, but passes of any
// gain are not how room is made for writes admission goes on to accept.
const admitGainDiv = 32

// admitGain is the least net space a pass run for admission must free.
func (e *Engine) admitGain() int64 {
	return max(minGCGain, e.placer.zoneCap()/admitGainDiv)
}

// spaceReport says where the device's space is, for an ENOSPC: a user
// told only that the device is full cannot tell live data from dirty
// data waiting for room, or from garbage GC cannot reach. The capacity
// is the data zones' whole, offline ones too, so the report names what
// is offline (TestNoSpaceReportSaysWhatIsOffline).
//
// While GC holds zones it took from its reserve, the room left in them
// is not counted (placer.space) and the report says how much: the user
// would otherwise see an open zone with room and a refused write. That
// room stays GC's until its resets refill the reserve, even when GC has
// nothing to collect as the write asks: garbage made later without
// taking room (a remove) gives GC a victim, its copies fill that room
// and the victim's reset refills the reserve, not the clients' room
// (TestH36bBorrowedRoomIsGCsEvenWithNoVictim).
func (e *Engine) spaceReport() string {
	r := fmt.Sprintf("capacity %d: %d valid on the device, %d dirty in the cache, %d admitted, %d appendable without GC, %d free zones",
		e.Capacity(), e.placer.validBytes(), e.cache.DirtyBytes(), e.admitted.Load(), e.placer.space(), e.placer.nfree.Load())
	if zones, capacity, lost := e.placer.offlineBytes(); zones > 0 {
		r += fmt.Sprintf("; offline zones %d (%d bytes of the capacity, %d bytes of files lost there)", zones, capacity, lost)
	}
	if taken, room := e.placer.reserveTaken(); taken > 0 {
		r += fmt.Sprintf("; GC has taken %d of its %d reserve zones, and the %d bytes left in its zones are held for its copies until its resets refill the reserve",
			taken, e.placer.gcReserve, room)
	}
	return r
}

// roomFor reports whether n more bytes of writes fit in the space appends
// can still take, beside the dirty data and the writes admitted and not
// yet in the cache. Writeback appends each dirty file's data in records:
// a header block for each file, and one for each further MaxRecordExtents
// extents or record's worth of data, and for each zone the data splits
// across; and each zone that may be open at once may end in a pad.
//
// The records of a flush in flight count twice: placed, their room has
// left placer.space, and their bytes stay in cache.DirtyBytes until the
// flush ends (EndWriteback). That is the room their retry takes if the
// flush fails: a failed flush leaves every byte it carried dirty, those
// whose records landed too, and those landed copies stay valid until
// the retry lands, so until the flush ends any of its bytes may need
// room a second time, and admission can keep that room only before the
// failure. So a write refused while a flush is in flight may fit once
// it has ended (TestH38dInFlightFlushKeepsItsRetryRoom); counted
// once, a write admitted into that room left a failed flush's retry
// with ENOSPC (TestH38dFailedFlushFindsRoomForItsRewrite). Counting
// them once needs a failed flush to leave dirty only what did not land.
//
// What it counts is Layout.Need, which FreshLayout gives a caller that
// sizes a workload before the format.
func (e *Engine) roomFor(n int64) bool {
	return e.placer.space() >= e.layout().Need(e.cache.DirtyFileCount(), e.cache.DirtyBytes()+e.admitted.Load()+n)
}

// layout is Layout without Capacity and Room, which roomFor does not
// need (Available sums every zone's valid bytes).
func (e *Engine) layout() Layout {
	return Layout{perHeader: perHeader(e.geo), zoneCap: e.placer.zoneCap(), pads: e.placer.pads()}
}

// Layout is how the engine lays files out (see FreshLayout), its Room
// what Available says now.
func (e *Engine) Layout() Layout {
	l := e.layout()
	l.Capacity, l.Room = e.Capacity(), e.Available()
	return l
}

// ReadBacking implements cache.Backing: it fills p with the file's bytes
// at off from the device, zeros where nothing is mapped. Only the gaps
// are zeroed: clearing all of p first was a tenth of a cold sequential
// read's CPU, for bytes the device read then overwrote.
func (e *Engine) ReadBacking(fileID uint64, off int64, p []byte) error {
	return e.readBacking(fileID, off, p, false)
}

// ReadBackingAhead implements cache.AheadBacking: ReadBacking for bytes
// read ahead (readahead's windows, a sequential reader's fill past its
// request), whose failure counts in no stat and logs nothing: it is no
// reader's (a fill that fails is read again without it, and that read's
// failure is counted, once).
func (e *Engine) ReadBackingAhead(fileID uint64, off int64, p []byte) error {
	return e.readBacking(fileID, off, p, true)
}

// readBacking is ReadBacking; quiet, ReadBackingAhead.
func (e *Engine) readBacking(fileID uint64, off int64, p []byte, quiet bool) error {
	f := e.fileByID(fileID)
	if f == nil {
		return errRemovedWhileRead
	}
	// Whole blocks (the cache's are the engine's): each is checked
	// against its checksum.
	if off%BlockSize != 0 || len(p)%BlockSize != 0 {
		return fmt.Errorf("engine: unaligned backing read of %d bytes at %d: %w", len(p), off, syscall.EINVAL)
	}
	var pieces [maxReadPieces]extent
	for done := int64(0); done < int64(len(p)); {
		// Gather up to 32 pieces under the file lock, pinning their
		// zones against GC reset, then read them in one batch.
		n, next, err := e.gatherPieces(f, off, done, p, &pieces)
		if err != nil {
			return err
		}
		if err := e.readPieces(fileID, pieces[:n], p, off, quiet); err != nil {
			return err
		}
		done = next
	}
	return nil
}

// gatherPieces finds the mapped pieces of p (the file's bytes at off)
// from p[done:] on, at most len(pieces) of them, zeroes the gaps between
// them, and pins their zones against GC reset (readPieces, or
// unpinPieces, unpins them). It returns how many it found and where in p
// the next call must start (len(p) when they reach its end).
func (e *Engine) gatherPieces(f *file, off, done int64, p []byte, pieces *[maxReadPieces]extent) (int, int64, error) {
	n := 0
	next := int64(len(p))
	zeroFrom := done // p[zeroFrom:] up to the next piece is a gap
	f.mu.RLock()
	if f.gone {
		// Its extents are gone with it (dropFile): what a lookup
		// found not would read as zeros, never written.
		f.mu.RUnlock()
		return 0, 0, errRemovedWhileRead
	}
	f.ext.lookup(off+done, int64(len(p))-done, func(x extent) {
		if n == len(pieces) {
			next = min(next, x.off-off)
			return
		}
		clear(p[zeroFrom : x.off-off])
		zeroFrom = x.end() - off
		pieces[n] = x
		n++
		if z := e.zoneAt(x.dev); z != nil {
			z.readers.Add(1)
		}
	})
	f.mu.RUnlock()
	clear(p[zeroFrom:next])
	return n, next, nil
}

// errRemovedWhileRead is ReadBacking's answer for a file removed (or
// renamed over) before or while it read: its bytes are no longer the
// file's, and zeros in their place, which a handle opened before the
// removal got, are bytes nobody wrote (a get racing a put of the same
// name copied a whole file with its second half zeros, exit 0).
var errRemovedWhileRead = fmt.Errorf("engine: the file was removed while it was read: %w", fs.ErrNotExist)

// readPieces reads mapped pieces into p (which starts at file offset
// base) in one plugged batch, checks their blocks' sums (see verify.go),
// and unpins their zones; quiet, a failure counts in no stat.
//
// A batch the device fails is read again before its failure is the
// reader's (unless quiet: readahead's reads, and a fill past the
// request, which the cache reads again without the fill), piece by
// piece and a piece that fails alone block by block (readAlone): the
// block layer merges adjacent reads that are in its queue together, a
// reader's and a readahead worker's of the next window say, and fails
// the whole merged request when one of its sectors is bad, so a read
// that touches no bad block can fail beside one that does. On null_blk
// in the VM, with a bad block at 128 KiB of a cold file, the cold read
// of [0, 128 KiB) at a new handle failed with EIO in 4 of 10 runs of
// testdata/vm/badblocks.sh (cold-neighbors, data-read): its device
// reads ended where the bad block begins, and the readahead window the
// read started (from 128 KiB) was submitted while they were in flight
// and failed with them. Only a block that fails on its own is EIO
// (TestH42aReadBesideABadBlockMergedWithReadahead).
func (e *Engine) readPieces(fileID uint64, pieces []extent, p []byte, base int64, quiet bool) error {
	if len(pieces) == 0 {
		return nil
	}
	err := e.readPiecesOnce(fileID, pieces, p, base, quiet)
	if err != nil && !quiet && !errors.Is(err, ErrChecksum) && !errors.Is(err, uring.ErrClosed) {
		e.stats.readRetries.Add(1)
		err = e.readAlone(fileID, pieces, p, base)
	}
	e.unpinPieces(pieces)
	switch {
	case errors.Is(err, ErrChecksum):
		return err // counted where it was found
	case err != nil:
		if !quiet {
			e.stats.readErrs.Add(1)
		}
		return fmt.Errorf("engine: device read: %w", err)
	}
	return nil
}

// readPiecesOnce reads pieces into p (which starts at file offset base)
// in one batch and checks their sums; their zones stay pinned.
func (e *Engine) readPiecesOnce(fileID uint64, pieces []extent, p []byte, base int64, quiet bool) error {
	for _, x := range pieces {
		e.stats.devRead.Add(x.len)
	}
	if e.cfg.NoReadVerify {
		_, err := e.readBatch(len(pieces), func(i int) (int64, []byte) {
			x := pieces[i]
			return x.dev, p[x.off-base : x.off-base+x.len]
		})
		return err
	}
	return e.readChecked(fileID, pieces, p, base, quiet)
}

// readAlone reads pieces whose batch the device failed again: each
// piece alone, and each block of a piece that fails alone, alone; the
// first block that fails on its own (or fails its checksum) is the
// read's error. Their zones stay pinned. Cold: only after a failure.
func (e *Engine) readAlone(fileID uint64, pieces []extent, p []byte, base int64) error {
	var one [1]extent
	for _, x := range pieces {
		one[0] = x
		err := e.readPiecesOnce(fileID, one[:], p, base, false)
		if err == nil {
			continue
		}
		if errors.Is(err, ErrChecksum) || errors.Is(err, uring.ErrClosed) || x.len == BlockSize {
			return err
		}
		for b := x.off; b < x.end(); b += BlockSize {
			one[0] = x.clip(b, b+BlockSize)
			if err := e.readPiecesOnce(fileID, one[:], p, base, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// unpinPieces unpins the zones gatherPieces pinned for pieces.
func (e *Engine) unpinPieces(pieces []extent) {
	for _, x := range pieces {
		if z := e.zoneAt(x.dev); z != nil && z.readers.Add(-1) == 0 {
			e.idle.Signal() // GC may wait to reset the zone
		}
	}
}

// readBatch reads n device ranges, each no longer than the device's max
// append, submitted under one plug, and waits for them all. It returns the
// bytes read.
func (e *Engine) readBatch(n int, at func(i int) (dev int64, dst []byte)) (int64, error) {
	g := e.readGroups.Get().(*uring.Group)
	defer e.readGroups.Put(g)
	e.ring.Plug()
	var subErr error
	var want int64
	for i := range n {
		dev, dst := at(i)
		want += int64(len(dst))
		g.Add(1)
		if err := e.dev.Read(dev, dst, g); err != nil {
			g.Complete(uring.Result{})
			subErr = err
		}
	}
	uerr := e.ring.Unplug()
	got, err := e.ring.WaitGroup(g, "read")
	switch {
	case subErr != nil:
		err = subErr
	case uerr != nil:
		err = uerr
	case err == nil && got != want:
		// The rest of dst is whatever the memory held (arena bytes
		// of another file); the checksums would call it corruption.
		err = fmt.Errorf("short device read: %d of %d bytes: %w", got, want, io.ErrUnexpectedEOF)
	}
	if err != nil {
		e.kickOffline() // a zone may have gone offline
	}
	return got, err
}

// isZero reports whether p holds only zero bytes.
func isZero(p []byte) bool {
	for _, b := range p {
		if b != 0 {
			return false
		}
	}
	return true
}
