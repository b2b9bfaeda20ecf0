package server

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func TestRingEntries(t *testing.T) {
	for _, tc := range []struct{ want, got uint32 }{
		{0, DefaultRingEntries}, {1, minRingEntries}, {9, 16}, {256, 256}, {257, 512},
		{MaxRingEntries, MaxRingEntries}, {MaxRingEntries + 1, MaxRingEntries},
	} {
		if got := ringEntries(tc.want); got != tc.got {
			t.Errorf("ringEntries(%d) = %d, want %d", tc.want, got, tc.got)
		}
	}
}

func TestCheckRing(t *testing.T) {
	const e = 8
	tests := []struct {
		name                         string
		head, sqTail, cqHead, cqTail uint32
		n                            uint32
		err                          error
	}{
		{"empty", 0, 0, 0, 0, 0, nil},
		{"full ring", 0, e, 0, 0, e, nil},
		{"wrapping", ^uint32(0) - 2, 3, ^uint32(0) - 2, ^uint32(0) - 2, 6, nil},
		{"tail past a ring", 0, e + 1, 0, 0, 0, errSQOverrun},
		{"tail behind the head", 5, 4, 5, 5, 0, errSQOverrun},
		{"cq head past the tail", 4, 4, 3, 2, 0, errCQPastTail},
		{"cq head a ring behind", 20, 20, 0, 20, 0, errCQPastTail},
		{"too many outstanding", 4, 9, 0, 4, 0, errOutstanding},
		{"exactly entries outstanding", 4, 8, 0, 0, 4, nil},
	}
	for _, tc := range tests {
		n, err := checkRing(tc.head, tc.sqTail, tc.cqHead, tc.cqTail, e)
		if n != tc.n || !errors.Is(err, tc.err) {
			t.Errorf("%s: %d, %v; want %d, %v", tc.name, n, err, tc.n, tc.err)
		}
	}
}

// FuzzCheckRing: whatever the client writes into its indices, what
// checkRing accepts keeps the daemon within its ring and its slots.
func FuzzCheckRing(f *testing.F) {
	f.Add(uint32(0), uint32(3), uint32(0), uint32(0), uint8(3))
	f.Add(^uint32(0), uint32(5), ^uint32(0)-1, ^uint32(0), uint8(4))
	f.Fuzz(func(t *testing.T, head, sqTail, cqHead, cqTail uint32, shift uint8) {
		e := uint32(1) << (shift % 13)
		// The daemon's own counters are consistent: no more replies
		// posted than requests taken, nor more outstanding than the ring.
		if cqTail-head > 0 && int32(head-cqTail) < 0 || head-cqTail > e {
			return
		}
		n, err := checkRing(head, sqTail, cqHead, cqTail, e)
		if err != nil {
			return
		}
		if n > e {
			t.Fatalf("%d new requests in a ring of %d", n, e)
		}
		if head+n-cqHead > e {
			t.Fatalf("%d outstanding with a ring of %d", head+n-cqHead, e)
		}
		// Slots in use after taking them: taken minus posted.
		if head+n-cqTail > e {
			t.Fatalf("%d slots needed, %d exist", head+n-cqTail, e)
		}
		if cqTail-cqHead > e {
			t.Fatalf("completion head %d and tail %d accepted", cqHead, cqTail)
		}
	})
}

// corrupt sets one of the client's ring words and rings the doorbell.
func corrupt(c *Client, off int, v uint32) {
	area := c.mapped[c.info.RingOff:]
	atomic.StoreUint32(word(area, off), v)
	c.doorbell()
}

// closedByDaemon waits for the daemon to close c's connection.
func closedByDaemon(t *testing.T, c *Client) {
	t.Helper()
	c.uc.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		_, err := c.uc.Read(make([]byte, 16))
		// A close with the client's doorbells unread resets.
		if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
			return
		}
		if err != nil {
			t.Fatalf("waiting for the daemon to close a corrupt ring: %v", err)
		}
	}
}

// TestRingCorruptionClosesOnlyThatConnection: a client that writes
// impossible ring indices loses its connection, with a log line; other
// clients do not notice.
func TestRingCorruptionClosesOnlyThatConnection(t *testing.T) {
	d := newDaemon(t)
	ctx := context.Background()
	good := dial(t, d.socket)
	h, _, err := good.Open(ctx, "g", OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		spoil func(c *Client)
	}{
		{"submission tail a ring ahead", func(c *Client) { corrupt(c, RingSQTail, c.ring.entries+1) }},
		{"submission tail behind the head", func(c *Client) {
			c.Submit([]Request{{Tag: 1, Op: OpNop}})
			c.Recv(make([]Reply, MaxBatch))
			corrupt(c, RingSQTail, ^uint32(0))
		}},
		{"completion head past the tail", func(c *Client) {
			atomic.StoreUint32(c.ring.cqHead, 7)
			c.Submit([]Request{{Tag: 1, Op: OpNop}})
		}},
		{"more outstanding than the ring holds", func(c *Client) {
			reqs := make([]Request, MaxBatch)
			for i := range reqs {
				reqs[i] = Request{Tag: uint64(i), Op: OpNop}
			}
			for range c.ring.entries / MaxBatch {
				if err := c.Submit(reqs); err != nil {
					panic(err)
				}
			}
			// One more than the client may have outstanding, behind
			// Submit's back.
			c.ring.head++
			c.Submit(reqs[:1])
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bad := dial(t, d.socket)
			tc.spoil(bad)
			closedByDaemon(t, bad)
			if _, err := good.WriteAt(ctx, h, []byte("still here"), 0); err != nil {
				t.Fatalf("the other client noticed: %v", err)
			}
		})
	}
	if n := d.srv.stats.protocolErrors.Load(); n != int64(len(tests)) {
		t.Fatalf("%d protocol errors counted, want %d", n, len(tests))
	}
}

