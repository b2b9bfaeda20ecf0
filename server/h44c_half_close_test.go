package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// halfCloseWrite is the size of the write a half-closing client makes
// before its fsync.
const halfCloseWrite = 128 << 10

// halfCloseFramings are the two framings a half-closing client is
// tested with.
var halfCloseFramings = []struct {
	name string
	dial func(context.Context, string, int) (*Client, error)
}{
	{"socket-framing", DialSocketFraming},
	{"rings", Dial},
}

// halfCloseSetup serves one client at a cap of one (dialed with dial),
// which writes halfCloseWrite bytes to "half" and asks for an fsync of
// it, held in a worker (a worker runs every fsync: the reader goes on
// to read what the client sends next) by hold (holdOps, or
// holdOpsUntilCanceled); it returns with the client, the
// server, the data written, what releases the fsync, and the channels
// that tell which sessions' readers stopped (teardownHook) and which
// arrivals waited for a place (awaitEndHook).
func halfCloseSetup(t *testing.T, dial func(context.Context, string, int) (*Client, error),
	hold func(*testing.T, Op) (<-chan struct{}, func())) (a *Client, socket string, srv *Server, data []byte,
	release func(), torn <-chan string, waiting <-chan struct{}) {
	t.Helper()
	tornCh := make(chan string, 16)
	tear := func(_ *conn, reason string) { tornCh <- reason }
	teardownHook.Store(&tear)
	waitCh := make(chan struct{}, 16)
	wait := func() { waitCh <- struct{}{} }
	awaitEndHook.Store(&wait)
	t.Cleanup(func() { teardownHook.Store(nil); awaitEndHook.Store(nil) })
	socket, _, srv = newTestServerEmu(t, Options{MaxConns: 1})
	held, release := hold(t, OpFsync) // before the client's hello: holdOpsUntilCanceled watches it
	ctx := context.Background()
	a, err := dial(ctx, socket, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	data = heldFsync(t, a, "half", held)
	return a, socket, srv, data, release, tornCh, waitCh
}

// heldFsync has a write halfCloseWrite bytes to name (creating it) and
// ask for an fsync of it (tag 7), and waits for the fsync to be held
// (held, of holdOps or holdOpsUntilCanceled); it returns the data.
func heldFsync(t *testing.T, a *Client, name string, held <-chan struct{}) []byte {
	t.Helper()
	ctx := context.Background()
	h, _, err := a.Open(ctx, name, OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, halfCloseWrite)
	for i := range data {
		data[i] = byte(i*7 + i>>9)
	}
	if _, err := a.WriteAt(ctx, h, data, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Submit([]Request{{Tag: 7, Op: OpFsync, Handle: h}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(noProgress):
		t.Fatalf("the fsync did not reach the daemon's exec within %v", noProgress)
	}
	return data
}

// shutWrite shuts down c's sending side: c still reads.
func shutWrite(t *testing.T, c *Client) {
	t.Helper()
	if err := unix.Shutdown(ClientSocketFD(c), unix.SHUT_WR); err != nil {
		t.Fatalf("shutdown(SHUT_WR) of the client's socket: %v", err)
	}
}

// awaitTorn waits for a session's reader to stop, and returns why.
func awaitTorn(t *testing.T, torn <-chan string, what string) string {
	t.Helper()
	select {
	case reason := <-torn:
		return reason
	case <-time.After(noProgress):
		t.Fatalf("%s: the daemon did not read the client's end of stream within %v", what, noProgress)
		return ""
	}
}

// awaitNoConnections waits for every connection of srv to end.
func awaitNoConnections(t *testing.T, srv *Server) {
	t.Helper()
	deadline := time.Now().Add(noProgress)
	for srv.Connections() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still open %v after their clients went", srv.Connections(), noProgress)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestH44cHalfClosedClientIsAnsweredAndKeepsItsPlace: a client that
// shuts down only its sending side (shutdown(SHUT_WR): it has sent its
// last request and waits for the replies) is still a client. The daemon
// read its end of stream as a client gone: it canceled the requests
// still running (the fsync it waited for was answered ECANCELED) and
// counted the session as ending, so that a client arriving at the cap
// waited for its place (for as long as the requests ran, up to
// slotWait, to be refused then) instead of being told at once. Now its requests run to their end
// and their replies reach it intact, then the daemon closes; a client
// at the cap meanwhile is refused at once, without a wait; once the
// half-closed client's session has ended its place is free.
func TestH44cHalfClosedClientIsAnsweredAndKeepsItsPlace(t *testing.T) {
	for _, tc := range halfCloseFramings {
		t.Run(tc.name, func(t *testing.T) {
			a, socket, srv, data, release, torn, waiting := halfCloseSetup(t, tc.dial, holdOps)
			ctx := context.Background()
			shutWrite(t, a)
			awaitTorn(t, torn, "after the client shut down its sending side")
			b, err := Dial(ctx, socket, 1<<20)
			if err == nil {
				b.Close()
				t.Fatal("a client was let in beside the half-closed one at a cap of one")
			}
			if !errors.Is(err, StatusTooManyClients) {
				t.Fatalf("a client at the cap beside a half-closed one: %v, want %v", err, StatusTooManyClients)
			}
			if len(waiting) != 0 {
				t.Error("a client at the cap waited for the place of a client that only shut down its sending side (want it refused at once)")
			}
			release()
			reps := make([]Reply, MaxBatch)
			k, err := a.Recv(reps)
			if err != nil {
				t.Fatalf("the half-closed client's reply: %v", err)
			}
			if k != 1 || reps[0].Tag != 7 || reps[0].Status != StatusOK {
				t.Fatalf("the half-closed client's fsync was answered %+v (of %d replies), want tag 7, %v", reps[0], k, StatusOK)
			}
			if _, err := a.Recv(reps); !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("after its last reply the half-closed client read %v, want the daemon's end (%v)", err, io.ErrUnexpectedEOF)
			}
			a.Close()
			awaitNoConnections(t, srv)
			c, err := Dial(ctx, socket, 1<<20)
			if err != nil {
				t.Fatalf("the half-closed client's session ended, and the next client got %v", err)
			}
			defer c.Close()
			h, size, err := c.Open(ctx, "half", 0)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]byte, halfCloseWrite)
			if n, err := c.ReadAt(ctx, h, got, 0); err != nil || n != halfCloseWrite || size != halfCloseWrite || !bytes.Equal(got, data) {
				t.Fatalf("the half-closed client's write read back: size %d, %d bytes, %v, equal %v (want %d bytes as written)",
					size, n, err, bytes.Equal(got, data), halfCloseWrite)
			}
		})
	}
}

// TestH44cHalfClosedClientThatThenClosesIsWaitedFor: a half-closed
// client holds its place while its requests run; once it closes its
// socket for good it is a client gone (its hang-up, Server.hangups),
// and a client arriving at the cap waits for its place and is let in
// when its session ends, as for any client that left.
func TestH44cHalfClosedClientThatThenClosesIsWaitedFor(t *testing.T) {
	wait0 := slotWait
	slotWait = time.Hour // the wait ends by the session's end, not by its time limit
	t.Cleanup(func() { slotWait = wait0 })
	a, socket, _, _, release, torn, waiting := halfCloseSetup(t, DialSocketFraming, holdOps)
	shutWrite(t, a)
	awaitTorn(t, torn, "after the client shut down its sending side")
	a.Close()
	arrivalWaits(t, socket, waiting, "after the half-closed client closed its socket", release)
}

// TestH44cClosedClientsRequestsAreStillCanceled: a client that closes
// its socket (the Go client shuts down both sides first), unlike one
// that shuts down only its sending side, is gone: the requests it left
// running are canceled, not run for nobody.
func TestH44cClosedClientsRequestsAreStillCanceled(t *testing.T) {
	for _, tc := range halfCloseFramings {
		t.Run(tc.name, func(t *testing.T) {
			a, _, srv, _, release, torn, _ := halfCloseSetup(t, tc.dial, holdOps)
			canceled := srv.stats.canceled.Load()
			a.Close()
			awaitTorn(t, torn, "after the client closed")
			release()
			awaitNoConnections(t, srv)
			if got := srv.stats.canceled.Load() - canceled; got != 1 {
				t.Fatalf("the fsync a closed client left running: %d requests canceled, want 1", got)
			}
		})
	}
}
