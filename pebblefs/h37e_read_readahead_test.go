package pebblefs

import (
	"bytes"
	"errors"
	"io"
	"syscall"
	"testing"

	"github.com/cockroachdb/errors/oserror"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestH37ESequentialReadUsesTheWindow: Read on a handle opened with
// vfs.SequentialReadsOption (vfs.Copy's, and so every ingest's and
// checkpoint's copy of a table: pebblefs has no Link) is served from
// the handle's readahead window, as ReadAt is: io.Copy's 32 KiB Reads
// of a window's worth of the file ask the engine for one window, the
// first of them, not for each chunk. Read at 0.55x ReadAt's rate on a cold 128 MiB file
// without it (TestReadVsReadAtCost). The engine's HostRead counts the
// bytes the handle asked it for.
func TestH37ESequentialReadUsesTheWindow(t *testing.T) {
	dev := emuDevice(t, 16, "4M")
	e := formatOpen(t, dev, 0, testConfig())
	defer e.Close()
	y := New(e)

	want := make([]byte, 2*readaheadSize+5000)
	for i := range want {
		want[i] = byte(i*7 + i>>12)
	}
	w, err := y.Create("f", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(want); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	w.Close()

	r, err := y.Open("f", vfs.SequentialReadsOption)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	const chunk = 32 << 10
	p := make([]byte, chunk)
	before := e.Stats().HostRead
	var got []byte
	for i := range readaheadSize / chunk {
		n, err := r.Read(p)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p[:n]...)
		if asked := e.Stats().HostRead - before; i == 0 && asked != readaheadSize {
			t.Errorf("the first Read of %d bytes asked the engine for %d; want the window, %d", chunk, asked, readaheadSize)
		}
	}
	if asked := e.Stats().HostRead - before; asked != readaheadSize || len(got) != readaheadSize {
		t.Errorf("%d Reads of %d bytes read %d bytes and asked the engine for %d in all; want one window of %d", readaheadSize/chunk, chunk, len(got), asked, readaheadSize)
	}

	// The rest reads as written, and the end as io.EOF (vfs.Copy's
	// io.Copy stops there).
	rest, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, rest...)
	if !bytes.Equal(got, want) {
		t.Errorf("read %d bytes through Read, not the %d written", len(got), len(want))
	}
	if n, err := r.Read(p); n != 0 || err != io.EOF {
		t.Errorf("Read at the end = %d, %v; want 0, EOF", n, err)
	}
}

// TestH37ESequentialReadSeesLaterWrites: Read through the window reads
// what the file holds, as TestH16BSequentialHandleSeesLaterWrites
// asks of ReadAt: an overwrite through another handle behind the window
// is seen by the next Read of it.
func TestH37ESequentialReadSeesLaterWrites(t *testing.T) {
	dev := emuDevice(t, 16, "4M")
	e := formatOpen(t, dev, 0, testConfig())
	defer e.Close()
	y := New(e)

	w, err := y.Create("f", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Write(bytes.Repeat([]byte{'o'}, 64<<10)); err != nil {
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
	if _, err := r.Read(got); err != nil {
		t.Fatal(err)
	}
	neu := bytes.Repeat([]byte{'N'}, 4096)
	if _, err := w.WriteAt(neu, 4096); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, neu) {
		t.Errorf("Read %q... at 4096 after a synced overwrite with %q...: stale window", got[:8], neu[:8])
	}
}

// TestH37ECheckpointUnderAFileFailsNotDir: Open and Stat of a path under
// a file say not-exist on pebblefs where the OS says ENOTDIR, and Pebble
// never tells the two apart (no ENOTDIR in it; MemFS returns neither):
// where it branches on not-exist (Checkpoint's check of destDir and of
// its parents), the MkdirAll that follows fails with ENOTDIR, as
// pebblefs's MkdirAll, Create and the rest that place a file do.
func TestH37ECheckpointUnderAFileFailsNotDir(t *testing.T) {
	dev := emuDevice(t, 32, "4M")
	e := formatOpen(t, dev, 0, testConfig())
	defer e.Close()
	y := New(e)
	db, err := pebble.Open("db", smallOptions(y))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Set([]byte("k"), []byte("v"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	f, err := y.Create("plain", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := y.Stat("plain/x"); !oserror.IsNotExist(err) {
		t.Errorf("Stat(plain/x) = %v; this test's premise is not-exist", err)
	}
	for _, dest := range []string{"plain/ckpt", "plain/a/ckpt"} {
		err := db.Checkpoint(dest)
		if !errors.Is(err, syscall.ENOTDIR) {
			t.Errorf("Checkpoint(%q) under a file = %v; want ENOTDIR", dest, err)
		}
	}
}
