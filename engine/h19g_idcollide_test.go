package engine

import (
	"slices"
	"testing"
)

// A logged create (checksum valid) that reuses the id of a live file
// under another name: replayOp replaces byID[id] but leaves the old
// file's name in byName, so Open lists both "a" and "b" (fsck, which
// walks byID, counts one file; after Open's checkpoint it calls the
// device clean). The next checkpoint (snapshot walks byID) drops "a":
// after a clean Close and Open with no operation in between, "a" and its
// 64 KiB are gone. Bad input must get an error and lose nothing. Cause:
// recover.go replayOp (opCreate) and loadCheckpoint do not check id
// collisions; fsck.go Fsck walks only byID.
func TestH19gCreateReusingLiveIDDropsFileSilently(t *testing.T) {
	devName, e, _ := h19gBase(t)
	id := e.byName["a"].id
	if err := e.logOp(nsOp{kind: opCreate, file: id, name: "b"}); err != nil {
		t.Fatal(err)
	}
	e.crashForTest()
	rep, ferr := h19gFsck(t, devName)
	fsckFlags := ferr != nil || len(rep.Problems) > 0
	if ferr == nil {
		t.Logf("fsck before Open: %d files, problems %q", rep.Files, rep.Problems)
	}
	e2, err := h19gOpen(t, devName)
	if err != nil {
		return // refused with an error: fine
	}
	names := func(e *Engine) []string {
		var n []string
		for _, fi := range e.List() {
			n = append(n, fi.Name)
		}
		slices.Sort(n)
		return n
	}
	before := names(e2)
	if err := e2.Close(); err != nil {
		t.Fatal(err)
	}
	e3, err := h19gOpen(t, devName)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer e3.Close()
	after := names(e3)
	if !slices.Equal(before, after) {
		t.Errorf("a clean Close and Open changed the namespace: %v, then %v (fsck reported problems: %v)", before, after, fsckFlags)
	}
	if !fsckFlags {
		t.Errorf("fsck calls the device clean, but Open lists %v with two names on one file id", before)
	}
}
