package server_test

// Probe 5 of the h26a hostile-clients review: SIGTERM while clients
// write into a full device, some waiting in admission (running GC for
// room as overwrites leave garbage), some refused with ENOSPC and
// retrying without pause. Shutdown must end within a bound, and after a
// restart every block an fsync acknowledged must hold what was written
// at least that recently, and nothing newer than was sent.
//
// No bug found. The test stays: it fails on a shutdown that hangs on a
// writer waiting for room or retrying ENOSPC (the exit bound), and on a
// shutdown or recovery that loses or mixes acknowledged blocks, or tears
// one (the generation check after the restart, and again after a kill -9
// of the restarted daemon, whose state must be durable as it found it).
// It does not catch a no-op fsync: the clean shutdown writes everything
// back (h25a's kill -9 tests do).

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/zonefold/zonefold/server"
)

const (
	h26aBlock      = 4096
	h26aFileBlocks = 512 // 2 MiB per overwriting client
	h26aPerWrite   = 16  // blocks per write request
)

// h26aStamp fills b, one block, with who wrote it, where and when:
// client, block index and generation, repeated over the block so that a
// torn block shows.
func h26aStamp(b []byte, client, block int, gen uint32) {
	for i := 0; i < len(b); i += 16 {
		binary.LittleEndian.PutUint32(b[i:], 0x26a26a26)
		binary.LittleEndian.PutUint32(b[i+4:], uint32(client))
		binary.LittleEndian.PutUint32(b[i+8:], uint32(block))
		binary.LittleEndian.PutUint32(b[i+12:], gen)
	}
}

// h26aReadStamp returns a block's generation, or an error if the block
// is not one whole stamp of that client and block (all zeros: gen 0).
func h26aReadStamp(b []byte, client, block int) (uint32, error) {
	if binary.LittleEndian.Uint32(b) == 0 {
		for _, x := range b {
			if x != 0 {
				return 0, fmt.Errorf("block %d: neither zeros nor a stamp", block)
			}
		}
		return 0, nil
	}
	gen := binary.LittleEndian.Uint32(b[12:])
	for i := 0; i < len(b); i += 16 {
		if binary.LittleEndian.Uint32(b[i:]) != 0x26a26a26 || binary.LittleEndian.Uint32(b[i+4:]) != uint32(client) ||
			binary.LittleEndian.Uint32(b[i+8:]) != uint32(block) || binary.LittleEndian.Uint32(b[i+12:]) != gen {
			return 0, fmt.Errorf("block %d: torn or foreign at byte %d", block, i)
		}
	}
	return gen, nil
}

// h26aOverwriter is one client's model: per block, the generation of
// the last write sent (sent), of the last write that reported the block
// written (acked: a write refused with ENOSPC may report part), and the
// least its last acknowledged fsync guarantees (synced: acked as the
// fsync was sent).
type h26aOverwriter struct {
	id                  int
	mu                  sync.Mutex
	sent, acked, synced [h26aFileBlocks]uint32
	writes, full        atomic.Int64
}

func (w *h26aOverwriter) name() string { return fmt.Sprintf("over%d", w.id) }

// run overwrites random runs of blocks and fsyncs every 8 writes, until
// the connection fails (the daemon stops) or stop closes.
func (w *h26aOverwriter) run(ctx context.Context, c *server.Client, stop <-chan struct{}) {
	h, _, err := c.Open(ctx, w.name(), server.OpenCreate)
	if err != nil {
		return
	}
	buf := make([]byte, h26aPerWrite*h26aBlock)
	var gen uint32
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		gen++
		first := (int(gen)*7919 + w.id*131) % (h26aFileBlocks - h26aPerWrite)
		w.mu.Lock()
		for k := range h26aPerWrite {
			h26aStamp(buf[k*h26aBlock:(k+1)*h26aBlock], w.id, first+k, gen)
			w.sent[first+k] = gen // sent: may land, whatever the answer
		}
		w.mu.Unlock()
		n, err := c.WriteAt(ctx, h, buf, int64(first*h26aBlock))
		w.mu.Lock()
		for k := range n / h26aBlock {
			w.acked[first+k] = gen
		}
		w.mu.Unlock()
		switch {
		case errors.Is(err, server.StatusNoSpace):
			w.full.Add(1)
		case err != nil:
			return
		default:
			w.writes.Add(1)
		}
		if i%8 == 7 {
			w.mu.Lock()
			snap := w.acked
			w.mu.Unlock()
			if err := c.Fsync(ctx, h); err != nil {
				if errors.Is(err, server.StatusNoSpace) {
					continue
				}
				return
			}
			w.mu.Lock()
			w.synced = snap
			w.mu.Unlock()
		}
	}
}

