package cache

import (
	"bytes"
	"context"
	"testing"
)

// TestWriteThen: WriteThen's callback runs once, with the file's lock
// held (so no BeginWriteback can come between the write and it), after
// a write that waited for the block's writeback to end; writeback then
// takes the new bytes. A write that fails never calls it.
func TestWriteThen(t *testing.T) {
	c := newTestCache(t, Config{Bytes: 1 << 20})
	b := newMemBacking()
	ctx := context.Background()
	old := bytes.Repeat([]byte{1}, 4096)
	if _, err := c.Write(ctx, c.File(1), 0, old, b); err != nil {
		t.Fatal(err)
	}
	exts := c.BeginWriteback(1, 0, nil)
	if len(exts) != 1 || !bytes.Equal(exts[0].Data, old) {
		t.Fatalf("writeback took %d extents", len(exts))
	}
	calls, locked := 0, false
	done := make(chan error)
	go func() {
		_, err := c.WriteThen(ctx, c.File(1), 100, []byte("new"), b, func() {
			calls++
			fs := c.file(1)
			if locked = !fs.mu.TryLock(); !locked {
				fs.mu.Unlock()
			}
		})
		done <- err
	}()
	c.EndWriteback(exts, nil) // the write waits for this
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if calls != 1 || !locked {
		t.Fatalf("then ran %d times, under the file's lock: %v", calls, locked)
	}
	exts = c.BeginWriteback(1, 0, nil)
	if len(exts) != 1 || !bytes.Equal(exts[0].Data[100:103], []byte("new")) {
		t.Fatalf("writeback after WriteThen did not take its bytes")
	}
	c.EndWriteback(exts, nil)
	if _, err := c.WriteThen(ctx, c.File(1), -1, []byte("x"), b, func() { calls++ }); err == nil || calls != 1 {
		t.Fatalf("a failed WriteThen: err %v, then ran %d times in all", err, calls)
	}
}
