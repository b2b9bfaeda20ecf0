package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// sendBufferFull says whether the daemon's socket uc holds as many bytes
// unread by its client as its send buffer allows: the next send on it
// blocks until the client reads.
func sendBufferFull(uc *net.UnixConn) bool {
	rc, err := uc.SyscallConn()
	if err != nil {
		return false
	}
	full := false
	rc.Control(func(fd uintptr) {
		q, err1 := unix.IoctlGetInt(int(fd), unix.SIOCOUTQ)
		b, err2 := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
		full = err1 == nil && err2 == nil && q >= b
	})
	return full
}

// h45bFillReplies has c (socket framing, reading nothing) send fstats of
// h one at a time, each once the daemon has taken the one before and
// sent its reply or filled the socket with replies (uc, the daemon's
// end), until it has; then one more, whose reply cannot go. It returns
// how many it sent: fewer than MaxInflight, so the daemon's reader
// never waits for a slot and reads what c sends next (its end).
func h45bFillReplies(t *testing.T, srv *Server, c *Client, uc *net.UnixConn, h uint32) (sent int) {
	t.Helper()
	stats := &srv.stats
	in0, out0 := stats.requestsIn.Load(), stats.repliesOut.Load()
	submit := func() {
		sent++
		if sent >= MaxInflight {
			t.Fatalf("%d requests did not fill the daemon's socket with replies", sent)
		}
		if err := c.Submit([]Request{{Tag: uint64(sent), Op: OpFstat, Handle: h}}); err != nil {
			t.Fatal(err)
		}
	}
	for full := false; !full; {
		submit()
		awaitProgress(t, "the daemon taking a request and sending its reply", 1, func() int64 {
			if stats.requestsIn.Load() != in0+int64(sent) {
				return 0
			}
			if sendBufferFull(uc) {
				full = true
				return 1
			}
			// At least: the replies of the client's calls before may
			// be counted only now.
			if stats.repliesOut.Load() >= out0+int64(sent) {
				return 1
			}
			return 0
		})
	}
	submit()
	awaitProgress(t, "the daemon taking the last request", in0+int64(sent), stats.requestsIn.Load)
	return sent
}

