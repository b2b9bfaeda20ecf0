package server

import (
	"context"
	"errors"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"
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

// A temporary goes when the connection that created it ends, unless it
// was renamed first: a put whose client was killed mid-copy held its
// space until the daemon's next start, and puts after it met ENOSPC on a
// device that was in fact mostly free (two killed 30 MB puts filled a 64
// MiB device). Other connections' temporaries, renamed ones and ordinary
// files stay; so does a file another connection put at a temporary's
// name after it was renamed away.
func TestTemporariesGoWithTheirConnection(t *testing.T) {
	cfg := testConfig(emuDevice(t), filepath.Join(t.TempDir(), "zf.sock"))
	d := startDaemon(t, cfg)
	a, b := dial(t, d.socket), dial(t, d.socket)
	bg := context.Background()
	create := func(c *Client, name string, n int) {
		t.Helper()
		h, _, err := c.Open(bg, name, OpenCreate|OpenExcl)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.WriteAt(bg, h, make([]byte, n), 0); err != nil {
			t.Fatal(err)
		}
		if err := c.Fsync(bg, h); err != nil {
			t.Fatal(err)
		}
		if err := c.CloseFile(bg, h); err != nil {
			t.Fatal(err)
		}
	}
	create(a, TempPrefix+"left", 1<<20)
	create(a, TempPrefix+"renamed", 4096)
	if err := a.Rename(bg, TempPrefix+"renamed", "done"); err != nil {
		t.Fatal(err)
	}
	create(a, TempPrefix+"reused", 4096)
	if err := a.Rename(bg, TempPrefix+"reused", "done2"); err != nil {
		t.Fatal(err)
	}
	create(b, TempPrefix+"reused", 100) // b's file at a's former temporary name
	create(a, "plain", 4096)
	create(b, TempPrefix+"other", 4096)
	a.Close()
	// The daemon ends a's session on its own time; a minute is a bound
	// against waiting for ever, not a measure.
	for limit := time.Now().Add(time.Minute); ; runtime.Gosched() {
		_, err := b.Stat(bg, TempPrefix+"left")
		if errors.Is(err, syscall.ENOENT) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(limit) {
			t.Fatal("a temporary outlived the connection that created it by a minute")
		}
	}
	for name, size := range map[string]int64{"done": 4096, "done2": 4096, "plain": 4096,
		TempPrefix + "reused": 100, TempPrefix + "other": 4096} {
		if fi, err := b.Stat(bg, name); err != nil || fi.Size != size {
			t.Errorf("after the creating connection ended, %s: size %d, %v; want %d bytes", name, fi.Size, err, size)
		}
	}
}
