package pebblefs

import (
	"bytes"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestH16BSequentialHandleSeesLaterWrites: a handle opened with
// vfs.SequentialReadsOption must read what the file holds, as any
// vfs.File does (a kernel file system's readahead lives in the page
// cache, which writes update). The handle's private readahead window
// keeps serving the bytes it read before an overwrite, and bytes past
// a shrink.
func TestH16BSequentialHandleSeesLaterWrites(t *testing.T) {
	dev := emuDevice(t, 16, "4M")
	e := formatOpen(t, dev, 0, testConfig())
	defer e.Close()
	y := New(e)

	w, err := y.Create("f", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	old := bytes.Repeat([]byte{'o'}, 64<<10)
	if _, err := w.Write(old); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}

	r, err := y.Open("f", vfs.SequentialReadsOption)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := make([]byte, 4096)
	if _, err := r.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}

	// Overwrite the first block through the writer, then read it again.
	neu := bytes.Repeat([]byte{'N'}, 4096)
	if _, err := w.WriteAt(neu, 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, neu) {
		t.Errorf("sequential handle read %q... at 0 after a synced overwrite with %q...: stale readahead window", got[:8], neu[:8])
	}
	w.Close()
}