// TestH45bCloseBesideHalfClosedClientThatNeverReads: a socket-framing
// client sends requests and reads none of their replies, which fill its
// socket (the daemon's writer waits on it for good), then shuts down its
// sending side (its end of stream is read: a half-closed client, whose
// session waits for its replies to be delivered). Meanwhile other
// clients (rings and socket framing) are served. The daemon's shutdown
// (Grace an hour) then ends within the watchdog, not the grace period;
// the half-closed client reads every reply the daemon counted sent to
// it, then the daemon's end; and what every client had fsynced (the
// hostile one's too, before) is there after a restart.
func TestH45bCloseBesideHalfClosedClientThatNeverReads(t *testing.T) {
	cfg := testConfig(emuDevice(t), filepath.Join(t.TempDir(), "zf.sock"))
	cfg.Grace = time.Hour
	torn := make(chan string, 16)
	tear := func(_ *conn, reason string) { torn <- reason }
	teardownHook.Store(&tear)
	t.Cleanup(func() { teardownHook.Store(nil); helloHook.Store(nil) })
	d := startDaemon(t, cfg)
	ctx := context.Background()

	good := dial(t, d.socket)
	gh, _, err := good.Open(ctx, "good", OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte("fsynced beside a half-closed client that reads nothing "), 4000)
	half := len(want) / 2
	if _, err := good.WriteAt(ctx, gh, want[:half], 0); err != nil {
		t.Fatal(err)
	}
	if err := good.Fsync(ctx, gh); err != nil {
		t.Fatal(err)
	}
	goodF := dialFraming(t, d.socket)

	// The hostile client; the daemon's end of its socket gets a small
	// send buffer, which a few dozen replies fill (the same state a
	// default one reaches with more of them).
	conns := make(chan *conn, 1)
	hello := func(c *conn) {
		if err := c.uc.SetWriteBuffer(8 << 10); err != nil {
			t.Errorf("set the daemon's send buffer: %v", err)
		}
		conns <- c
	}
	helloHook.Store(&hello)
	bad := dialFraming(t, d.socket)
	helloHook.Store(nil)
	var bc *conn
	select {
	case bc = <-conns:
	case <-time.After(noProgress):
		t.Fatal("the hostile client's hello was not seen")
	}
	bh, _, err := bad.Open(ctx, "bad", OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	wantBad := bytes.Repeat([]byte("the hostile client's own fsynced bytes "), 1000)
	if _, err := bad.WriteAt(ctx, bh, wantBad, 0); err != nil {
		t.Fatal(err)
	}
	if err := bad.Fsync(ctx, bh); err != nil {
		t.Fatal(err)
	}
	sent := h45bFillReplies(t, d.srv, bad, bc.uc, bh)
	shutWrite(t, bad)
	if reason := awaitTorn(t, torn, "after the hostile client shut down its sending side"); reason != reasonClientClosed {
		t.Fatalf("the hostile client's session ended for %q, want %q", reason, reasonClientClosed)
	}

	// The others are served meanwhile.
	if _, err := good.WriteAt(ctx, gh, want[half:], int64(half)); err != nil {
		t.Fatal(err)
	}
	if err := good.Fsync(ctx, gh); err != nil {
		t.Fatal(err)
	}
	fh, _, err := goodF.Open(ctx, "framed", OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("served beside a half-closed client whose replies fill its socket")
	if _, err := goodF.WriteAt(ctx, fh, msg, 0); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if n, err := goodF.ReadAt(ctx, fh, got, 0); n != len(msg) || !bytes.Equal(got, msg) {
		t.Fatalf("read back %q, %v", got[:n], err)
	}
	if err := goodF.Fsync(ctx, fh); err != nil {
		t.Fatal(err)
	}
	good.Close()
	goodF.Close()

	start := time.Now()
	awaitShutdown(t, d)
	t.Logf("shutdown took %v; the hostile client sent %d requests", time.Since(start), sent)

	// Every request was answered (and counted) but the hostile
	// client's that the daemon dropped when it gave that client up.
	stats := &d.srv.stats
	dropped := int(stats.requestsIn.Load() - stats.repliesOut.Load())
	reps := make([]Reply, MaxBatch)
	seen := map[uint64]bool{}
	for {
		k, err := bad.Recv(reps)
		if err != nil {
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("after %d replies the hostile client read %v, want the daemon's end (%v)", len(seen), err, io.ErrUnexpectedEOF)
			}
			break
		}
		for _, r := range reps[:k] {
			if r.Tag < 1 || r.Tag > uint64(sent) || seen[r.Tag] || r.Status != StatusOK {
				t.Fatalf("the hostile client read %+v (tags 1..%d, each once, want %v)", r, sent, StatusOK)
			}
			seen[r.Tag] = true
		}
	}
	if dropped < 1 || len(seen) != sent-dropped {
		t.Fatalf("the hostile client read %d replies of %d requests; the daemon dropped %d (want at least 1, and every other one read)",
			len(seen), sent, dropped)
	}

	cfg.Format = false
	d = startDaemon(t, cfg)
	c := dial(t, d.socket)
	for _, f := range []struct {
		name string
		want []byte
	}{{"good", want}, {"bad", wantBad}, {"framed", msg}} {
		h, size, err := c.Open(ctx, f.name, 0)
		if err != nil || size != int64(len(f.want)) {
			t.Fatalf("%s after the shutdown and a restart: %d bytes, %v; want %d", f.name, size, err, len(f.want))
		}
		got := make([]byte, len(f.want))
		if n, err := c.ReadAt(ctx, h, got, 0); n != len(f.want) || !bytes.Equal(got, f.want) {
			t.Fatalf("%s's fsynced data changed across the shutdown (%d bytes read, %v)", f.name, n, err)
		}
	}
}
