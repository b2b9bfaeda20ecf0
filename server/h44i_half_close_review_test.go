package server

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// holdOpsUntilCanceled makes every request of op wait, as a slow device
// or a throttled write does, until release or until the context of the
// connection it runs for is canceled (the engine's waits take that
// context): the connection is the last one whose hello was read
// (helloHook) before the request came.
func holdOpsUntilCanceled(t *testing.T, op Op) (held <-chan struct{}, release func()) {
	t.Helper()
	var last atomic.Pointer[conn]
	hello := func(c *conn) { last.Store(c) }
	helloHook.Store(&hello)
	h := make(chan struct{}, 64)
	rel := make(chan struct{})
	hook := func(q *Request, _ *Reply) {
		if q.Op != op {
			return
		}
		// Whose it is, before the test goes on (held) and another
		// client says hello.
		var done <-chan struct{}
		if c := last.Load(); c != nil {
			done = c.ctx.Done()
		}
		h <- struct{}{}
		select {
		case <-rel:
		case <-done:
		}
	}
	execHook.Store(&hook)
	var once sync.Once
	release = func() { once.Do(func() { close(rel) }) }
	t.Cleanup(func() { release(); execHook.Store(nil); helloHook.Store(nil) })
	return h, release
}

// TestH44iHalfClosedClientThatThenGoesIsCanceled: a client that shut
// down its sending side and then goes for good (closes its socket, or
// is killed: the kernel closes it the same way) while its fsync still
// runs is a client gone: what it left running is canceled, as for any
// client that closes, and its place comes free for a client waiting at
// the cap. The teardown decided "half-closed, let it run" once, at the
// end of stream, and then only waited: nothing canceled the fsync (with
// rings the daemon never sends on the socket, with socket framing it
// sends nothing while the fsync runs), so the gone client's fsync, a
// throttled write or a slow device's sync, ran for nobody, and the
// client at the cap waited for as long as it ran, up to slotWait, to be
// refused then for a client already gone.
func TestH44iHalfClosedClientThatThenGoesIsCanceled(t *testing.T) {
	wait0 := slotWait
	slotWait = time.Hour // the wait ends by the session's end, not by its time limit
	t.Cleanup(func() { slotWait = wait0 })
	for _, tc := range halfCloseFramings {
		t.Run(tc.name, func(t *testing.T) {
			// The fsync is never released but by the test's cleanup:
			// only its cancellation ends it.
			a, socket, srv, _, _, torn, waiting := halfCloseSetup(t, tc.dial, holdOpsUntilCanceled)
			ctx := context.Background()
			canceled := srv.stats.canceled.Load()
			shutWrite(t, a)
			awaitTorn(t, torn, "after the client shut down its sending side")
			// Gone for good: a close with no shutdown before it, as the
			// kernel closes the socket of a client killed with SIGKILL.
			if err := a.uc.Close(); err != nil {
				t.Fatal(err)
			}
			// The place comes free (at once, or once the client waited
			// for it: either is right).
			dialed := make(chan error, 1)
			go func() {
				b, err := Dial(ctx, socket, 1<<20)
				if err == nil {
					b.Close()
				}
				dialed <- err
			}()
			select {
			case err := <-dialed:
				if err != nil {
					t.Fatalf("a client at the cap after the half-closed one went: %v, want it let in", err)
				}
			case <-time.After(noProgress):
				t.Fatalf("a client at the cap after the half-closed one went, its fsync running, was not let in within %v (waited for its place: %v)",
					noProgress, len(waiting) > 0)
			}
			awaitNoConnections(t, srv)
			if got := srv.stats.canceled.Load() - canceled; got != 1 {
				t.Fatalf("the fsync a half-closed client left running when it went: %d requests canceled, want 1", got)
			}
		})
	}
}

// TestH44iHalfClosingFloodGivesEveryPlaceBack: clients that connect at
// once, well past the cap, each with a request in flight, and shut down
// their sending side (some then close at once, some read their replies
// to the daemon's end first) leave nothing held: no place, no leaving
// count, no waiter, no shared memory, and a client afterwards is let
// in.
func TestH44iHalfClosingFloodGivesEveryPlaceBack(t *testing.T) {
	const maxConns, clients = 3, 24
	socket, _, srv := newTestServerEmu(t, Options{MaxConns: maxConns})
	ctx := context.Background()
	var wg sync.WaitGroup
	var in atomic.Int64
	for i := range clients {
		dial := halfCloseFramings[i%2].dial
		wg.Go(func() {
			c, err := dial(ctx, socket, 1<<20)
			if err != nil {
				if !errors.Is(err, StatusTooManyClients) {
					t.Errorf("client %d: %v (want it let in or refused with %v)", i, err, StatusTooManyClients)
				}
				return
			}
			defer c.Close()
			in.Add(1)
			if err := c.Submit([]Request{{Tag: 1, Op: OpFsync}}); err != nil {
				t.Errorf("client %d: submit: %v", i, err)
				return
			}
			shutWrite(t, c)
			if i%3 == 0 {
				return // gone at once: its fsync is canceled or answered
			}
			reps := make([]Reply, MaxBatch)
			if k, err := c.Recv(reps); err != nil || k != 1 || reps[0].Status != StatusOK {
				t.Errorf("client %d, half-closed: its fsync answered %+v (%d replies), %v; want %v", i, reps[0], k, err, StatusOK)
				return
			}
			if _, err := c.Recv(reps); !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("client %d: after its last reply it read %v, want the daemon's end (%v)", i, err, io.ErrUnexpectedEOF)
			}
		})
	}
	wg.Wait()
	if in.Load() == 0 {
		t.Fatal("no client of the flood was let in")
	}
	awaitNoConnections(t, srv)
	if s, l, w, m := srv.sessions.Load(), srv.leaving.Load(), srv.awaiting.Load(), srv.shm.Load(); s != 0 || l != 0 || w != 0 || m != 0 {
		t.Fatalf("after the flood: %d places held, %d leaving, %d waiting, %d bytes of shared memory; want none", s, l, w, m)
	}
	c, err := Dial(ctx, socket, 1<<20)
	if err != nil {
		t.Fatalf("a client after the flood: %v", err)
	}
	c.Close()
}
