package engine

import (
	"errors"
	"io/fs"
	"testing"
)

// TestRemoveUnusedRemovesAtLastClose: RemoveUnused of a file another
// handle has open answers ErrInUse and removes the file when the last
// handle closes, as an unlink on a kernel file system frees the file at
// its last close (fio's unlink=1 while another client read the file left
// it on the device for good: TestH18bFioUnlinkWhileAnotherClientHoldsTheFile).
// A handle opened, or a rename, after the removal was asked keeps the
// file: it is the opener's or the renamer's (on a kernel file system, a
// new file of that name, or a rename that finds no file).
func TestRemoveUnusedRemovesAtLastClose(t *testing.T) {
	for _, tc := range []struct {
		name     string
		reopen   bool // a handle opened after the removal, closed last
		rename   bool // renamed to y after the removal
		wantGone bool
	}{
		{"last close removes", false, false, true},
		{"an open after it keeps the file", true, false, false},
		{"a rename after it keeps the file", false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := formatOpen(t, emuDevice(t, 16, "1M", ""), smallConfig())
			defer e.Close()
			a := mustCreate(t, e, "x")
			b, err := e.Open("x")
			if err != nil {
				t.Fatal(err)
			}
			if err := e.RemoveUnused("x"); !errors.Is(err, ErrInUse) {
				t.Fatalf("RemoveUnused of an open file: %v, want ErrInUse", err)
			}
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := e.Stat("x"); err != nil {
				t.Fatalf("removed while a handle still had it open: %v", err)
			}
			name := "x"
			if tc.rename {
				if err := e.Rename("x", "y"); err != nil {
					t.Fatal(err)
				}
				name = "y"
			}
			var c *File
			if tc.reopen {
				if c, err = e.Open("x"); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if c != nil {
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
			}
			_, err = e.Stat(name)
			if gone := errors.Is(err, fs.ErrNotExist); gone != tc.wantGone {
				t.Fatalf("after the last close: stat %v, want gone %v", err, tc.wantGone)
			}
		})
	}
}
