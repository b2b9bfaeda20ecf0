package server

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// goneClientHeldInItsReader serves one client at a cap of one (arrivals
// wait for a place with no time limit), whose reader is held in a write
// (inline) until release, and which has closed its socket: its session
// ends once released. endingHook and leftHook are cleared before the
// server stops.
func goneClientHeldInItsReader(t *testing.T) (socket string, srv *Server, release func()) {
	t.Helper()
	wait0 := slotWait
	slotWait = time.Hour
	t.Cleanup(func() { slotWait = wait0 })
	socket, _, srv = newTestServerEmu(t, Options{MaxConns: 1})
	t.Cleanup(func() { endingHook.Store(nil); leftHook.Store(nil) }) // before the server stops
	a, err := DialSocketFraming(context.Background(), socket, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	release = holdWrite(t, a, "a", 1) // in the reader (inline): it has not read the end
	a.Close()
	return socket, srv, release
}

// TestH44iArrivalAsThePlaceFreesIsLetIn: a connection accepted at the
// cap is refused at once (Server.start) if no session is ending. start
// read the place count as full, then asked ending: a session that ended
// whole in between (its place given back, out of the leaving count and
// out of the hang-up set) was seen by neither, and the arrival was
// refused with a place free. The test lets the session end in between
// (endingHook, in start's call: the gone client's reader, held in a
// write, reads its end and the session gives everything back).
//
// Mutant: start without its second look at the place count; the
// arrival is then refused.
func TestH44iArrivalAsThePlaceFreesIsLetIn(t *testing.T) {
	socket, srv, release := goneClientHeldInItsReader(t)
	ctx := context.Background()
	srv.mu.Lock()
	ended := srv.ended
	srv.mu.Unlock()
	var once sync.Once
	between := func() {
		once.Do(func() {
			release()
			select {
			case <-ended: // a's place given back, a out of leaving
			case <-time.After(noProgress):
				t.Errorf("the gone client's session did not end within %v", noProgress)
			}
		})
	}
	endingHook.Store(&between)
	refused := srv.stats.refused.Load()
	b, err := Dial(ctx, socket, 1<<20)
	if err != nil {
		t.Fatalf("a client arriving as the only place came free: %v (refused %d), want it let in",
			err, srv.stats.refused.Load()-refused)
	}
	b.Close()
}

// TestH44iWaiterSeesOneThatLeftBeforeEndedCloses: an arrival at the cap
// (awaitEnd) that finds the place taken asks ending; if none is, it is
// refused unless ended (read before it tried) has closed meanwhile. A
// session's end leaves the leaving count and then closes ended (under
// Server.mu, which the arrival does not take for either look): an
// arrival whose ending looked between the two saw the session neither
// leaving nor ended, and was refused with the place already given back.
// The test puts the arrival's look there: in its ending (endingHook,
// its second call: the first is Server.start's), the gone client's
// reader, held in a write until then, reads its end, and the session
// ends up to leftHook (left the leaving count, ended not closed), which
// holds until the arrival has been refused or has taken the place.
//
// Mutant: awaitEnd without trying take again when none is ending; the
// arrival is then refused.
func TestH44iWaiterSeesOneThatLeftBeforeEndedCloses(t *testing.T) {
	socket, srv, release := goneClientHeldInItsReader(t)
	ctx := context.Background()
	refused := srv.stats.refused.Load()
	atLeft := make(chan struct{})
	var leftOnce sync.Once
	left := func(*conn) {
		leftOnce.Do(func() {
			close(atLeft)
			// Until the arrival is refused or has its place.
			deadline := time.Now().Add(noProgress)
			for srv.stats.refused.Load() == refused && srv.sessions.Load() == 0 {
				if time.Now().After(deadline) {
					t.Errorf("the arrival neither was refused nor took the place within %v", noProgress)
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	leftHook.Store(&left)
	var calls atomic.Int64
	between := func() {
		if calls.Add(1) != 2 {
			return
		}
		release()
		select {
		case <-atLeft:
		case <-time.After(noProgress):
			t.Errorf("the gone client's session did not end within %v", noProgress)
		}
	}
	endingHook.Store(&between)
	b, err := Dial(ctx, socket, 1<<20)
	if err != nil {
		t.Fatalf("a client waiting at the cap as the only session ended: %v (refused %d), want it let in",
			err, srv.stats.refused.Load()-refused)
	}
	b.Close()
	if n := calls.Load(); n < 2 {
		t.Fatalf("ending was called %d times, want the arrival's look in awaitEnd (its second)", n)
	}
}
