package cli

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// TestCopyDirsSyncsEveryParentDeepestFirst: fsck --copy-to syncs the
// directory of every file it copies, each parent up to DIR, deepest
// first and DIR last, so that a copy whose files were synced does not
// lose their entries in a crash.
func TestCopyDirsSyncsEveryParentDeepestFirst(t *testing.T) {
	d := copyDirs{}
	for _, name := range []string{"a/b/c", "a/x", "y", "q/r", "a/b/d"} {
		d.add(name)
	}
	want := []string{"a/b", "a", "q", "."}
	if got := d.order(); !slices.Equal(got, want) {
		t.Errorf("directories synced: %q, want %q", got, want)
	}

	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	create := createIn(root, copyDirs{})
	w, err := create("m/n/o", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.(io.Closer).Close(); err != nil {
		t.Fatal(err)
	}
	// Every directory in the order must exist below root to be synced.
	if err := d.sync(root); err == nil {
		t.Error("sync of directories the copy never made succeeded")
	}
	made := copyDirs{}
	made.add("m/n/o")
	if err := made.sync(root); err != nil {
		t.Errorf("sync of the copy's directories: %v", err)
	}
}

// TestCopyToADeviceThatCannotOpenLeavesNoDirectory: fsck --copy-to made
// DIR before it opened the device, and a device it could not open (a
// typo, an unformatted file) left an empty DIR behind, which the next
// try then had to be given again or removed. A DIR that was there before
// stays.
func TestCopyToADeviceThatCannotOpenLeavesNoDirectory(t *testing.T) {
	tmp := t.TempDir()
	missing := "emu:" + filepath.Join(tmp, "no-such-device")
	dir := filepath.Join(tmp, "copy")
	if code, out := copyToRun("fsck", missing, "--copy-to", dir); code == 0 {
		t.Fatalf("fsck --copy-to of a missing device exited 0:\n%s", out)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after a device that did not open, %s: %v (want it gone)", dir, err)
	}

	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if code, out := copyToRun("fsck", missing, "--copy-to", dir); code == 0 {
		t.Fatalf("fsck --copy-to of a missing device exited 0:\n%s", out)
	}
	if _, err := os.Lstat(dir); err != nil {
		t.Errorf("a directory the user made was removed: %v", err)
	}
}

// fullWriter is a copy's file on a file system that has run out of
// room: every write fails with ENOSPC. (A fake: filling a real file
// system here would take a mount the tests cannot make.)
type fullWriter struct{}

func (fullWriter) WriteAt([]byte, int64) (int, error) { return 0, syscall.ENOSPC }

// TestCopyToThatStopsReportsWhatItCopied: a copy whose destination
// filled up returned the write error alone: no report, no summary, so
// the user could not tell which files in DIR were whole. Now what was
// copied before the file that stopped it is synced and reported, and
// the error names that file.
func TestCopyToThatStopsReportsWhatItCopied(t *testing.T) {
	_, devName, e := copyToDevice(t)
	for _, name := range []string{"a", "b", "c"} {
		copyToWrite(t, e, name, bytes.Repeat([]byte(name), 3*4096+100))
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	dev, err := zns.Open(devName, zns.Options{Existing: true})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	var copiedA bytes.Buffer
	create := func(name string, size int64) (io.WriterAt, error) {
		if name == "a" {
			return &bufferAt{&copiedA}, nil
		}
		return fullWriter{}, nil
	}
	synced := false
	var out bytes.Buffer
	err = salvageInto(&out, devName, dev, create, func(string) error { synced = true; return nil }, "DIR", false)
	if err == nil || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), `"b"`) || !strings.Contains(err.Error(), "stopped after 1 file") {
		t.Errorf("a copy whose destination is full: error %v, want ENOSPC naming file \"b\" after 1 file", err)
	}
	if !synced {
		t.Error("what was copied before the copy stopped was not synced")
	}
	if !strings.Contains(out.String(), "copied 1 file") {
		t.Errorf("report of a copy that stopped:\n%s\nwant a summary of the one file copied", out.String())
	}
	if got := copiedA.Len(); got != 3*4096+100 {
		t.Errorf("file a copied %d bytes, want %d", got, 3*4096+100)
	}
}

// bufferAt writes at offsets into a buffer.
type bufferAt struct{ b *bytes.Buffer }

func (w *bufferAt) WriteAt(p []byte, off int64) (int, error) {
	if need := int(off) + len(p); need > w.b.Len() {
		w.b.Write(make([]byte, need-w.b.Len()))
	}
	copy(w.b.Bytes()[off:], p)
	return len(p), nil
}
