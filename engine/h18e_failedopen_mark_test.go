package engine

import (
	"errors"
	"io/fs"
	"testing"
)

// TestH18eFailedTruncatingOpenClearsRemoveUnusedMark: openHandle clears
// the mark RemoveUnused set (unlinkAtClose) as soon as it counts its
// handle, before its truncate (OTrunc) has succeeded; when the truncate
// fails, the open returns an error and no handle, yet the mark is gone:
// the last close of the handle that was open all along leaves the file
// for good. An open that failed took nothing over from the remover.
func TestH18eFailedTruncatingOpenClearsRemoveUnusedMark(t *testing.T) {
	e := formatOpen(t, emuDevice(t, 16, "1M", ""), smallConfig())
	defer e.Close()
	a := createSynced(t, e, "x", make([]byte, 64<<10))
	if err := e.RemoveUnused("x"); !errors.Is(err, ErrInUse) {
		t.Fatalf("RemoveUnused of an open file: %v, want ErrInUse", err)
	}
	emuOf(t, e).FailFlush(1) // the truncate's durable flush
	if h, err := e.OpenFile("x", OTrunc); err == nil {
		h.Close()
		t.Fatal("set-up: the truncating open succeeded")
	} else {
		t.Logf("open with OTrunc: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Stat("x"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("RemoveUnused answered ErrInUse, the only open that succeeded closed, the other open failed: stat %v, want gone", err)
	}
}