// TestRingClientThatNeverReapsCannotWedgeTheDaemon: a client fills its
// ring with writes and never consumes a reply. The daemon takes every
// request (the completion ring always has room for them), serves other
// clients, ends the session when the client goes, and shuts down at once
// with such a client connected.
func TestRingClientThatNeverReapsCannotWedgeTheDaemon(t *testing.T) {
	cfg := testConfig(emuDevice(t), filepath.Join(t.TempDir(), "zf.sock"))
	cfg.Grace = time.Minute // shutdown must not need it
	d := startDaemon(t, cfg)
	stats := &d.srv.stats
	// fill opens a file, then publishes a ring full of writes and
	// waits for the daemon to take them all and post every reply.
	fill := func() *Client {
		c := dial(t, d.socket)
		h, _, err := c.Open(context.Background(), "never-reaps", OpenCreate)
		if err != nil {
			t.Fatal(err)
		}
		base := stats.requestsIn.Load()
		reqs := make([]Request, 1)
		for i := range c.ring.entries {
			reqs[0] = Request{Tag: uint64(i + 1), Op: OpWrite, Handle: h, Off: uint64(i) * 4096, Len: 4096}
			if err := c.Submit(reqs); err != nil {
				t.Fatal(err)
			}
		}
		entries := int64(c.ring.entries)
		awaitProgress(t, "requests taken from a client that reaps no replies", base+entries, stats.requestsIn.Load)
		// The open's reply and one per write.
		awaitProgress(t, "replies posted for it", entries+1, func() int64 { return int64(atomic.LoadUint32(c.ring.cqTail)) })
		return c
	}
	bad := fill()

	ctx := context.Background()
	good := dial(t, d.socket)
	h, _, err := good.Open(ctx, "good", OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := good.WriteAt(ctx, h, []byte("served"), 0); err != nil {
		t.Fatal(err)
	}
	bad.Close()
	awaitProgress(t, "the session's end", 1, func() int64 { return int64(2 - d.connections()) })

	fill()
	start := time.Now()
	awaitShutdown(t, d)
	if time.Since(start) > cfg.Grace/2 {
		t.Fatalf("shutdown took %v: it waited on the client", time.Since(start))
	}
}

// FuzzRingSession writes what the fuzzer gives into a live connection's
// ring words and submission entries, rings the doorbell, and requires
// that the daemon either answers or closes that connection, and keeps
// serving another.
func FuzzRingSession(f *testing.F) {
	d := startDaemon(f, testConfig(emuDevice(f), filepath.Join(f.TempDir(), "zf.sock")))
	probe := dial(f, d.socket)
	seed := make([]byte, 2*RequestSize)
	(&Request{Tag: 1, Op: OpNop}).Encode(seed)
	(&Request{Tag: 2, Op: OpRead, Handle: 1, Len: 10}).Encode(seed[RequestSize:])
	f.Add(uint32(2), uint32(0), uint32(0), uint32(0), seed)
	f.Add(uint32(1<<31), uint32(5), uint32(1), uint32(1), seed)
	f.Add(uint32(3), uint32(^uint32(0)), uint32(0), uint32(0), []byte("junk"))
	f.Fuzz(func(t *testing.T, sqTail, cqHead, sqFlags, cqFlags uint32, sqes []byte) {
		c, err := Dial(context.Background(), d.socket, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		r := c.ring
		copy(r.sqes, sqes)
		area := c.mapped[c.info.RingOff:]
		atomic.StoreUint32(word(area, RingCQHead), cqHead)
		atomic.StoreUint32(word(area, RingSQFlags), sqFlags)
		atomic.StoreUint32(word(area, RingCQFlags), cqFlags)
		atomic.StoreUint32(word(area, RingSQTail), sqTail)
		c.doorbell()
		if _, err := checkRing(0, sqTail, cqHead, 0, r.entries); err != nil {
			closedByDaemon(t, c)
		} else {
			// Every request published gets its reply.
			awaitProgress(t, "replies to fuzzed requests", int64(sqTail), func() int64 { return int64(atomic.LoadUint32(r.cqTail)) })
		}
		if _, err := probe.Stat(context.Background(), "nothing"); !strings.Contains(err.Error(), "no such file") {
			t.Fatalf("the other client: %v", err)
		}
	})
}
