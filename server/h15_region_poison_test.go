package server

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestH15ClientScribblingItsReadBufferCannotChangeAFile: docs/protocol.md
// and server/doc.go: nothing a client writes can touch another client; a
// client that changes a range it named in a request before the reply
// confuses only itself. Since b55523f a cache miss is read from the
// device into the reader's buffer — for the daemon, the client's shared
// region — without the file's lock, and then copied from there into the
// cache as the file's clean, uptodate bytes. A client that scribbles on
// its read buffer while its read of a cold file runs thereby changes the
// file as every other client reads it (and a later partial write into
// such a block writes the scribble to the device).
func TestH15ClientScribblingItsReadBufferCannotChangeAFile(t *testing.T) {
	cfg := testConfig(emuDevice(t), filepath.Join(t.TempDir(), "zf.sock"))
	cfg.Engine.CacheBytes = 32 << 20
	d := startDaemon(t, cfg)
	cfg.Format = false
	ctx := context.Background()
	const size = 4 << 20
	want := bytes.Repeat([]byte{0xaa}, size)
	// 60 cold reads, of 60 files written batch files at a time: a new
	// daemon after each batch has none of them cached, and each iteration
	// reads (warms) only its own file.
	const batch = 6
	for iter := 0; iter < 60; iter++ {
		name := fmt.Sprintf("f%d", iter)
		if iter%batch == 0 {
			d = writeColdFiles(t, d, cfg, iter, batch, want)
		}
		bad, err := Dial(ctx, d.socket, 8<<20)
		if err != nil {
			t.Fatal(err)
		}
		hb, _, err := bad.Open(ctx, name, 0)
		if err != nil {
			t.Fatal(err)
		}
		region := bad.Data()
		var done atomic.Bool
		var wg sync.WaitGroup
		wg.Go(func() {
			for !done.Load() {
				for i := 0; i < size; i += 512 {
					region[i] = 0xee
				}
			}
		})
		if err := bad.Submit([]Request{{Tag: 1, Op: OpRead, Handle: hb, Addr: 0, Len: size}}); err != nil {
			t.Fatal(err)
		}
		reps := make([]Reply, 4)
		bad.uc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := bad.Recv(reps); err != nil {
			t.Fatal(err)
		}
		done.Store(true)
		wg.Wait()
		bad.Close()
		good := dial(t, d.socket)
		hg, _, err := good.Open(ctx, name, 0)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, size)
		if _, err := good.ReadAt(ctx, hg, got, 0); err != nil {
			t.Fatal(err)
		}
		if i := bytes.IndexByte(got, 0xee); i >= 0 {
			t.Errorf("iteration %d: another client scribbled 0xee on its own read buffer during its read of %s (answered status %d); now %s reads 0x%02x at byte %d for every client (written: 0xaa)",
				iter, name, reps[0].Status, name, got[i], i)
			// An honest client's 1-byte write into that block, fsynced,
			// puts the scribble on the device.
			at := int64(i) | 1
			if _, err := good.WriteAt(ctx, hg, []byte{0xaa}, at); err != nil {
				t.Fatal(err)
			}
			if err := good.Fsync(ctx, hg); err != nil {
				t.Fatal(err)
			}
			good.Close()
			d, good = d.restart(t, cfg, dial(t, d.socket))
			hg, _, err = good.Open(ctx, name, 0)
			if err != nil {
				t.Fatal(err)
			}
			blk := make([]byte, 4096)
			if _, err := good.ReadAt(ctx, hg, blk, at&^4095); err != nil {
				t.Fatal(err)
			}
			if j := bytes.IndexByte(blk, 0xee); j >= 0 {
				t.Errorf("after an honest client's 1-byte write at %d, an fsync and a restart, byte %d still reads 0xee: the scribble is durable",
					at, at&^4095+int64(j))
			}
			return
		}
		if err := good.Remove(ctx, name); err != nil {
			t.Fatal(err)
		}
		good.Close()
	}
}

// writeColdFiles writes data to files f<first>..f<first+n-1>, each
// fsynced, then stops d and returns a new daemon on cfg (Format false),
// which has none of them cached.
func writeColdFiles(t *testing.T, d *daemon, cfg RunConfig, first, n int, data []byte) *daemon {
	t.Helper()
	ctx := context.Background()
	w, err := Dial(ctx, d.socket, 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	for j := first; j < first+n; j++ {
		h, _, err := w.Open(ctx, fmt.Sprintf("f%d", j), OpenCreate)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteAt(ctx, h, data, 0); err != nil {
			t.Fatal(err)
		}
		if err := w.Fsync(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	if err := d.stop(t); err != nil {
		t.Fatal(err)
	}
	return startDaemon(t, cfg)
}
