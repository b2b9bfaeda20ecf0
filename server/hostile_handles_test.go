package server

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"
)

// TestOpenRefusedForHandlesChangesNothing: a client that holds
// MaxHandles handles is refused the next open (StatusTooMany), and that
// refused open must not have done what it asked: a truncating open must
// leave the file's bytes, a creating one must not create the file (as
// open(2) that fails with EMFILE neither truncates nor creates). The
// daemon opened (and truncated or created) the file in the engine first
// and only then found no handle number for it: the client was told its
// open failed, and a synced file was empty.
func TestOpenRefusedForHandlesChangesNothing(t *testing.T) {
	cfg := testConfig(emuDevice(t), filepath.Join(t.TempDir(), "zf.sock"))
	d := startDaemon(t, cfg)
	defer awaitShutdown(t, d)
	ctx := context.Background()
	c, err := Dial(ctx, d.socket, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := bytes.Repeat([]byte("keep me "), 1024)
	h, _, err := c.Open(ctx, "keep", OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteAt(ctx, h, want, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Fsync(ctx, h); err != nil {
		t.Fatal(err)
	}
	for n := 1; n < MaxHandles; n++ {
		if _, _, err := c.Open(ctx, "keep", 0); err != nil {
			t.Fatalf("open %d of %d: %v", n+1, MaxHandles, err)
		}
	}
	if _, _, err := c.Open(ctx, "keep", OpenTrunc); !errors.Is(err, StatusTooMany) {
		t.Fatalf("a truncating open past MaxHandles: %v, want StatusTooMany", err)
	}
	if _, _, err := c.Open(ctx, "new", OpenCreate); !errors.Is(err, StatusTooMany) {
		t.Fatalf("a creating open past MaxHandles: %v, want StatusTooMany", err)
	}
	got := make([]byte, len(want))
	if n, err := c.ReadAt(ctx, h, got, 0); err != nil || n != len(want) || !bytes.Equal(got, want) {
		t.Fatalf("keep after a refused truncating open: %d bytes, %v (intact %v); want its %d bytes",
			n, err, bytes.Equal(got, want), len(want))
	}
	if _, err := c.Stat(ctx, "new"); err == nil {
		t.Fatal("a refused creating open created the file")
	}
}
