// Package pebblefs is Pebble's file system (vfs.FS) over a zonefold
// engine, in process: a real LSM store, github.com/cockroachdb/pebble/v2,
// on zoned storage, with no kernel file system between them.
//
// Names are slash-separated paths, cleaned, with no leading slash ("/db/x"
// and "db/x" are one file); each file is the engine file of that name. A
// directory is a marker, an empty engine file named "dir/"; a file "a/b"
// lives in directory "a", which must exist when the file is created, as
// on a kernel file system. The root always exists.
//
// Durability, which is what Pebble's crash safety rests on:
//
//   - A file's data is durable when its Sync (or SyncData) returns: the
//     engine writes its dirty data back and flushes the device.
//   - Every namespace change is atomic. Renames (and the one
//     ReuseForWrite does) and mkdir are durable when they return: the
//     engine logs them to its metadata zone and flushes. Creating and
//     removing a file are logged without a flush (engine.ODeferSync,
//     RemoveDeferred) and are durable from the device's next flush: the
//     file's own Sync, any file's, a durable namespace change, or a
//     directory's Sync — what Pebble does on a kernel file system, where a
//     new or unlinked name is durable once its directory is fsynced. A
//     crash before that loses a new file, or brings a removed one back
//     whole, as there; never a rename half done.
//   - Data written and not synced may or may not survive a crash, whole
//     records at a time; a file's size after a crash covers at least its
//     synced data (bytes past what survived read as zeros).
//
// Periodic syncs: Pebble syncs a table every Options.BytesPerSync bytes
// (512 KiB by default) as it writes it, with sync_file_range on a kernel
// file system (a write-back hint, no durability); on a file without a
// descriptor it calls Sync instead, a device flush each time. The engine
// writes dirty data back on its own, so set BytesPerSync to
// NoPeriodicSync; tables are still synced when finished.
//
// A full device: Pebble retries a flush or compaction whose table write
// failed, but a failed WAL or MANIFEST write ends the process (see
// ReserveFor). Call ReserveFor with Pebble's options: the engine then
// keeps that room for the WAL, MANIFEST and OPTIONS files, so tables meet
// ENOSPC first; Pebble's writes stall (OnNoSpace tells of the refusals)
// and every write it acknowledged is kept. A writable Open waits for the
// flush of the WAL it replays, for as long as the device is full: open
// read-only to read the data, or free room first.
//
// Not supported: hard links (Link fails so that Pebble falls back to
// copying, as its LinkOrCopy does on file systems without them) and
// renaming a directory (Pebble renames files only). A copy takes device
// space where a link takes none: an ingest or checkpoint on a full
// device fails with ENOSPC where a kernel file system's link succeeds,
// and the table copy it failed to fill stays in the DB's directory,
// holding what it wrote, until the DB is opened again (vfs.Copy does not
// remove it, nor does Pebble's ingest, which deletes only the tables it
// linked before; Pebble's open deletes unreferenced tables). Unlike a kernel file
// system or vfs.NewMem, a path is at most engine.MaxNameLen (255) bytes
// as a whole, not per component (a longer one fails Create and MkdirAll
// with the engine's invalid-name error). A handle of a file that is
// removed, renamed over or created over keeps that file, unnamed, until
// it closes, as on a kernel file system (Create replaces the file, as
// vfs.NewMem's does, rather than truncating it).
//
// Write-life hints: files are created with the engine's write-life hint
// their Pebble category implies (the WAL short, flushed tables medium,
// compacted tables long), and EventListener refines a table's hint by the
// level a compaction writes it to (the bottom level extreme). Under mru
// the engine starts a new file in a finished file's tail of its class
// before a fresh zone; under hinted each class shares one zone stream.
//
// Locks: Lock excludes other lockers in this process only; the engine
// already owns its device exclusively.
//
// Lock order: FS.mu (the job→level table) is a leaf; nothing is called
// with it held. Per handle, file.mu (Read's and Write's offset) comes
// before readahead.mu (a sequential handle's window: Read reads through
// it), and the engine's locks after both.
package pebblefs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/zonefold/zonefold/engine"
)

