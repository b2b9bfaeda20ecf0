package server

import (
	"context"
	"errors"
	"syscall"
	"testing"
)

// TestOnlyTemporariesTakeTheReservedNames: the daemon removes every file
// named TempPrefix... when it starts, so it must not let a client keep a
// file there by accident (fio's filename=, a rename): a create of such a
// name without OpenTemp and a rename onto one are refused with EPERM, and
// nothing was created. A put's own temporary (OpenTemp) is created,
// renamed to its target, and the target survives a restart.
func TestOnlyTemporariesTakeTheReservedNames(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(emuDevice(t), t.TempDir()+"/zf.sock")
	d := startDaemon(t, cfg)
	c := dial(t, d.socket)
	reserved := TempPrefix + "fio"

	for _, flags := range []uint8{OpenCreate, OpenCreate | OpenExcl, OpenCreate | OpenTrunc, OpenCreate | OpenDeferSync} {
		if _, _, err := c.Open(ctx, reserved, flags); !errors.Is(err, syscall.EPERM) {
			t.Fatalf("create %s with flags %#x: %v, want EPERM", reserved, flags, err)
		}
	}
	if _, err := c.Stat(ctx, reserved); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("after refused creates, stat %s: %v, want ENOENT", reserved, err)
	}
	// OpenTemp is for reserved names only.
	if _, _, err := c.Open(ctx, "plain", OpenCreate|OpenExcl|OpenTemp); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("OpenTemp on a plain name: %v, want EINVAL", err)
	}

	h, _, err := c.Open(ctx, "kept", OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteAt(ctx, h, []byte("data"), 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Fsync(ctx, h); err != nil {
		t.Fatal(err)
	}
	if err := c.Rename(ctx, "kept", reserved); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("rename onto %s: %v, want EPERM", reserved, err)
	}

	// What put does: a temporary, written, fsynced and renamed.
	tmp := TempPrefix + "put"
	th, _, err := c.Open(ctx, tmp, OpenCreate|OpenExcl|OpenTemp)
	if err != nil {
		t.Fatalf("create a temporary: %v", err)
	}
	if _, err := c.WriteAt(ctx, th, []byte("new"), 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Fsync(ctx, th); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseFile(ctx, th); err != nil {
		t.Fatal(err)
	}
	if err := c.Rename(ctx, tmp, "target"); err != nil {
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
