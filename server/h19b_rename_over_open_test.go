package server

import (
	"context"
	"errors"
	"io"
	"testing"
)

// TestH19bRenameOverOpenFileKeepsItsHandles: a rename onto a name whose
// file another client holds open leaves that client's handle on the
// replaced file, unnamed, as POSIX does (docs/protocol.md, op 9): its
// reads are the old bytes, never the new file's, and its writes land in
// it, never in the file the name now holds. (The handle used to fail
// with ENOENT; h19b's sweep had found that undocumented, seed 3.)
func TestH19bRenameOverOpenFileKeepsItsHandles(t *testing.T) {
	ctx := context.Background()
	dm := newDaemon(t)
	reader, writer := dial(t, dm.socket), dial(t, dm.socket)
	h, _, err := reader.Open(ctx, "cfg", OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reader.WriteAt(ctx, h, []byte("old"), 0); err != nil {
		t.Fatal(err)
	}
	w, _, err := writer.Open(ctx, "cfg.new", OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := writer.WriteAt(ctx, w, []byte("new!"), 0); err != nil {
		t.Fatal(err)
	}
	if err := writer.Rename(ctx, "cfg.new", "cfg"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if n, err := reader.ReadAt(ctx, h, buf, 0); string(buf[:n]) != "old" || !errors.Is(err, io.EOF) && err != nil {
		t.Errorf("read of the replaced file's open handle: %q, %v; want \"old\"", buf[:n], err)
	}
	if _, err := reader.WriteAt(ctx, h, []byte("x"), 3); err != nil {
		t.Errorf("write to the replaced file's open handle: %v", err)
	}
	if n, err := reader.ReadAt(ctx, h, buf, 0); string(buf[:n]) != "oldx" {
		t.Errorf("the replaced file after its handle's write: %q, %v; want \"oldx\"", buf[:n], err)
	}
	// The renamed file's own handle goes on, and the name holds it.
	if _, err := writer.WriteAt(ctx, w, []byte("?"), 4); err != nil {
		t.Errorf("write to the renamed file's handle: %v", err)
	}
	r, _, err := reader.Open(ctx, "cfg", 0)
	if err != nil {
		t.Fatal(err)
	}
	buf = make([]byte, 8)
	if n, err := reader.ReadAt(ctx, r, buf, 0); string(buf[:n]) != "new!?" {
		t.Errorf("cfg after the rename: %q, %v; want \"new!?\"", buf[:n], err)
	}
}