// check reads the file back from c.
func (w *h26aOverwriter) check(t *testing.T, c *server.Client, when string) {
	t.Helper()
	ctx := context.Background()
	h, _, err := c.Open(ctx, w.name(), 0)
	if err != nil {
		t.Fatalf("%s: open %s: %v", when, w.name(), err)
	}
	defer c.CloseFile(ctx, h)
	got := make([]byte, h26aFileBlocks*h26aBlock)
	n, _ := c.ReadAt(ctx, h, got, 0)
	w.mu.Lock()
	defer w.mu.Unlock()
	for b := range h26aFileBlocks {
		var gen uint32
		if (b+1)*h26aBlock <= n {
			if gen, err = h26aReadStamp(got[b*h26aBlock:(b+1)*h26aBlock], w.id, b); err != nil {
				t.Fatalf("%s: %s: %v", when, w.name(), err)
			}
		}
		if gen < w.synced[b] || gen > w.sent[b] {
			t.Fatalf("%s: %s block %d holds generation %d; fsynced %d, last sent %d", when, w.name(), b, gen, w.synced[b], w.sent[b])
		}
	}
}

// h26aFiller creates files and writes them until the device is full,
// then keeps writing (each refused at once) until the connection fails
// or stop closes.
func h26aFiller(ctx context.Context, c *server.Client, id int, full *atomic.Int64, stop <-chan struct{}) {
	buf := make([]byte, 256<<10)
	for f := 0; ; f++ {
		h, _, err := c.Open(ctx, fmt.Sprintf("filler%d-%d", id, f), server.OpenCreate|server.OpenTrunc)
		if err != nil {
			if !errors.Is(err, server.StatusNoSpace) {
				return
			}
			f--
			continue
		}
		for off := int64(0); off < 2<<20; off += int64(len(buf)) {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := c.WriteAt(ctx, h, buf, off); err != nil {
				if !errors.Is(err, server.StatusNoSpace) {
					return
				}
				full.Add(1)
				off -= int64(len(buf)) // again: the device stays full
			}
		}
		c.CloseFile(ctx, h)
	}
}

func TestH26aSigtermWhileWritersWaitOnAFullDevice(t *testing.T) {
	d, dev := hostileSmallDaemon(t) // 24 MiB of 1 MiB zones, a 64 MiB cache
	ctx := context.Background()
	dialers := []func(context.Context, string, int) (*server.Client, error){
		server.Dial, server.DialSocketFraming, server.Dial, server.DialSocketFraming,
	}
	ws := make([]*h26aOverwriter, len(dialers))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var fillerFull atomic.Int64
	for i, dial := range dialers {
		c, err := dial(ctx, d.socket, 4<<20)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ws[i] = &h26aOverwriter{id: i}
		wg.Go(func() { ws[i].run(ctx, c, stop) })
	}
	attempts := func() int64 {
		var n int64
		for _, w := range ws {
			n += w.writes.Load() + w.full.Load()
		}
		return n
	}
	wait := func(what string, cond func() bool) {
		deadline := time.Now().Add(60 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d filler refusals, %d overwrites tried\n%s", what, fillerFull.Load(), attempts(), d.stderr)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// The overwriters first, with fsyncs, then the fillers, until the
	// device is full and the overwriters have gone on a while beside
	// them (waiting for room, refused).
	wait("overwriters starting", func() bool { return attempts() >= 100 })
	for i := range 2 {
		c, err := dialers[i](ctx, d.socket, 4<<20)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Go(func() { h26aFiller(ctx, c, i, &fillerFull, stop) })
	}
	wait("the device filling", func() bool { return fillerFull.Load() >= 20 })
	before := attempts()
	wait("overwriters on the full device", func() bool { return attempts() >= before+50 })
	time.Sleep(300 * time.Millisecond)

	start := time.Now()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-d.exited:
		t.Logf("SIGTERM: exit %v after %v", err, time.Since(start))
		if err != nil && !strings.Contains(d.stderr.String(), "fsynced data is safe") {
			t.Fatalf("daemon exit after SIGTERM: %v\n%s", err, d.stderr)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("daemon did not exit within 60 s of SIGTERM with writers on a full device\n%s", d.stderr)
	}
	close(stop)
	wg.Wait()
	for _, w := range ws {
		t.Logf("%s: %d writes, %d refused", w.name(), w.writes.Load(), w.full.Load())
	}
	fsckClean(t, dev, "after SIGTERM")

	d = startServe(t, dev, d.socket)
	c := dialServe(t, d)
	for _, w := range ws {
		w.check(t, c, "after SIGTERM and a restart")
	}
	c.Close()
	d.kill9()
	fsckClean(t, dev, "after a kill -9 of the next daemon")
	d = startServe(t, dev, d.socket)
	c = dialServe(t, d)
	defer c.Close()
	for _, w := range ws {
		w.check(t, c, "after a kill -9 of the next daemon")
	}
	d.stop()
}
