package cli

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
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