// NoPeriodicSync is a pebble.Options.BytesPerSync that no table reaches:
// Pebble reads 0 as its default (see the package doc).
const NoPeriodicSync = 1 << 40

// FS implements vfs.FS over an engine. It does not own the engine: close
// the Pebble DB first, then the engine. Any number of FS values may share
// one engine.
type FS struct {
	e *engine.Engine

	mu     sync.Mutex
	levels map[int]int // Pebble job id → the level it writes tables to

	noSpace atomic.Pointer[func(error)] // see OnNoSpace
}

// OnNoSpace sets a function that a write or sync of a file calls, before
// it returns, when it fails with ENOSPC: the device is full. Pebble
// retries a failed compaction without end (its writes then stall for
// good) and panics on a WAL write it cannot complete, so a caller that
// drives Pebble needs word of a full device from below it to stop
// cleanly. f must not block.
func (y *FS) OnNoSpace(f func(error)) { y.noSpace.Store(&f) }

var _ vfs.FS = (*FS)(nil)

// New returns the file system of e.
func New(e *engine.Engine) *FS {
	return &FS{e: e, levels: map[int]int{}}
}

// Engine is the engine the file system lives on.
func (y *FS) Engine() *engine.Engine { return y.e }

// clean turns a Pebble path into an engine name: cleaned, without a
// leading slash; "" is the root.
func clean(name string) string {
	n := strings.TrimLeft(path.Clean("/"+name), "/")
	return n
}

// dirMarker is the engine name that says directory dir exists.
func dirMarker(dir string) string { return dir + "/" }

func pathErr(op, name string, err error) error {
	return &fs.PathError{Op: op, Path: name, Err: err}
}

// errNoLinks makes vfs.LinkOrCopy copy instead: it is none of the errors
// (exist, not exist, permission) that copying would not fix.
var errNoLinks = fmt.Errorf("pebblefs: hard links: %w", vfs.ErrUnsupported)

// isFile reports whether name (cleaned) is a file.
func (y *FS) isFile(name string) bool {
	if name == "" {
		return false
	}
	_, err := y.e.Stat(name)
	return err == nil
}

// isDir reports whether name (cleaned) is a directory.
func (y *FS) isDir(name string) bool {
	if name == "" {
		return true
	}
	_, err := y.e.Stat(dirMarker(name))
	return err == nil
}

// checkPlace refuses to make a file name where a directory is, or in a
// directory that does not exist.
func (y *FS) checkPlace(op, name string) error {
	if name == "" || y.isDir(name) {
		return pathErr(op, name, syscall.EISDIR)
	}
	if parent := path.Dir(name); parent != "." && !y.isDir(parent) {
		if y.underFile(name) {
			return pathErr(op, name, syscall.ENOTDIR)
		}
		return pathErr(op, name, fs.ErrNotExist)
	}
	return nil
}

// underFile reports whether a path above name (cleaned) is a file.
func (y *FS) underFile(name string) bool {
	for d := path.Dir(name); d != "."; d = path.Dir(d) {
		if y.isFile(d) {
			return true
		}
	}
	return false
}

// Create implements vfs.FS: it makes a new, empty file, removing one of
// that name first (open handles keep that one until they close).
func (y *FS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	n := clean(name)
	if err := y.checkPlace("create", n); err != nil {
		return nil, err
	}
	for {
		if err := y.e.RemoveDeferred(n); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		h, err := y.e.OpenFile(n, engine.OCreate|engine.OExcl|engine.ODeferSync)
		if errors.Is(err, fs.ErrExist) {
			continue // created again meanwhile: remove that one
		}
		if err != nil {
			return nil, err
		}
		return y.newWriter(h, n, category)
	}
}

// Link implements vfs.FS. The engine has no hard links: it fails with an
// error that makes vfs.LinkOrCopy copy.
func (y *FS) Link(oldname, newname string) error {
	o, n := clean(oldname), clean(newname)
	switch {
	case !y.isFile(o):
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: fs.ErrNotExist}
	case y.isFile(n) || y.isDir(n):
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: fs.ErrExist}
	}
	return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: errNoLinks}
}

