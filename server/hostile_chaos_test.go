package server_test

// Acknowledged fsyncs of well-behaved clients must
// survive kill -9 of the daemon while sloppy clients around them vanish
// with writes and fsyncs in flight, rename over and remove files, and GC
// runs (the device is small and the writers overwrite).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zonefold/zonefold/server"
)

const hostileBlk = 16 << 10

// hostileWriter is a well-behaved client's file: what its last acknowledged
// fsync made durable, and which blocks it wrote since (those may read as
// either version after a crash).
type hostileWriter struct {
	name    string
	blocks  int
	acked   []byte         // content as of the last acknowledged fsync
	cur     []byte         // content as written
	dirty   map[int][]byte // blocks written since that fsync: their versions
	version byte
}

func (w *hostileWriter) block(i int, v byte) []byte {
	b := make([]byte, hostileBlk)
	for j := range b {
		b[j] = byte(i*7+j/512) ^ v ^ byte(len(w.name))
	}
	b[0], b[1] = v, byte(i)
	return b
}

// run writes random blocks and fsyncs every few writes until ctx ends or
// a request fails (the daemon was killed).
func (w *hostileWriter) run(ctx context.Context, c *server.Client, h uint32, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 43))
	for ctx.Err() == nil {
		for k := 0; k < 1+rng.IntN(6); k++ {
			i := rng.IntN(w.blocks)
			w.version++
			b := w.block(i, w.version)
			w.dirty[i] = append(w.dirty[i], w.version)
			if _, err := c.WriteAt(context.Background(), h, b, int64(i*hostileBlk)); err != nil {
				return err
			}
			copy(w.cur[i*hostileBlk:], b)
		}
		if err := c.Fsync(context.Background(), h); err != nil {
			return err
		}
		copy(w.acked, w.cur)
		clear(w.dirty)
	}
	return nil
}

// verify checks the file after a restart: every block not written since
// the last acknowledged fsync holds the acknowledged bytes; each 4 KiB of
// a block written since holds the acknowledged bytes or those of a write
// since (writes that were not fsynced are not atomic). The file's state
// becomes what was read.
func (w *hostileWriter) verify(t *testing.T, got []byte) {
	t.Helper()
	if len(got) < len(w.acked) {
		t.Fatalf("%s: %d bytes after kill -9, its fsync acknowledged %d", w.name, len(got), len(w.acked))
	}
	const sub = 4096
	for i := 0; i < w.blocks; i++ {
	next:
		for s := 0; s < hostileBlk; s += sub {
			g := got[i*hostileBlk+s : i*hostileBlk+s+sub]
			a := w.acked[i*hostileBlk+s : i*hostileBlk+s+sub]
			if bytes.Equal(g, a) {
				continue
			}
			for _, v := range w.dirty[i] {
				if bytes.Equal(g, w.block(i, v)[s:s+sub]) {
					continue next
				}
			}
			t.Fatalf("%s block %d+%d after kill -9: starts %x, fsync acknowledged %x (versions written since: %x)",
				w.name, i, s, g[:4], a[:4], w.dirty[i])
		}
	}
	copy(w.acked, got)
	copy(w.cur, got)
	clear(w.dirty)
}

