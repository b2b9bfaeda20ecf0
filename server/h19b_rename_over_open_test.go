package server

import (
	"context"
	"testing"
)

// TestH19bRenameOverOpenFileFailsItsHandles: a rename onto a name whose
// file another client holds open leaves that client's handle failing
// every read, write, truncate and fsync with ENOENT. On POSIX (ext4,
// tmpfs) the replaced file lives on, unnamed, for its open descriptors:
// they read the old bytes and write to it until they close.
// docs/protocol.md documents ENOENT for the handles of a *removed* file
// (op 8) but says of rename (op 9) only "Replaces the new name if it
// exists": nothing says the replaced file's handles break, and a client
// reading a file that a writer atomically replaces (zonefold put's
// temporary-and-rename, a config reloader) gets ENOENT mid-read instead
// of the old version. Cause: engine/files.go Engine.Rename drops the
// replaced file (dropFile sets gone, so File.check answers ENOENT) by
// design, per dropFile's comment, but the protocol doc never says so.
// Found by TestH19bDifferentialSweep (seed 3).
func TestH19bRenameOverOpenFileFailsItsHandles(t *testing.T) {
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
	writer.WriteAt(ctx, w, []byte("new!"), 0)
	writer.CloseFile(ctx, w)
	if err := writer.Rename(ctx, "cfg.new", "cfg"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 3)
	if n, err := reader.ReadAt(ctx, h, buf, 0); err != nil || string(buf[:n]) != "old" {
		t.Errorf("read of the replaced file's open handle: %q, %v; POSIX reads \"old\" (docs/protocol.md documents ENOENT only after remove)", buf[:n], err)
	}
	if _, err := reader.WriteAt(ctx, h, []byte("x"), 3); err != nil {
		t.Errorf("write to the replaced file's open handle: %v; POSIX writes to the unnamed file", err)
	}
}
