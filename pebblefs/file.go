package pebblefs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/zonefold/zonefold/engine"
)

// file is an open engine file. Read and Write share one offset, as on
// os.File; ReadAt and WriteAt do not move it.
type file struct {
	y           *FS
	h           *engine.File
	name        string // cleaned path
	read, write bool

	mu  sync.Mutex // guards pos; taken before ra.mu (Read)
	pos int64
	ra  *readahead // set on handles opened with vfs.SequentialReadsOption
}

// readaheadSize is a sequential handle's read window.
const readaheadSize = 512 << 10

// readahead serves a handle that reads a file from start to end. Pebble
// opens a table with vfs.SequentialReadsOption to read it whole (a
// compaction) and leaves the rest to the kernel's readahead; the engine
// has none, and a miss per 4 KiB block is a device round trip each, so
// the handle reads windows of readaheadSize into a buffer of its own
// (the engine batches a window's device reads under one plug).
type readahead struct {
	mu      sync.Mutex
	buf     []byte // the window; cap readaheadSize
	off     int64  // file offset of buf[0]
	changes uint64 // the file's engine.File.Changes before the window was read
}

var readaheadBufs = sync.Pool{New: func() any { b := make([]byte, readaheadSize); return &b }}

// readAt serves p from the window, refilling it at off when p is not in
// it or the file changed since it was read (a write or truncate through
// any handle: the kernel's readahead lives in the page cache, which
// writes update). Reads as large as the window bypass it.
func (ra *readahead) readAt(h *engine.File, p []byte, off int64) (int, error) {
	if len(p) >= readaheadSize {
		return h.ReadAt(p, off)
	}
	ra.mu.Lock()
	defer ra.mu.Unlock()
	changes := h.Changes()
	if off < ra.off || off+int64(len(p)) > ra.off+int64(len(ra.buf)) || changes != ra.changes {
		if ra.buf == nil {
			ra.buf = (*readaheadBufs.Get().(*[]byte))[:0]
		}
		ra.changes = changes
		n, err := h.ReadAt(ra.buf[:readaheadSize], off)
		if err != nil && err != io.EOF {
			ra.buf = ra.buf[:0]
			return 0, err
		}
		ra.buf, ra.off = ra.buf[:n], off
	}
	n := copy(p, ra.buf[off-ra.off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (ra *readahead) release() {
	ra.mu.Lock()
	defer ra.mu.Unlock()
	if ra.buf != nil {
		b := ra.buf[:0]
		readaheadBufs.Put(&b)
		ra.buf = nil
	}
}

var _ vfs.File = (*file)(nil)

func (y *FS) newFile(h *engine.File, name string, read, write bool, life engine.WriteLife) (*file, error) {
	if life != engine.LifeNotSet {
		if err := h.SetWriteLife(life); err != nil {
			_ = h.Close()
			return nil, err
		}
	}
	return &file{y: y, h: h, name: name, read: read, write: write}, nil
}

// newWriter is newFile for a file opened to write in category c: its
// write-life hint, and the reserve for the files Pebble cannot fail to
// write (see ReserveFor).
func (y *FS) newWriter(h *engine.File, name string, c vfs.DiskWriteCategory) (*file, error) {
	if usesReserve(name, c) {
		h.SetUseReserved(true)
	}
	return y.newFile(h, name, true, true, lifeOf(c))
}

func (f *file) Close() error {
	if f.ra != nil {
		f.ra.release()
	}
	return f.h.Close()
}

// Read reads at the handle's offset; on a sequential handle, from its
// readahead window as ReadAt does: vfs.Copy reads so (io.Copy's 32 KiB
// chunks), and pebblefs, having no Link, copies every ingested and
// checkpointed table with it.
func (f *file) Read(p []byte) (int, error) {
	if !f.read {
		return 0, pathErr("read", f.name, fs.ErrPermission)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var n int
	var err error
	if f.ra != nil {
		n, err = f.ra.readAt(f.h, p, f.pos)
	} else {
		n, err = f.h.ReadAt(p, f.pos)
	}
	f.pos += int64(n)
	if n > 0 && err == io.EOF {
		err = nil // the next Read says EOF
	}
	return n, err
}

func (f *file) ReadAt(p []byte, off int64) (int, error) {
	if !f.read {
		return 0, pathErr("read", f.name, fs.ErrPermission)
	}
	if f.ra != nil {
		return f.ra.readAt(f.h, p, off)
	}
	return f.h.ReadAt(p, off)
}

func (f *file) Write(p []byte) (int, error) {
	if !f.write {
		return 0, pathErr("write", f.name, fs.ErrPermission)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n, err := f.h.WriteAt(p, f.pos)
	f.pos += int64(n)
	return n, f.failed("write", err)
}

func (f *file) WriteAt(p []byte, off int64) (int, error) {
	if !f.write {
		return 0, pathErr("write", f.name, fs.ErrPermission)
	}
	n, err := f.h.WriteAt(p, off)
	return n, f.failed("write", err)
}

// Preallocate does nothing: zones are written by appends.
func (f *file) Preallocate(offset, length int64) error { return nil }

func (f *file) Stat() (vfs.FileInfo, error) {
	return fileInfo{name: path.Base(f.name), size: f.h.Size()}, nil
}

// Sync makes the file's data durable.
func (f *file) Sync() error { return f.failed("sync", f.h.Sync()) }

// SyncData is Sync: the engine keeps no metadata a data sync could skip.
func (f *file) SyncData() error { return f.Sync() }

// SyncTo syncs the whole file (the engine has no partial sync) and says
// so: fullSync is true.
func (f *file) SyncTo(length int64) (bool, error) {
	if err := f.Sync(); err != nil {
		return false, err
	}
	return true, nil
}

// failed reports a write or sync that failed, as a path error, and logs
// it: Pebble panics on some of them (a WAL it cannot close, in
// rotateWAL), and the panic, unwinding with Pebble's lock released,
// ends in a fatal "unlock of unlocked mutex" that hides the error.
func (f *file) failed(op string, err error) error {
	if err == nil {
		return nil
	}
	slog.Error("pebblefs: "+op+" failed", "path", f.name, "err", err)
	if errors.Is(err, syscall.ENOSPC) {
		if hook := f.y.noSpace.Load(); hook != nil {
			(*hook)(err)
		}
	}
	return pathErr(op, f.name, err)
}

// Prefetch does nothing: reads fill the engine's cache as they go.
func (f *file) Prefetch(offset, length int64) error { return nil }

// Fd is vfs.InvalidFd: there is no kernel file.
func (f *file) Fd() uintptr { return vfs.InvalidFd }

// dirFile is an open directory: Pebble opens directories only to sync
// them, which makes files created and removed durable.
type dirFile struct {
	y    *FS
	name string
}

var _ vfs.File = (*dirFile)(nil)

func (d *dirFile) Close() error { return nil }
func (d *dirFile) Read([]byte) (int, error) {
	return 0, pathErr("read", d.name, syscall.EISDIR)
}
func (d *dirFile) ReadAt([]byte, int64) (int, error) {
	return 0, pathErr("read", d.name, syscall.EISDIR)
}
func (d *dirFile) Write([]byte) (int, error) {
	return 0, pathErr("write", d.name, syscall.EISDIR)
}
func (d *dirFile) WriteAt([]byte, int64) (int, error) {
	return 0, pathErr("write", d.name, syscall.EISDIR)
}
func (d *dirFile) Preallocate(int64, int64) error { return nil }
func (d *dirFile) Stat() (vfs.FileInfo, error)    { return dirInfo(d.name), nil }

// Sync checks that the directory still exists and makes the creates and
// removes logged without a flush durable (a device flush, unless one
// since covered them).
func (d *dirFile) Sync() error {
	if !d.y.isDir(d.name) {
		return pathErr("sync", d.name, fs.ErrNotExist)
	}
	return d.y.e.SyncNamespace()
}
func (d *dirFile) SyncData() error             { return d.Sync() }
func (d *dirFile) SyncTo(int64) (bool, error)  { return false, nil }
func (d *dirFile) Prefetch(int64, int64) error { return nil }
func (d *dirFile) Fd() uintptr                 { return vfs.InvalidFd }
func (d *dirFile) String() string              { return fmt.Sprintf("dir %q", d.name) }
func (fi fileInfo) String() string             { return fmt.Sprintf("%s (%d bytes)", fi.name, fi.size) }
func dirInfo(name string) fileInfo             { return fileInfo{name: path.Base("/" + name), dir: true} }
func (fi fileInfo) DeviceID() vfs.DeviceID     { return vfs.DeviceID{} }
func (fi fileInfo) Name() string               { return fi.name }
func (fi fileInfo) Size() int64                { return fi.size }
func (fi fileInfo) IsDir() bool                { return fi.dir }
func (fi fileInfo) ModTime() time.Time         { return time.Time{} }
func (fi fileInfo) Sys() any                   { return nil }
func (fi fileInfo) Mode() os.FileMode {
	if fi.dir {
		return os.ModeDir | 0o755
	}
	return 0o644
}

// fileInfo describes a file or directory; the engine keeps no times.
type fileInfo struct {
	name string
	size int64
	dir  bool
}

// lifeOf is the write-life hint a file of a Pebble write category gets
// when it is created; EventListener refines tables' by level.
func lifeOf(c vfs.DiskWriteCategory) engine.WriteLife {
	switch c {
	case "pebble-wal":
		return engine.LifeShort
	case "pebble-manifest", "pebble-memtable-flush":
		return engine.LifeMedium
	case "pebble-compaction", "pebble-ingest", "pebble-blob-file-rewrite":
		return engine.LifeLong
	}
	return engine.LifeNotSet
}
