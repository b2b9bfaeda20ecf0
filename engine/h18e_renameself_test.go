package engine

import (
	"errors"
	"testing"
)

// TestH18eRenameOntoItselfAfterRemoveUnusedKeepsTheFile: d6d1cbd made a
// rename after RemoveUnused marked a file keep it ("the renamer's now, as
// an open's"). Rename onto its own name returns before appendOp's apply,
// where the mark is cleared (files.go Rename: oldName == newName), so a
// rename that succeeded, and is durable, still has the last close remove
// the file it renamed.
func TestH18eRenameOntoItselfAfterRemoveUnusedKeepsTheFile(t *testing.T) {
	e := formatOpen(t, emuDevice(t, 16, "1M", ""), smallConfig())
	defer e.Close()
	a := mustCreate(t, e, "x")
	if err := e.RemoveUnused("x"); !errors.Is(err, ErrInUse) {
		t.Fatalf("RemoveUnused of an open file: %v, want ErrInUse", err)
	}
	if err := e.Rename("x", "x"); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Stat("x"); err != nil {
		t.Fatalf("renamed (onto its own name) after RemoveUnused, as a rename to another name keeps it: stat after the last close %v, want kept", err)
	}
}
