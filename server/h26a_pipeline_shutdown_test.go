package server

// Probe 1 of the h26a hostile-clients review: clients that pipeline
// many requests and never read a reply (socket framing: MaxInflight
// writes in full batches; rings: a full submission ring, never reaped)
// while the daemon shuts down. Shutdown must end without waiting out the
// grace period (which is for requests still running, not for replies a
// client will not take), and another client's fsynced data must be
// there after a restart.

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"
)

// h26aPipeline opens a file on c and submits n writes of size bytes, in
// batches of at most batch, never reading a reply. With socket framing
// the submits run in a goroutine: they block once the daemon stops
// reading.
func h26aPipeline(t *testing.T, c *Client, name string, n, batch, size int) {
	t.Helper()
	h, _, err := c.Open(context.Background(), name, OpenCreate|OpenTrunc)
	if err != nil {
		t.Fatal(err)
	}
	for i := range min(size, len(c.Data())) {
		c.Data()[i] = byte(i)
	}
	submit := func() {
		for i := 0; i < n; {
			k := min(batch, n-i)
			reqs := make([]Request, k)
			for j := range reqs {
				reqs[j] = Request{Tag: uint64(i + j + 1), Op: OpWrite, Handle: h, Off: uint64((i+j)%256) * uint64(size), Len: uint32(size)}
			}
			if err := c.Submit(reqs); err != nil {
				return // closed by the test, or by the daemon at shutdown
			}
			i += k
		}
	}
	if c.ring != nil {
		submit()
	} else {
		go submit()
	}
}

// TestH26aShutdownBesidePipeliningClientsThatNeverRead: with a grace
// period of two minutes, shutdown with such clients connected must still
// end within the watchdog's 10 s of no progress.
//
// Before the fix a socket-framing client that read no replies held
// shutdown for the whole grace period: every request it sent had run,
// but the connection's writer was blocked sending their replies, and
// the session (whose end shutdown waits for) ended only when the grace
// period ran out and abort set a write deadline. With the default grace
// that is 10 s per SIGTERM, for as long as such a client stays
// connected; here it would be two minutes.
func TestH26aShutdownBesidePipeliningClientsThatNeverRead(t *testing.T) {
	for _, v := range []struct {
		name string
		dial func(testing.TB, string) *Client
		n    int
	}{{"socket framing", dialFraming, 1 << 20}, {"rings", dial, 0}} {
		t.Run(v.name, func(t *testing.T) {
			cfg := testConfig(emuDevice(t), filepath.Join(t.TempDir(), "zf.sock"))
			cfg.Grace = 2 * time.Minute
			d := startDaemon(t, cfg)
			ctx := context.Background()

			good := dial(t, d.socket)
			h, _, err := good.Open(ctx, "good", OpenCreate)
			if err != nil {
				t.Fatal(err)
			}
			want := bytes.Repeat([]byte("fsynced beside a client that reads nothing "), 20000)
			if _, err := good.WriteAt(ctx, h, want, 0); err != nil {
				t.Fatal(err)
			}
			if err := good.Fsync(ctx, h); err != nil {
				t.Fatal(err)
			}

			// Two hostile clients: each pipelines 16 KiB writes and
			// reads nothing. With socket framing they send one request
			// per message, without end: their replies fill the socket,
			// and the daemon stops reading them with MaxInflight
			// unanswered. With rings, each fills its submission ring.
			taken := d.srv.stats.requestsIn.Load()
			var limit int64
			for i := range 2 {
				bad := v.dial(t, d.socket)
				n, batch := v.n, 1
				if n == 0 {
					n, batch = int(bad.Limits().Entries), MaxBatch
				}
				h26aPipeline(t, bad, "pipelined-"+string(rune('a'+i)), n, batch, 16<<10)
				limit += int64(min(n, MaxInflight)) + 1 // the open too
			}
			awaitProgress(t, "requests taken in from clients that read no replies", taken+limit, d.srv.stats.requestsIn.Load)
			// Until intake stops (the daemon's replies fill the
			// sockets).
			for last := int64(-1); ; {
				time.Sleep(300 * time.Millisecond)
				now := d.srv.stats.requestsIn.Load()
				if now == last {
					t.Logf("%d requests taken in", now-taken)
					break
				}
				last = now
			}
			// Every one of them ran: all that waits is their replies.
			awaitProgress(t, "the pipelined writes' run", 1, d.srv.requestsRan)

			start := time.Now()
			awaitShutdown(t, d)
			t.Logf("shutdown took %v", time.Since(start))

			cfg.Format = false
			d = startDaemon(t, cfg)
			c := dial(t, d.socket)
			h, size, err := c.Open(ctx, "good", 0)
			if err != nil || size != int64(len(want)) {
				t.Fatalf("the good client's file after the restart: %d bytes, %v; want %d", size, err, len(want))
			}
			got := make([]byte, len(want))
			if n, _ := c.ReadAt(ctx, h, got, 0); n != len(want) || !bytes.Equal(got, want) {
				t.Fatalf("the good client's fsynced data changed across the shutdown (%d bytes read)", n)
			}
		})
	}
}

// requestsRan is 1 once no connection of s has a request running (busy)
// or pieces of one left: what a client was answered, or will be, has
// all run. For awaitProgress.
func (s *Server) requestsRan() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.busy.Load() != 0 || c.pieces.Load() != 0 {
			return 0
		}
	}
	return 1
}
