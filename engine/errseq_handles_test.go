package engine

// Linux's errseq reports a writeback error once to every file
// descriptor open when it happened, not once per file (review rev53).

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"testing"
)

// TestEachOpenHandleSeesWritebackErrorOnce: two handles of one file
// are open when its writeback fails (background writeback). On Linux
// each one's next fsync reports EIO (file_check_and_advance_wb_err:
// every struct file samples the mapping's errseq at open). Before the
// fix the first handle's fsync took the file's error and the second's
// returned nil.
func TestEachOpenHandleSeesWritebackErrorOnce(t *testing.T) {
	devName := emuDevice(t, 24, "1M", "")
	e := formatOpen(t, devName, smallConfig())
	defer e.Close()
	h1 := mustCreate(t, e, "a")
	h2, err := e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h1.WriteAt(bytes.Repeat([]byte("errseq "), 40000), 0); err != nil {
		t.Fatal(err)
	}
	emuOf(t, e).FailWrite(1)
	if err := e.wb.SyncAll(context.Background()); err == nil { // background writeback
		t.Fatal("writeback did not fail")
	}
	if err := h1.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("first handle's fsync: %v, want EIO", err)
	}
	if err := h2.Sync(); !errors.Is(err, syscall.EIO) {
		t.Errorf("second handle's fsync (open before the failure): %v, want EIO once, as Linux's errseq", err)
	}
	// Once per handle: each has seen it, and a handle opened after it
	// was seen does not.
	for i, h := range []*File{h1, h2} {
		if err := h.Sync(); err != nil {
			t.Errorf("handle %d's second fsync: %v, want nil (reported once)", i+1, err)
		}
	}
	h3, err := e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	if err := h3.Sync(); err != nil {
		t.Errorf("fsync of a handle opened after the error was reported: %v, want nil", err)
	}
}