// hostileSloppy is a client that opens, writes, submits an fsync and
// vanishes, renames its scratch files over each other and removes them,
// over and over.
func hostileSloppy(ctx context.Context, socket string, id int, seed uint64, ops *atomic.Int64) {
	rng := rand.New(rand.NewPCG(seed, uint64(id)))
	for ctx.Err() == nil {
		c, err := server.Dial(context.Background(), socket, 1<<20)
		if err != nil {
			return // killed
		}
		a, b := fmt.Sprintf("sloppy%d-a", id), fmt.Sprintf("sloppy%d-b", id)
		h, _, err := c.Open(context.Background(), a, server.OpenCreate)
		if err != nil {
			c.Close()
			return
		}
		reqs := make([]server.Request, 0, 20)
		for i := 0; i < 16; i++ {
			reqs = append(reqs, server.Request{Tag: uint64(i), Op: server.OpWrite, Handle: h,
				Off: uint64(rng.IntN(64)) * hostileBlk, Addr: uint64(i) * hostileBlk, Len: hostileBlk})
		}
		reqs = append(reqs, server.Request{Tag: 100, Op: server.OpFsync, Handle: h})
		switch rng.IntN(3) {
		case 0:
			// Vanish with the writes and the fsync in flight.
			c.Submit(reqs)
		case 1:
			// Vanish after the writes' answers, mid-fsync.
			if _, err := c.WriteAt(context.Background(), h, make([]byte, 256<<10), 0); err == nil {
				c.Submit(reqs[len(reqs)-1:])
			}
		case 2:
			// Rename over the other scratch file, then remove it.
			if _, err := c.WriteAt(context.Background(), h, make([]byte, 128<<10), 0); err == nil {
				c.Rename(context.Background(), a, b)
				if rng.IntN(2) == 0 {
					c.Remove(context.Background(), b)
				}
			}
		}
		c.Close()
		ops.Add(1)
	}
}

// TestAckedFsyncsSurviveKill9AmidSloppyClients: three rounds of
// well-behaved writers (rings and socket framing) that overwrite and fsync
// on a device small enough for GC to run, beside sloppy clients that
// vanish with writes and fsyncs in flight and rename over and remove
// files, ended by kill -9; a new daemon must serve every acknowledged
// byte.
func TestAckedFsyncsSurviveKill9AmidSloppyClients(t *testing.T) {
	dir := t.TempDir()
	dev := fmt.Sprintf("emu:%s?zone_size=1M&zones=24", filepath.Join(dir, "dev"))
	socket := filepath.Join(dir, "zf.sock")
	d := startServe(t, dev, socket)
	const writers, blocks = 4, 160 // 2.5 MiB each: 10 MiB live of ~20
	ws := make([]*hostileWriter, writers)
	for i := range ws {
		ws[i] = &hostileWriter{name: fmt.Sprintf("w%d", i), blocks: blocks,
			acked: make([]byte, blocks*hostileBlk), cur: make([]byte, blocks*hostileBlk), dirty: map[int][]byte{}}
	}
	for round := 0; round < 3; round++ {
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		errs := make([]error, writers)
		var progress, sloppyOps atomic.Int64
		for i, w := range ws {
			dial := server.Dial
			if i%2 == 1 {
				dial = server.DialSocketFraming
			}
			c, err := dial(context.Background(), d.socket, 4<<20)
			if err != nil {
				t.Fatal(err)
			}
			h, _, err := c.Open(context.Background(), w.name, server.OpenCreate)
			if err != nil {
				t.Fatal(err)
			}
			if round == 0 {
				// Lay the file out whole and durable first.
				if _, err := c.WriteAt(context.Background(), h, w.cur, 0); err != nil {
					t.Fatal(err)
				}
				if err := c.Fsync(context.Background(), h); err != nil {
					t.Fatal(err)
				}
			}
			wg.Go(func() {
				defer c.Close()
				errs[i] = w.run(ctx, c, h, uint64(round*100+i))
				progress.Add(1)
			})
		}
		for s := 0; s < 3; s++ {
			wg.Go(func() { hostileSloppy(ctx, d.socket, s, uint64(round), &sloppyOps) })
		}
		time.Sleep(3 * time.Second)
		d.kill9()
		stop()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: clients did not notice the daemon's death within 30 s", round)
		}
		t.Logf("round %d: %d sloppy sessions; writers stopped with %v", round, sloppyOps.Load(), errs)
		d = startServe(t, dev, socket)
		c, err := server.Dial(context.Background(), d.socket, 4<<20)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			w.verify(t, readWhole(t, c, w.name))
		}
		// The namespace holds only what it may: the writers' files and
		// the sloppy clients' scratch files.
		list, err := c.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(list) > writers+6 {
			t.Fatalf("after kill -9: %d files, at most %d expected: %v", len(list), writers+6, list)
		}
		if _, err := c.Stat(context.Background(), "nonexistent"); !errors.Is(err, server.StatusNotExist) {
			t.Fatalf("stat of a missing name: %v", err)
		}
		c.Close()
	}
	d.stop()
}
