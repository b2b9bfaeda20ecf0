package server

import (
	"context"
	"errors"
	"path/filepath"
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
	cfg := testConfig(emuDevice(t), filepath.Join(t.TempDir(), "zf.sock"))
	d := startDaemon(t, cfg)
	c := dial(t, d.socket)
	bg := context.Background()
	for name, data := range map[string]string{"kept": "data", TempPrefix + "put": "new"} {
		h, _, err := c.Open(bg, name, OpenCreate|OpenExcl)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.WriteAt(bg, h, []byte(data), 0); err != nil {
			t.Fatal(err)
		}
		if err := c.Fsync(bg, h); err != nil {
			t.Fatal(err)
		}
		if err := c.CloseFile(bg, h); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Rename(bg, "kept", TempPrefix+"x"); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("rename onto %sx: %v, want EPERM", TempPrefix, err)
	}
	if err := c.Rename(bg, TempPrefix+"put", "target"); err != nil {
		t.Fatalf("rename a temporary to its target: %v", err)
	}
	_, c = d.restart(t, cfg, c)
	for name, size := range map[string]int64{"kept": 4, "target": 3} {
		if fi, err := c.Stat(bg, name); err != nil || fi.Size != size {
			t.Fatalf("after a restart, %s: size %d, %v; want %d bytes", name, fi.Size, err, size)
		}
	}
}
