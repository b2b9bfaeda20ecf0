package cli

import (
	"path/filepath"
	"testing"
)

// TestCopyDirMadeSyncsItsParent: a DIR fsck --copy-to creates has its
// entry in its parent directory synced, or a crash after the copy
// reported success could lose DIR with every synced file in it. A DIR
// that exists already is not fsck's to sync.
func TestCopyDirMadeSyncsItsParent(t *testing.T) {
	var synced []string
	old := syncParentDir
	syncParentDir = func(dir string) error {
		synced = append(synced, dir)
		return old(dir)
	}
	t.Cleanup(func() { syncParentDir = old })

	parent := t.TempDir()
	dir := filepath.Join(parent, "out")
	root, made, err := copyDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	root.Close()
	if !made {
		t.Fatalf("copyDir(%s) did not say it made the directory", dir)
	}
	if len(synced) != 1 || synced[0] != dir {
		t.Fatalf("copyDir made %s and synced the parents of %q, want of [%s]", dir, synced, dir)
	}

	synced = nil
	root, made, err = copyDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	root.Close()
	if made || len(synced) != 0 {
		t.Fatalf("copyDir of the existing %s: made %v, synced the parents of %q; want neither", dir, made, synced)
	}
}
