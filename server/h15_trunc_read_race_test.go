package server

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestH15ClientShrinkRacingAnotherClientsColdRead: through the daemon,
// what engine's TestH15ShrinkRacingColdReadNeverResurrectsCutBytes
// shows: one client reads a file the daemon has not cached (a fresh
// daemon) while another truncates it to 4 KiB, and a third client
// overwrites a file of its own (so GC runs); after a truncate back to
// the old size every byte past the cut must read as zero (docs/protocol.md:
// truncate; engine.Truncate: bytes past a shrunk end read as zeros if
// the file grows again). On main the cut 0xaa bytes read back: the
// reader's remaining misses, read after cache.Truncate and before the
// extent map is cut (the cut waits for GC's lock), go into the cache
// past the new end.
func TestH15ClientShrinkRacingAnotherClientsColdRead(t *testing.T) {
	cfg := testConfig(emuDevice(t), filepath.Join(t.TempDir(), "zf.sock"))
	cfg.Engine.CacheBytes = 32 << 20
	d := startDaemon(t, cfg)
	cfg.Format = false
	ctx := context.Background()
	const size, cut = 4 << 20, 4096
	old := bytes.Repeat([]byte{0xaa}, size)
	// Another client overwrites a file of its own all along, so that
	// GC runs (the shrink's cut waits for a GC pass to end).
	var stop sync.WaitGroup
	quit := make(chan struct{})
	defer func() { close(quit); stop.Wait() }()
	churn := func(socket string) {
		stop.Go(func() {
			o, err := Dial(ctx, socket, 2<<20)
			if err != nil {
				return
			}
			defer o.Close()
			h, _, err := o.Open(ctx, "churn", OpenCreate)
			if err != nil {
				return
			}
			p := bytes.Repeat([]byte{0x55}, 1<<20)
			for i := 0; ; i++ {
				select {
				case <-quit:
					return
				default:
				}
				if _, err := o.WriteAt(ctx, h, p, int64(i%48)<<20); err != nil {
					return
				}
				if i%4 == 0 && o.Fsync(ctx, h) != nil {
					return
				}
			}
		})
	}
	// 60 races, on 60 files written batch files at a time: a new daemon
	// after each batch has none of them cached, and each iteration reads
	// only its own file.
	const batch = 5
	for iter := 0; iter < 60; iter++ {
		name := fmt.Sprintf("f%d", iter)
		if iter%batch == 0 {
			d = writeColdFiles(t, d, cfg, iter, batch, old)
			churn(d.socket)
		}
		time.Sleep(20 * time.Millisecond)
		r, err := Dial(ctx, d.socket, 8<<20)
		if err != nil {
			t.Fatal(err)
		}
		w, err := Dial(ctx, d.socket, 8<<20)
		if err != nil {
			t.Fatal(err)
		}
		hr, _, err := r.Open(ctx, name, 0)
		if err != nil {
			t.Fatal(err)
		}
		hw, _, err := w.Open(ctx, name, 0)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var rd time.Duration
		t0 := time.Now()
		wg.Go(func() { r.ReadAt(ctx, hr, make([]byte, size), 0); rd = time.Since(t0) })
		time.Sleep(time.Duration(iter%50) * 40 * time.Microsecond)
		if err := w.Truncate(ctx, hw, cut); err != nil {
			t.Fatal(err)
		}
		td := time.Since(t0)
		wg.Wait()
		if iter%10 == 0 {
			t.Logf("read took %v, truncate done at %v", rd, td)
		}
		if err := w.Truncate(ctx, hw, size); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, size)
		if _, err := w.ReadAt(ctx, hw, got, 0); err != nil {
			t.Fatal(err)
		}
		r.Close()
		w.Close()
		if i := bytes.IndexByte(got[cut:], 0xaa); i >= 0 {
			t.Fatalf("iteration %d: a client truncated %s to %d while another read it cold, then grew it back to %d: byte %d reads 0x%02x, a cut byte, not zero",
				iter, name, cut, size, cut+i, got[cut+i])
		}
	}
}
