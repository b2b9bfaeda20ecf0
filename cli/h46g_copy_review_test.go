package cli

import (
	"bytes"
	"testing"
)

// TestH46gFlatClashNotesNoFileAsDirectory: copyDirs is the directories
// the copy syncs once its files are. h46a's mkdirs takes a part of a
// name that exists for a directory (EEXIST) even where it is a file the
// copy made (zonefold names are flat: "a" and "a/b" both files), and
// the name was noted before its create failed (ENOTDIR, NOT COPIED):
// "a", a file synced as it was closed, was noted a directory and
// synced again with the directories. Only the directories a created
// file lives in are noted.
func TestH46gFlatClashNotesNoFileAsDirectory(t *testing.T) {
	_, devName, e := copyToDevice(t)
	for _, name := range []string{"a", "a/b", "c/d/e", "c/d/e/f"} {
		copyToWrite(t, e, name, []byte("data of "+name))
	}
	dev, root, dirs, dir := copyToOpen(t, e, devName)
	var out bytes.Buffer
	if err := salvageInto(&out, devName, dev, createIn(root, dirs), finishCopy(root, dirs), dir, false); err == nil {
		t.Fatalf("a copy of the flat names a, a/b, c/d/e, c/d/e/f: no error, want a/b and c/d/e/f NOT COPIED\n%s", out.String())
	}
	copyToCheck(t, dir, map[string][]byte{"a": []byte("data of a"), "c/d/e": []byte("data of c/d/e")})
	for _, d := range dirs.order() {
		if fi, err := root.Lstat(d); err != nil {
			t.Errorf("the copy notes %q as a directory to sync: %v", d, err)
		} else if !fi.IsDir() {
			t.Errorf("the copy notes %q as a directory to sync: it is a %v", d, fi.Mode())
		}
	}
}
