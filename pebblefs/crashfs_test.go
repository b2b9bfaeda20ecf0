package pebblefs

import (
	"fmt"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// crashFS is the crash child's file system: FS, with every error of a
// call that changes the device written to the child's log, so that a
// child that dies of an engine error (Pebble panics on some, such as a
// WAL's failed Close in rotateWAL, and the panic hides the error) leaves
// the error itself for the parent to report. An error once the device
// is frozen for a power cut is the cut's doing: a process that loses
// power never sees it, so the call blocks until the cut kills the
// process instead of returning it (Pebble would panic on it and end the
// child before the SIGKILL, and the parent would fail the life).
type crashFS struct {
	vfs.FS
	d *cutDevice
}

// check logs err, if any, and blocks for good if the power is being cut.
func (c crashFS) check(op, name string, err error) error {
	if err == nil {
		return nil
	}
	if c.d.frozen.Load() {
		select {} // power is being cut
	}
	fmt.Fprintf(c.d.log, "IOERR %s %s: %v\n", op, name, err)
	return err
}

func (c crashFS) file(op, name string, f vfs.File, err error) (vfs.File, error) {
	if err := c.check(op, name, err); err != nil {
		return nil, err
	}
	return crashFile{File: f, fs: c, name: name}, nil
}

func (c crashFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := c.FS.Create(name, category)
	return c.file("create", name, f, err)
}

func (c crashFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := c.FS.Open(name, opts...)
	if err != nil {
		return nil, err // not found is no engine error; reads change nothing
	}
	return crashFile{File: f, fs: c, name: name}, nil
}

func (c crashFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := c.FS.OpenReadWrite(name, category, opts...)
	return c.file("open-rw", name, f, err)
}

func (c crashFS) OpenDir(name string) (vfs.File, error) {
	f, err := c.FS.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return crashFile{File: f, fs: c, name: name}, nil
}

func (c crashFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := c.FS.ReuseForWrite(oldname, newname, category)
	return c.file("reuse", oldname+" -> "+newname, f, err)
}

func (c crashFS) Remove(name string) error {
	return c.check("remove", name, c.FS.Remove(name))
}

func (c crashFS) RemoveAll(name string) error {
	return c.check("remove-all", name, c.FS.RemoveAll(name))
}

func (c crashFS) Rename(oldname, newname string) error {
	return c.check("rename", oldname+" -> "+newname, c.FS.Rename(oldname, newname))
}

func (c crashFS) MkdirAll(dir string, perm os.FileMode) error {
	return c.check("mkdir", dir, c.FS.MkdirAll(dir, perm))
}

func (c crashFS) Unwrap() vfs.FS { return c.FS }

// crashFile checks the errors of a file's calls that change the device.
type crashFile struct {
	vfs.File
	fs   crashFS
	name string
}

func (f crashFile) Close() error { return f.fs.check("close", f.name, f.File.Close()) }

func (f crashFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	return n, f.fs.check("write", f.name, err)
}

func (f crashFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(p, off)
	return n, f.fs.check("write", f.name, err)
}

func (f crashFile) Sync() error     { return f.fs.check("sync", f.name, f.File.Sync()) }
func (f crashFile) SyncData() error { return f.fs.check("sync", f.name, f.File.SyncData()) }

func (f crashFile) SyncTo(length int64) (bool, error) {
	full, err := f.File.SyncTo(length)
	return full, f.fs.check("sync", f.name, err)
}
