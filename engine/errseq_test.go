package engine

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"testing"
)

// TestFileSyncReportsAnErrorASyncOfAllSaw: a write that fails at
// writeback is reported by the file's next fsync even when a sync of
// everything (Engine.Sync: the daemon's fsync of handle 0, or another
// writer making room) saw the failure first, as Linux reports a
// writeback error to both syncfs and each open file's fsync. Once the
// file's fsync has reported it, the next one rewrites the data (it
// stayed dirty) and succeeds, and the data survives a power cut.
func TestFileSyncReportsAnErrorASyncOfAllSaw(t *testing.T) {
	devName := emuDevice(t, 24, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	f := mustCreate(t, e, "a")
	want := bytes.Repeat([]byte("errseq "), 40000)
	if _, err := f.WriteAt(want, 0); err != nil {
		t.Fatal(err)
	}
	emuOf(t, e).FailWrite(1)
	if err := e.Sync(context.Background()); !errors.Is(err, syscall.EIO) {
		t.Fatalf("sync of everything over a failed append: %v, want EIO", err)
	}
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("the file's fsync after a failed writeback of it: %v, want EIO", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync after the error was reported: %v", err)
	}
	e = powerCutReopen(t, e, devName, cfg)
	defer e.Close()
	if got := readAll(t, e, "a"); !bytes.Equal(got, want) {
		t.Fatalf("after a power cut: %d bytes, want the %d synced", len(got), len(want))
	}
}
