package server

import (
	"context"
	"errors"
	"syscall"
	"testing"
)

// TestH19bFstatOfRemovedFileAnswersENOENT: docs/protocol.md, op 8
// (remove): "Open handles to the file fail with ENOENT from then on", and
// ENOENT's row: "a handle's file was removed". Read, write, truncate and
// fsync do; fstat (op 11) answers OK with the removed file's size and
// id, so a client that checks a handle with fstat is told its file is
// there. (POSIX fstat of an unlinked file succeeds too, with nlink 0: so
// either the doc or fstat is off.) Cause: engine/files.go File.Stat
// returns h.f.info() without File.check (which refuses a gone file for
// ReadAt/WriteAt/Truncate/Sync); server/exec.go's OpFstat case uses it.
// The size it reports is the removed file's, though dropFile already
// dropped its extents. Found by TestH19bDifferentialSweep.
func TestH19bFstatOfRemovedFileAnswersENOENT(t *testing.T) {
	ctx := context.Background()
	dm := newDaemon(t)
	c := dial(t, dm.socket)
	h, _, err := c.Open(ctx, "f", OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	c.WriteAt(ctx, h, []byte("hello"), 0)
	if err := c.Remove(ctx, "f"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadAt(ctx, h, make([]byte, 5), 0); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("read after remove: %v, want ENOENT as documented", err)
	}
	c.mu.Lock()
	r, err := c.call(ctx, Request{Op: OpFstat, Handle: h})
	c.mu.Unlock()
	if !errors.Is(err, syscall.ENOENT) {
		t.Errorf("fstat of a removed file's handle: %v (size %d, id %d), want ENOENT: the doc says a removed file's open handles fail with ENOENT", err, r.Val, r.Val2)
	}
}
