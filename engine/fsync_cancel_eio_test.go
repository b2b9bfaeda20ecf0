package engine

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"testing"
)

// TestCanceledFsyncLeavesTheWritebackErrorForTheNext: a write whose
// writeback failed (seen by a sync of everything, which leaves it for
// the file) is reported by the file's next fsync even if an fsync in
// between was canceled (the daemon cancels a request whose client went
// away or asked it to). A canceled fsync returns its context's error, so
// it must not also take the file's unreported EIO: then nobody reports
// it, and an application that retries its fsync gets success for a
// write the device refused.
func TestCanceledFsyncLeavesTheWritebackErrorForTheNext(t *testing.T) {
	devName := emuDevice(t, 24, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	defer e.Close()
	f := mustCreate(t, e, "a")
	if _, err := f.WriteAt(bytes.Repeat([]byte("cancel "), 40000), 0); err != nil {
		t.Fatal(err)
	}
	emuOf(t, e).FailWrite(1)
	if err := e.Sync(context.Background()); !errors.Is(err, syscall.EIO) {
		t.Fatalf("sync of everything over a failed append: %v, want EIO", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := f.SyncContext(ctx)
	if err == nil {
		t.Fatal("an fsync with a canceled context returned nil")
	}
	if errors.Is(err, syscall.EIO) {
		// Reporting the EIO is as good as leaving it.
		return
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled fsync: %v, want the cancellation or EIO", err)
	}
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("the fsync after a canceled one: %v, want the writeback's EIO nobody reported", err)
	}
}