// Open implements vfs.FS: a read-only handle.
func (y *FS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	n := clean(name)
	if y.isDir(n) {
		return y.OpenDir(name)
	}
	h, err := y.e.Open(n)
	if err != nil {
		return nil, err
	}
	f, err := y.newFile(h, n, true, false, engine.LifeNotSet)
	if err != nil {
		return nil, err
	}
	for _, o := range opts {
		if o == vfs.SequentialReadsOption {
			f.ra = &readahead{}
		}
		o.Apply(f)
	}
	return f, nil
}

// OpenReadWrite implements vfs.FS: it opens name for reading and writing,
// creating it if it does not exist.
func (y *FS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	n := clean(name)
	if err := y.checkPlace("open", n); err != nil {
		return nil, err
	}
	h, err := y.e.OpenFile(n, engine.OCreate|engine.ODeferSync)
	if err != nil {
		return nil, err
	}
	f, err := y.newWriter(h, n, category)
	if err != nil {
		return nil, err
	}
	for _, o := range opts {
		o.Apply(f)
	}
	return f, nil
}

// OpenDir implements vfs.FS. A directory's Sync makes the creates and
// removes in it durable (engine.SyncNamespace: all of them, in fact).
func (y *FS) OpenDir(name string) (vfs.File, error) {
	n := clean(name)
	if !y.isDir(n) {
		if y.isFile(n) {
			return nil, pathErr("open", name, syscall.ENOTDIR)
		}
		return nil, pathErr("open", name, fs.ErrNotExist)
	}
	return &dirFile{y: y, name: n}, nil
}

// children lists the engine names under directory dir (cleaned), markers
// of subdirectories included, dir's own marker not.
func (y *FS) children(dir string) []string {
	prefix := ""
	if dir != "" {
		prefix = dirMarker(dir)
	}
	var out []string
	for _, fi := range y.e.List() {
		if strings.HasPrefix(fi.Name, prefix) && fi.Name != prefix {
			out = append(out, fi.Name)
		}
	}
	return out
}

// Remove implements vfs.FS: a file, or an empty directory.
func (y *FS) Remove(name string) error {
	n := clean(name)
	if y.isFile(n) {
		return y.e.RemoveDeferred(n) // durable with the directory's Sync
	}
	if n == "" || !y.isDir(n) {
		return pathErr("remove", name, fs.ErrNotExist)
	}
	if len(y.children(n)) > 0 {
		return pathErr("remove", name, syscall.ENOTEMPTY)
	}
	return y.e.Remove(dirMarker(n))
}

