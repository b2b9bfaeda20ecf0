package bench

import (
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// syncCountingFS counts the syncs Pebble asks of a file system's files
// and directories, the same way on both sides: what a comparison of
// ops/s per sync needs (on pebblefs each is a device flush unless a
// concurrent one served it; on a kernel file system an fdatasync or
// fsync).
type syncCountingFS struct {
	vfs.FS
	syncs atomic.Int64
}

func (c *syncCountingFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return f, err
	}
	return &syncCountingFile{File: f, syncs: &c.syncs}, nil
}

func (c *syncCountingFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	return c.wrap(c.FS.Create(name, cat))
}

func (c *syncCountingFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	return c.wrap(c.FS.Open(name, opts...))
}

func (c *syncCountingFS) OpenReadWrite(name string, cat vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return c.wrap(c.FS.OpenReadWrite(name, cat, opts...))
}

func (c *syncCountingFS) OpenDir(name string) (vfs.File, error) {
	return c.wrap(c.FS.OpenDir(name))
}

func (c *syncCountingFS) ReuseForWrite(oldname, newname string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	return c.wrap(c.FS.ReuseForWrite(oldname, newname, cat))
}

// syncCountingFile counts a file's Sync, SyncData and SyncTo calls.
type syncCountingFile struct {
	vfs.File
	syncs *atomic.Int64
}

func (f *syncCountingFile) Sync() error {
	f.syncs.Add(1)
	return f.File.Sync()
}

func (f *syncCountingFile) SyncData() error {
	f.syncs.Add(1)
	return f.File.SyncData()
}

func (f *syncCountingFile) SyncTo(length int64) (bool, error) {
	f.syncs.Add(1)
	return f.File.SyncTo(length)
}

// Unwrap is the file system counted.
func (c *syncCountingFS) Unwrap() vfs.FS { return c.FS }
