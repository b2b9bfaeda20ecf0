package server

import (
	"context"
	"errors"
	"io"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// hangupWatches is how many goroutines run cancelAtHangup now.
func hangupWatches() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "(*conn).cancelAtHangup(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// noHangupWatchLeft fails t if more goroutines run cancelAtHangup than
// before (hangupWatches as the test began): once Serve has returned,
// every session's teardown has waited for its watch. (Counted, not
// required none: a test before may have left a session to the
// process's exit, TestShutdownReturnsWithARequestThatIgnoresCancellation,
// and its watch with it.)
func noHangupWatchLeft(t *testing.T, before int) {
	t.Helper()
	if n := hangupWatches(); n > before {
		t.Fatalf("%d hang-up watches outlived shutdown (%d ran before the test)", n-before, before)
	}
}

// h45iShutdownBeside serves one client (dialed with dial) at a grace
// period of an hour, whose fsync (tag 7, of dirty data) is held until
// released or canceled (holdOpsUntilCanceled); half says whether it
// shuts down its sending side first (and the daemon has read that end).
// It begins the shutdown and returns once watched has been called for
// the client's session (hangupWatchHook), with the client, what
// releases its fsync, Serve's result to come and the count of requests
// canceled before.
func h45iShutdownBeside(t *testing.T, dial func(context.Context, string, int) (*Client, error), half bool,
	watched func(c *conn, cleared bool)) (a *Client, release func(), stopped <-chan error, srv *Server, canceled0 int64) {
	t.Helper()
	watches := hangupWatches()
	t.Cleanup(func() { noHangupWatchLeft(t, watches) })
	torn := make(chan string, 16)
	tear := func(_ *conn, reason string) { torn <- reason }
	teardownHook.Store(&tear)
	t.Cleanup(func() { teardownHook.Store(nil); hangupWatchHook.Store(nil); watchEndHook.Store(nil) })
	socket, _, srv, stop := newTestServerEmuStop(t, Options{Grace: time.Hour})
	held, release := holdOpsUntilCanceled(t, OpFsync)
	a, err := dial(context.Background(), socket, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	heldFsync(t, a, "live", held)
	canceled0 = srv.stats.canceled.Load()
	if half {
		shutWrite(t, a)
		if reason := awaitTorn(t, torn, "after the client shut down its sending side"); reason != reasonClientClosed {
			t.Fatalf("the half-closed client's session ended for %q, want %q", reason, reasonClientClosed)
		}
	}
	hangupWatchHook.Store(&watched)
	stoppedCh := make(chan error, 1)
	go func() { stoppedCh <- stop() }()
	return a, release, stoppedCh, srv, canceled0
}

// h45iFsyncAnswered waits for reached (what), then releases the held
// fsync of a (tag 7) and requires it answered OK: a client still there
// is answered, not canceled.
func h45iFsyncAnswered(t *testing.T, a *Client, reached <-chan struct{}, what string, release func()) {
	t.Helper()
	select {
	case <-reached:
	case <-time.After(noProgress):
		t.Fatalf("no %s within %v", what, noProgress)
	}
	release()
	reps := make([]Reply, MaxBatch)
	k, err := a.Recv(reps)
	if err != nil {
		t.Fatalf("the client's reply: %v", err)
	}
	if k != 1 || reps[0].Tag != 7 || reps[0].Status != StatusOK {
		t.Fatalf("the client's fsync was answered %+v (of %d replies), want tag 7, %v", reps[0], k, StatusOK)
	}
}

// TestH45iLiveClientsRequestsRunOnThroughShutdown: the hang-up watch
// shutdown's sessions now get cancels only for a client that goes. A
// client still there (one that only waits for its reply, or one that
// shut down its sending side and reads on) whose fsync still runs when
// the watch has outlived shutdown's read deadline and watches on is
// answered OK, not ECANCELED, once the fsync ends; nothing is
// canceled; shutdown then ends (the grace period is an hour) and leaves
// no watch behind.
func TestH45iLiveClientsRequestsRunOnThroughShutdown(t *testing.T) {
	for _, tc := range halfCloseFramings {
		for _, half := range []bool{false, true} {
			name := tc.name + "/open"
			if half {
				name = tc.name + "/half-closed"
			}
			t.Run(name, func(t *testing.T) {
				on := make(chan struct{}, 1)
				var during atomic.Int64 // hang-up watches counted from the watch itself
				watched := func(_ *conn, cleared bool) {
					if cleared {
						during.Store(int64(hangupWatches()))
						select {
						case on <- struct{}{}:
						default:
						}
					}
				}
				a, release, stopped, srv, canceled0 := h45iShutdownBeside(t, tc.dial, half, watched)
				h45iFsyncAnswered(t, a, on, "the session's hang-up watch outliving shutdown's read deadline", release)
				if during.Load() < 1 {
					t.Fatalf("hangupWatches counted %d goroutines from within a watch, want at least 1", during.Load())
				}
				reps := make([]Reply, MaxBatch)
				awaitServe(t, stopped, "of the live client's fsync ending")
				if got := srv.stats.canceled.Load() - canceled0; got != 0 {
					t.Fatalf("%d requests of a client still there were canceled during shutdown, want 0", got)
				}
				if _, err := a.Recv(reps); !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("after its last reply the client read %v, want the daemon's end (%v)", err, io.ErrUnexpectedEOF)
				}
			})
		}
	}
}

// TestH45iTeardownEndsTheWatchAsItClearsShutdownsDeadline: the
// teardown ends the watch (watchEnd, then a deadline of now) just
// after the watch woke from stopReading's deadline and before it
// clears that deadline, which then clears the teardown's too. The watch
// must see watchEnd after its clearing and return: were it to watch on,
// with no deadline left and a client that stays, the teardown would
// wait for it for good and shutdown with it.
func TestH45iTeardownEndsTheWatchAsItClearsShutdownsDeadline(t *testing.T) {
	for _, tc := range halfCloseFramings {
		t.Run(tc.name, func(t *testing.T) {
			woke := make(chan struct{})
			ended := make(chan struct{})
			first := true
			watched := func(_ *conn, cleared bool) {
				if cleared || !first {
					return
				}
				first = false
				close(woke)
				select {
				case <-ended:
				case <-time.After(noProgress):
					t.Errorf("the teardown did not end the watch within %v", noProgress)
				}
			}
			endHook := func(*conn) { close(ended) }
			watchEndHook.Store(&endHook)
			a, release, stopped, _, _ := h45iShutdownBeside(t, tc.dial, false, watched)
			// The fsync ends and is answered: the teardown ends the
			// watch while the watch waits to clear the deadline.
			h45iFsyncAnswered(t, a, woke, "shutdown's read deadline waking the session's hang-up watch", release)
			awaitServe(t, stopped, "of the teardown ending the watch (the client stays)")
		})
	}
}
