package server

// Many clients at once, of both protocol versions,
// beside clients that never read or reap their replies and clients that
// vanish mid-batch.

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestManyClientsBesideHostileOnes: 48 clients (rings and socket
// framing) each create a file, write, fsync, read back, rename and
// remove it, in rounds, while a socket-framing client never reads its
// replies, a ring client never reaps them, and clients vanish with a
// batch of writes in flight. Every call of the well-behaved clients must
// succeed and read back what it wrote, within a generous deadline (a
// hang fails it), and the daemon must shut down cleanly.
func TestManyClientsBesideHostileOnes(t *testing.T) {
	cfg := testConfig(fmt.Sprintf("emu:%s?zone_size=1M&zones=48", filepath.Join(t.TempDir(), "dev")),
		filepath.Join(t.TempDir(), "zf.sock"))
	cfg.Grace = time.Minute // shutdown must not need it
	d := startDaemon(t, cfg)
	never := neverReads(t, d.socket, MaxInflight)
	defer never.Close()
	unreaped := dial(t, d.socket)
	{
		h, _, err := unreaped.Open(context.Background(), "never-reaps", OpenCreate)
		if err != nil {
			t.Fatal(err)
		}
		reqs := make([]Request, unreaped.ring.entries)
		for i := range reqs {
			reqs[i] = Request{Tag: uint64(i + 1), Op: OpWrite, Handle: h, Off: uint64(i) * 4096, Len: 4096}
		}
		for i := 0; i < len(reqs); i += MaxBatch {
			if err := unreaped.Submit(reqs[i:min(len(reqs), i+MaxBatch)]); err != nil {
				t.Fatal(err)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const clients, rounds = 48, 4
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	fail := func(err error) { failed.CompareAndSwap(nil, &err) }
	for i := range clients {
		wg.Go(func() {
			var c *Client
			var err error
			if i%2 == 0 {
				c, err = Dial(ctx, d.socket, 1<<20)
			} else {
				c, err = DialSocketFraming(ctx, d.socket, 1<<20)
			}
			if err != nil {
				fail(fmt.Errorf("client %d: dial: %w", i, err))
				return
			}
			defer c.Close()
			rng := rand.New(rand.NewPCG(uint64(i), 43))
			for r := range rounds {
				name := fmt.Sprintf("c%d-r%d", i, r)
				want := bytes.Repeat([]byte{byte(i), byte(r)}, 4096+rng.IntN(64<<10))
				h, _, err := c.Open(ctx, name, OpenCreate|OpenExcl)
				if err == nil {
					_, err = c.WriteAt(ctx, h, want, 0)
				}
				if err == nil {
					err = c.Fsync(ctx, h)
				}
				got := make([]byte, len(want))
				if err == nil {
					_, err = c.ReadAt(ctx, h, got, 0)
				}
				if err == nil && !bytes.Equal(got, want) {
					err = fmt.Errorf("read back other bytes")
				}
				if err == nil {
					err = c.CloseFile(ctx, h)
				}
				if err == nil {
					err = c.Rename(ctx, name, name+"-done")
				}
				if err == nil && r%2 == 0 {
					err = c.Remove(ctx, name+"-done")
				}
				if err != nil {
					fail(fmt.Errorf("client %d round %d: %w", i, r, err))
					return
				}
			}
		})
	}
	// Clients that vanish with a batch of writes in flight.
	for i := range 8 {
		wg.Go(func() {
			c, err := Dial(ctx, d.socket, 1<<20)
			if err != nil {
				fail(fmt.Errorf("vanishing client %d: dial: %w", i, err))
				return
			}
			h, _, err := c.Open(ctx, fmt.Sprintf("vanish%d", i), OpenCreate)
			if err != nil {
				c.Close()
				fail(fmt.Errorf("vanishing client %d: open: %w", i, err))
				return
			}
			reqs := make([]Request, 64)
			for j := range reqs {
				reqs[j] = Request{Tag: uint64(j + 1), Op: OpWrite, Handle: h, Off: uint64(j) << 14, Len: 16 << 10}
			}
			reqs[63] = Request{Tag: 64, Op: OpFsync, Handle: h}
			c.Submit(reqs)
			c.Close()
		})
	}
	wg.Wait()
	if p := failed.Load(); p != nil {
		t.Fatal(*p)
	}
	if ctx.Err() != nil {
		t.Fatal("the clients did not finish within 60 s")
	}
	c := dial(t, d.socket)
	list, err := c.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	done := 0
	for _, e := range list {
		if len(e.Name) > 5 && e.Name[len(e.Name)-5:] == "-done" {
			done++
		}
	}
	if want := clients * rounds / 2; done != want {
		t.Fatalf("%d renamed files kept, want %d", done, want)
	}
	if err := d.stop(t); err != nil {
		t.Fatalf("shutdown with a client that never reads and one that never reaps: %v", err)
	}
}
