package cli

import (
	"io"
	"os"
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
