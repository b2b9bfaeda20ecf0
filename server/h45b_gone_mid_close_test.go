package server

import (
	"context"
	"testing"
	"time"
)

// h45bGoneMidClose serves one client (dialed with dial) at a grace
// period of an hour, whose fsync is held until it is canceled
// (holdOpsUntilCanceled); half says whether the client shuts down its
// sending side first (and the daemon has read that end) before shutdown
// begins. Once shutdown has stopped reading the client, the client
// goes for good (a close with no shutdown before it, as the kernel
// closes a killed process's socket). It returns how many requests were
// canceled and whether Serve returned within noProgress.
func h45bGoneMidClose(t *testing.T, dial func(context.Context, string, int) (*Client, error), half bool) (canceled int64) {
	t.Helper()
	watches := hangupWatches()
	torn := make(chan string, 16)
	tear := func(_ *conn, reason string) { torn <- reason }
	teardownHook.Store(&tear)
	conns := make(chan *conn, 4)
	hello := func(c *conn) { conns <- c }
	t.Cleanup(func() { teardownHook.Store(nil); helloHook.Store(nil) })
	socket, _, srv, stop := newTestServerEmuStop(t, Options{Grace: time.Hour})
	held, _ := holdOpsUntilCanceled(t, OpFsync)
	// holdOpsUntilCanceled's own helloHook tells it whose the fsync is;
	// this one tells the test too.
	last := helloHook.Load()
	both := func(c *conn) { (*last)(c); hello(c) }
	helloHook.Store(&both)
	a, err := dial(context.Background(), socket, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	var ac *conn
	select {
	case ac = <-conns:
	case <-time.After(noProgress):
		t.Fatal("no hello seen")
	}
	// Dirty data, so that the fsync, once canceled, has work it does
	// not do (an fsync with nothing to write back succeeds canceled).
	heldFsync(t, a, "gone", held)
	canceled0 := srv.stats.canceled.Load()
	if half {
		shutWrite(t, a)
		if reason := awaitTorn(t, torn, "after the client shut down its sending side"); reason != reasonClientClosed {
			t.Fatalf("the half-closed client's session ended for %q, want %q", reason, reasonClientClosed)
		}
	}
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	if half {
		// Its reader had stopped already: shutdown's mark is all there
		// is to see.
		awaitProgress(t, "shutdown reaching the half-closed session", 1, func() int64 {
			if ac.stopping.Load() {
				return 1
			}
			return 0
		})
		// stopReading is done (a second call waits for the first).
		ac.stopReading()
	} else if reason := awaitTorn(t, torn, "after shutdown began"); reason != "daemon shutting down" {
		t.Fatalf("the session ended for %q, want the daemon's shutdown", reason)
	}
	if err := a.uc.Close(); err != nil {
		t.Fatal(err)
	}
	awaitServe(t, stopped, "of the client going, its fsync still held (the grace period is an hour)")
	noHangupWatchLeft(t, watches)
	return srv.stats.canceled.Load() - canceled0
}

// awaitServe waits for Serve's result on stopped, for noProgress, and
// requires nil; since says since when the wait is counted.
func awaitServe(t *testing.T, stopped <-chan error, since string) {
	t.Helper()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(noProgress):
		t.Fatalf("shutdown did not end within %v %s", noProgress, since)
	}
}

// TestH45bClientGoneMidShutdownIsCanceled: a client that goes for good
// (closes, or is killed) while the daemon shuts down and its request
// still runs is a client gone, as it is at any other time: its request
// is canceled, and shutdown does not wait the grace period for a
// request nobody will be answered. Shutdown stopped reading it (a read
// deadline) and so never read its end; nothing else looked (with rings
// the daemon sends nothing on the socket, with socket framing nothing
// while the request runs), and shutdown waited out the whole grace
// period (10 s by default, at each SIGTERM) for a client already gone.
func TestH45bClientGoneMidShutdownIsCanceled(t *testing.T) {
	for _, tc := range halfCloseFramings {
		t.Run(tc.name, func(t *testing.T) {
			if got := h45bGoneMidClose(t, tc.dial, false); got != 1 {
				t.Fatalf("the fsync of a client gone mid-shutdown: %d requests canceled, want 1", got)
			}
		})
	}
}

// TestH45bHalfClosedClientGoneMidShutdownIsCanceled: the same for a
// client that had shut down its sending side (still a client, whose
// requests run to their end: cancelAtHangup watches for it to go) when
// shutdown began: shutdown's read deadline ended that watch, and the
// client's going then canceled nothing.
func TestH45bHalfClosedClientGoneMidShutdownIsCanceled(t *testing.T) {
	for _, tc := range halfCloseFramings {
		t.Run(tc.name, func(t *testing.T) {
			if got := h45bGoneMidClose(t, tc.dial, true); got != 1 {
				t.Fatalf("the fsync of a half-closed client gone mid-shutdown: %d requests canceled, want 1", got)
			}
		})
	}
}
