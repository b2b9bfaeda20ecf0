package server

import (
	"context"
	"sync"
	"testing"
	"time"
)

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
	wait0 := slotWait
	slotWait = time.Hour
	t.Cleanup(func() { slotWait = wait0 })
	socket, _, srv := newTestServerEmu(t, Options{MaxConns: 1})
	t.Cleanup(func() { endingHook.Store(nil) }) // before the server stops
	ctx := context.Background()
	a, err := DialSocketFraming(ctx, socket, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	release := holdWrite(t, a, "a", 1) // in the reader (inline): it has not read the end
	a.Close()
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
