package server

import (
	"context"
	"errors"
	"syscall"
	"testing"
)

// TestRenameOntoATemporaryNameIsRefused: the daemon removes every file
// named TempPrefix... when it starts. A rename onto such a name would
// turn a file a client keeps (written and fsynced) into one the next
// start removes, after answering success: it is refused with EPERM and
// the file stays where it was, through a restart. Renaming a temporary
// to an ordinary name (what put does) works and keeps it.
func TestRenameOntoATemporaryNameIsRefused(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(emuDevice(t), t.TempDir()+"/zf.sock")
	d := startDaemon(t, cfg)
	c := dial(t, d.socket)
	write := func(name, data string) {
		t.Helper()
		h, _, err := c.Open(ctx, name, OpenCreate|OpenExcl)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.WriteAt(ctx, h, []byte(data), 0); err != nil {
			t.Fatal(err)
		}
		if err := c.Fsync(ctx, h); err != nil {
			t.Fatal(err)
		}
		if err := c.CloseFile(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	write("kept", "data")
	if err := c.Rename(ctx, "kept", TempPrefix+"x"); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("rename onto %sx: %v, want EPERM", TempPrefix, err)
	}
	write(TempPrefix+"put", "new")
	if err := c.Rename(ctx, TempPrefix+"put", "target"); err != nil {
		t.Fatalf("rename a temporary to its target: %v", err)
	}
	c.Close()
	if err := d.stop(t); err != nil {
		t.Fatal(err)
	}

	cfg.Format = false
	d = startDaemon(t, cfg)
	c = dial(t, d.socket)
	for name, size := range map[string]int64{"kept": 4, "target": 3} {
		fi, err := c.Stat(ctx, name)
		if err != nil || fi.Size != size {
			t.Fatalf("after a restart, %s: size %d, %v; want %d bytes", name, fi.Size, err, size)
		}
	}
}
