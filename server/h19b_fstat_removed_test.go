package server

import (
	"context"
	"errors"
	"syscall"
	"testing"
)

// TestH19bRemovedFileStaysItsHandles: docs/protocol.md, op 8 (remove):
// as an unlink on a kernel file system, a removed file's open handles
// keep working until they close. The handle that wrote "hello" reads it
// back after the remove, fstat answers with its size, a write through
// it lands in it, and the name is gone for everyone else. (The handles
// used to fail with ENOENT, and fstat, which did not, was found by
// TestH19bDifferentialSweep.)
func TestH19bRemovedFileStaysItsHandles(t *testing.T) {
	ctx := context.Background()
	dm := newDaemon(t)
	c, other := dial(t, dm.socket), dial(t, dm.socket)
	h, _, err := c.Open(ctx, "f", OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteAt(ctx, h, []byte("hello"), 0); err != nil {
		t.Fatal(err)
	}
	if err := other.Remove(ctx, "f"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if n, err := c.ReadAt(ctx, h, buf, 0); err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("read after another client's remove: %q, %v; want \"hello\"", buf[:n], err)
	}
	if _, err := c.WriteAt(ctx, h, []byte(", world"), 5); err != nil {
		t.Fatalf("write after the remove: %v", err)
	}
	if err := c.Fsync(ctx, h); err != nil {
		t.Fatalf("fsync after the remove: %v", err)
	}
	c.mu.Lock()
	r, err := c.call(ctx, Request{Op: OpFstat, Handle: h})
	c.mu.Unlock()
	if err != nil || r.Val != 12 {
		t.Errorf("fstat of the removed file's handle: size %d, %v; want 12", r.Val, err)
	}
	if _, err := other.Stat(ctx, "f"); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("stat of the removed name: %v, want ENOENT", err)
	}
	if err := c.CloseFile(ctx, h); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stat(ctx, "f"); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("stat after the last close: %v, want ENOENT", err)
	}
}