// RemoveAll implements vfs.FS: name and everything under it. A name that
// does not exist is not an error, as with os.RemoveAll.
func (y *FS) RemoveAll(name string) error {
	n := clean(name)
	if n == "" {
		return pathErr("removeall", name, fs.ErrInvalid)
	}
	if y.underFile(n) {
		return pathErr("removeall", name, syscall.ENOTDIR)
	}
	var errs []error
	if y.isDir(n) {
		// Deepest first, the directory's own marker last, so that a
		// crash midway leaves no file in a directory that is gone.
		kids := y.children(n)
		for i := len(kids) - 1; i >= 0; i-- {
			if err := y.e.Remove(kids[i]); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		if err := y.e.Remove(dirMarker(n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := y.e.Remove(n); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return errs[0] // the first error, as vfs.FS says
	}
	return nil
}

// Rename implements vfs.FS for files: atomic and durable when it returns,
// replacing newname if it is a file.
func (y *FS) Rename(oldname, newname string) error {
	o, n := clean(oldname), clean(newname)
	if !y.isFile(o) {
		if o != "" && y.isDir(o) {
			return &os.LinkError{Op: "rename", Old: oldname, New: newname,
				Err: fmt.Errorf("pebblefs: renaming a directory: %w", vfs.ErrUnsupported)}
		}
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: fs.ErrNotExist}
	}
	if err := y.checkPlace("rename", n); err != nil {
		return err
	}
	return y.e.Rename(o, n)
}

// ReuseForWrite implements vfs.FS: it renames oldname (a used WAL) to
// newname and opens it for writing from offset 0 without truncating it.
func (y *FS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := y.Rename(oldname, newname); err != nil {
		return nil, err
	}
	n := clean(newname)
	h, err := y.e.Open(n)
	if err != nil {
		return nil, err
	}
	return y.newWriter(h, n, category)
}

// MkdirAll implements vfs.FS.
func (y *FS) MkdirAll(dir string, perm os.FileMode) error {
	n := clean(dir)
	if n == "" {
		return nil
	}
	parts := strings.Split(n, "/")
	for i := range parts {
		d := strings.Join(parts[:i+1], "/")
		if y.isDir(d) {
			continue
		}
		if y.isFile(d) {
			return pathErr("mkdir", d, syscall.ENOTDIR)
		}
		h, err := y.e.OpenFile(dirMarker(d), engine.OCreate)
		if err != nil {
			return err
		}
		_ = h.Close()
	}
	return nil
}

// lockKey names a lock: locks are per engine, so that every FS on one
// engine sees them.
type lockKey struct {
	e    *engine.Engine
	name string
}

var locks sync.Map // lockKey → struct{}

// Lock implements vfs.FS: it creates (or truncates) name and holds an
// exclusive lock on it in this process until the Closer is closed.
func (y *FS) Lock(name string) (io.Closer, error) {
	key := lockKey{y.e, clean(name)}
	if _, held := locks.LoadOrStore(key, struct{}{}); held {
		return nil, pathErr("lock", name, syscall.EAGAIN)
	}
	n := key.name
	if err := y.checkPlace("lock", n); err != nil {
		locks.Delete(key)
		return nil, err
	}
	h, err := y.e.OpenFile(n, engine.OCreate|engine.OTrunc)
	if err != nil {
		locks.Delete(key)
		return nil, err
	}
	_ = h.Close()
	return &fileLock{key: key}, nil
}

type fileLock struct {
	once sync.Once
	key  lockKey
}

func (l *fileLock) Close() error {
	l.once.Do(func() { locks.Delete(l.key) })
	return nil
}

// List implements vfs.FS: the names directly in dir.
func (y *FS) List(dir string) ([]string, error) {
	n := clean(dir)
	if !y.isDir(n) {
		if y.isFile(n) {
			return nil, pathErr("readdir", dir, syscall.ENOTDIR)
		}
		return nil, pathErr("open", dir, fs.ErrNotExist)
	}
	prefix := ""
	if n != "" {
		prefix = dirMarker(n)
	}
	seen := map[string]bool{}
	out := []string{}
	for _, c := range y.children(n) {
		rest := c[len(prefix):]
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			rest = rest[:i] // a subdirectory, or something in one
		}
		if !seen[rest] {
			seen[rest] = true
			out = append(out, rest)
		}
	}
	return out, nil
}

// Stat implements vfs.FS.
func (y *FS) Stat(name string) (vfs.FileInfo, error) {
	n := clean(name)
	if y.isDir(n) {
		return dirInfo(n), nil
	}
	fi, err := y.e.Stat(n)
	if err != nil {
		return nil, err
	}
	return fileInfo{name: path.Base(n), size: fi.Size}, nil
}

// PathBase implements vfs.FS.
func (y *FS) PathBase(p string) string { return path.Base(p) }

// PathJoin implements vfs.FS.
func (y *FS) PathJoin(elem ...string) string { return path.Join(elem...) }

// PathDir implements vfs.FS.
func (y *FS) PathDir(p string) string { return path.Dir(p) }

// GetDiskUsage implements vfs.FS: the data zones' capacity, the bytes
// files map (used), and what a table may still take (available, once GC
// reclaims it: engine.Engine.Available).
func (y *FS) GetDiskUsage(string) (vfs.DiskUsage, error) {
	var total, used uint64
	for _, z := range y.e.ZoneValidity() {
		total += uint64(z.Cap)
		used += uint64(z.Valid)
	}
	// Not total - used: GC's reserve zones and the room kept for the
	// WAL and MANIFEST (ReserveFor) are no table's, and a device that
	// refused a 32 KiB table said 15-21% was available
	// (TestH17DDiskUsageAvailWhenFull). Pebble sizes compactions by it.
	return vfs.DiskUsage{TotalBytes: total, UsedBytes: used, AvailBytes: uint64(y.e.Available())}, nil
}

// Unwrap implements vfs.FS: FS wraps no other vfs.FS.
func (y *FS) Unwrap() vfs.FS { return nil }

// manifestReserve is what ReserveFor keeps for the MANIFEST and OPTIONS
// files: a new MANIFEST's snapshot (Pebble opening, or rotating it) of
// some ten thousand tables, the version edits written meanwhile, and an
// OPTIONS file.
const manifestReserve = 1 << 20

// ReserveFor keeps the device space that Pebble with options o cannot
// fail to write (engine.Engine.SetReserved) for its WAL, MANIFEST and
// OPTIONS files, and returns how much: its tables then meet ENOSPC on a
// full device first. Pebble retries a flush or compaction whose table
// write failed (its writes stall meanwhile) but treats a failed WAL
// write as fatal (the commit pipeline's Fatalf; rotateWAL panics with
// its mutex held, which ends the process with a fatal error no recover
// catches), and so a failed MANIFEST write (Fatalf), while the OPTIONS
// file written as Pebble opens would keep it from opening on a full
// device. The WALs' live bytes are bounded by the memtables they fill:
// writes stall once the queued memtables reach
// MemTableStopWritesThreshold memtables, and one more is the mutable
// one; so the reserve is that many memtables, and manifestReserve.
// Batches larger than half a memtable (which Pebble queues whole) are
// not covered, nor, past 1/reserveShare of the device's capacity, a
// reserve that large (it warns). Call it with the options Pebble is opened with; the
// engine keeps one reserve, the last set.
func (y *FS) ReserveFor(o *pebble.Options) int64 {
	n, want := ReserveSize(o, y.e.Capacity())
	if n < want {
		slog.Warn("pebblefs: Pebble's memtables are large for the device: the WAL's reserve is cut to 1/16 of the capacity, and a device Pebble fills may still fail a WAL write, which ends the process (a smaller MemTableSize or a larger device)",
			"memtable_size", o.MemTableSize, "memtable_stop_writes_threshold", o.MemTableStopWritesThreshold, "reserve_needed", want, "reserve", n, "capacity", y.e.Capacity())
	}
	y.e.SetReserved(n)
	return n
}

// ReserveSize is what ReserveFor keeps on a device of capacity bytes for
// Pebble with options o (n), and what it would keep without its cap of
// 1/reserveShare of the capacity (want). The reserve is kept whole from
// the other files, whatever the WAL holds at the time: a device sized for
// Pebble's files at their peak needs n beside them.
func ReserveSize(o *pebble.Options, capacity int64) (n, want int64) {
	mem, stop := int64(o.MemTableSize), int64(o.MemTableStopWritesThreshold)
	if mem <= 0 {
		mem = 4 << 20 // Pebble's default
	}
	if stop <= 0 {
		stop = 2 // Pebble's default
	}
	want = (stop+1)*mem + manifestReserve
	return min(want, capacity/reserveShare), want
}

// reserveShare: ReserveFor keeps at most 1/reserveShare of the device's
// capacity. A tiny device cannot keep Pebble's three 1 MiB memtables of
// WAL and still take its tables: bench's TestLSMSmall (12 MiB outside
// GC's reserve, Pebble's files and dirty data peaking at 10.7 MiB) had
// table writes refused with 1/8 of it (1.75 MiB) reserved.
const reserveShare = 16

// usesReserve reports whether the file at name (cleaned), created in
// category c, may use what ReserveFor keeps: Pebble's WAL and MANIFEST,
// known by their category, and its OPTIONS file, by name (Pebble writes
// it as "unspecified"): Pebble writes OPTIONS as temporary.NNNNNN.dbtmp
// and renames it (its only temporary file), so that name counts too, or
// a cleanly closed DB did not open writable on a full device
// (TestH17DWritableOpenOnFullDeviceWritesOptions).
func usesReserve(name string, c vfs.DiskWriteCategory) bool {
	base := path.Base(name)
	return c == "pebble-wal" || c == "pebble-manifest" || strings.HasPrefix(base, "OPTIONS-") ||
		strings.HasPrefix(base, "temporary.") && strings.HasSuffix(base, ".dbtmp")
}
