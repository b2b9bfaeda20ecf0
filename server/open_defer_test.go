package server

import (
	"context"
	"testing"
)

// TestOpenDeferSyncCreatesWithoutFlush: a create with OpenDeferSync is
// answered without a device flush (a durable create flushes), the file
// exists at once, and its fsync flushes, which makes the create durable:
// after a restart the file is there with what was written.
func TestOpenDeferSyncCreatesWithoutFlush(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(emuDevice(t), t.TempDir()+"/zf.sock")
	d := startDaemon(t, cfg)
	c := dial(t, d.socket)
	flushes := func() int64 {
		t.Helper()
		st, err := c.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.Flushes
	}

	before := flushes()
	if _, _, err := c.Open(ctx, "durable", OpenCreate); err != nil {
		t.Fatal(err)
	}
	if got := flushes(); got == before {
		t.Fatalf("a durable create flushed nothing (flushes %d): the check below proves nothing", got)
	}

	before = flushes()
	h, _, err := c.Open(ctx, "deferred", OpenCreate|OpenDeferSync)
	if err != nil {
		t.Fatalf("open with OpenDeferSync: %v", err)
	}
	if got := flushes(); got != before {
		t.Fatalf("a deferred create flushed the device: flushes %d -> %d", before, got)
	}
	if _, err := c.Stat(ctx, "deferred"); err != nil {
		t.Fatalf("stat of a deferred create: %v", err)
	}
	if _, err := c.WriteAt(ctx, h, []byte("kept"), 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Fsync(ctx, h); err != nil {
		t.Fatal(err)
	}
	if got := flushes(); got == before {
		t.Fatal("fsync of a deferred create flushed nothing")
	}
	_, c = d.restart(t, cfg, c)
	fi, err := c.Stat(ctx, "deferred")
	if err != nil {
		t.Fatalf("the deferred create is gone after its fsync and a restart: %v", err)
	}
	if fi.Size != 4 {
		t.Fatalf("size %d after restart, want 4", fi.Size)
	}
}
