package server

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"
)

// capRace is a server at a cap of one place whose arrivals' waits
// (awaitEndHook) are told on waiting and end only by what they wait for
// (slotWait is an hour), and whose connections stop, once served
// (servedHook: their socket closed, their place not yet given back),
// until let is closed; served tells each.
type capRace struct {
	socket  string
	waiting chan struct{}
	served  chan *conn
	let     func()
}

func newCapRace(t *testing.T) *capRace {
	t.Helper()
	r := &capRace{waiting: make(chan struct{}, 16), served: make(chan *conn, 16)}
	wait := func() { r.waiting <- struct{}{} }
	awaitEndHook.Store(&wait)
	letCh := make(chan struct{})
	var once sync.Once
	r.let = func() { once.Do(func() { close(letCh) }) }
	served := func(c *conn) {
		r.served <- c
		<-letCh
	}
	servedHook.Store(&served)
	wait0 := slotWait
	slotWait = time.Hour
	t.Cleanup(func() { slotWait = wait0 }) // once the server has stopped
	r.socket, _, _ = newTestServerEmu(t, Options{MaxConns: 1})
	// Before the server stops (cleanups run last first).
	t.Cleanup(func() {
		r.let()
		awaitEndHook.Store(nil)
		servedHook.Store(nil)
		endingHook.Store(nil)
		teardownHook.Store(nil)
		helloHook.Store(nil)
	})
	return r
}

// awaitServed waits for a connection's serve to return (servedHook).
func (r *capRace) awaitServed(t *testing.T, what string) {
	t.Helper()
	select {
	case <-r.served:
	case <-time.After(noProgress):
		t.Fatalf("%s: its connection's serve did not return within %v", what, noProgress)
	}
}

// arrivalWaits is the package's arrivalWaits on r's server; once the
// client waits, the connection there ends (free), and its serve returns
// (let).
func (r *capRace) arrivalWaits(t *testing.T, what string, free func()) {
	t.Helper()
	arrivalWaits(t, r.socket, r.waiting, what, func() { free(); r.let() })
}

// arrivalWaits dials a client at the cap of the daemon on socket, which
// must wait for the place of an ending session (told on waiting, from
// awaitEndHook), and, once it waits, lets that session end (free): the
// client must be let in.
func arrivalWaits(t *testing.T, socket string, waiting <-chan struct{}, what string, free func()) {
	t.Helper()
	dialed := make(chan error, 1)
	go func() {
		c, err := Dial(context.Background(), socket, 1<<20)
		if err == nil {
			c.Close()
		}
		dialed <- err
	}()
	select {
	case err := <-dialed:
		free()
		t.Fatalf("%s: a client at the cap got %v at once (want it to wait for the ending session's place)", what, err)
	case <-waiting:
	case <-time.After(noProgress):
		t.Fatalf("%s: a client at the cap did not wait for the ending session's place within %v", what, noProgress)
	}
	free()
	select {
	case err := <-dialed:
		if err != nil {
			t.Fatalf("%s: the ending session gave its place back, and the waiting client got %v", what, err)
		}
	case <-time.After(noProgress):
		t.Fatalf("%s: the waiting client was not let in within %v of the place coming free", what, noProgress)
	}
}

// holdWrite opens name on c (creating it) and has c write the first n
// bytes of its region to it, held in the daemon's exec (holdOps) until
// release.
func holdWrite(t *testing.T, c *Client, name string, n uint32) (release func()) {
	t.Helper()
	h, _, err := c.Open(context.Background(), name, OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	held, release := holdOps(t, OpWrite)
	if err := c.Submit([]Request{{Tag: 1, Op: OpWrite, Handle: h, Len: n}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(noProgress):
		t.Fatalf("a write did not reach the daemon's exec within %v", noProgress)
	}
	return release
}

// TestH44cEndingSeesOneThatClosedBetweenItsLooks: a connection is seen
// ending (Server.ending) by its client's hang-up (Server.hangups) until
// its socket closes, and by the leaving count from just before that
// (markEnding) until its place is given back. ending looked at leaving,
// then at hangups: a connection that went from the one to the other
// between the two looks was seen in neither, and a client arriving at
// the cap was refused for a place about to come free. The test makes
// that happen in between (endingHook): the hung-up client's reader,
// held in a write until then, reads its end and the session ends up to
// the return of its serve (servedHook), its place not yet given back.
//
// Mutant: ending without its second look at leaving, after the epoll
// call; the arrival is then refused at once.
func TestH44cEndingSeesOneThatClosedBetweenItsLooks(t *testing.T) {
	r := newCapRace(t)
	ctx := context.Background()
	a, err := DialSocketFraming(ctx, r.socket, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	release := holdWrite(t, a, "a", 1) // in the reader (inline): it has not read what follows
	a.Close()
	var once sync.Once
	between := func() {
		once.Do(func() {
			release()
			r.awaitServed(t, "the gone client")
		})
	}
	endingHook.Store(&between)
	r.arrivalWaits(t, "a connection that went from hung up to leaving between ending's looks", func() {})
}

// TestH44cHelloFailedAfterItsPlaceCountsEnding: a hello that fails after
// it took its place (here the client went before the hello's reply)
// gives the place back as its connection ends, after its socket has
// closed: only the leaving count (serve's deferred markEnding) says it
// is ending from then. A client arriving at the cap meanwhile must wait
// for that place, not be refused.
//
// Mutant: serve without its deferred markEnding; the arrival is then
// refused at once.
func TestH44cHelloFailedAfterItsPlaceCountsEnding(t *testing.T) {
	r := newCapRace(t)
	uc, err := net.Dial("unixpacket", r.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	var once sync.Once
	gone := func(*conn) { once.Do(func() { uc.Close() }) }
	helloHook.Store(&gone)
	b := make([]byte, HelloSize)
	(&Hello{Magic: Magic, Version: VersionFraming, Region: 1 << 20}).Encode(b)
	if _, err := uc.Write(b); err != nil {
		t.Fatal(err)
	}
	r.awaitServed(t, "the client gone before its hello's reply")
	r.arrivalWaits(t, "a hello that failed after it took its place", func() {})
}

// TestH44cSessionEndedByTheDaemonCountsEnding: a session the daemon ends
// itself (here for a message that is no batch of requests), its client
// still connected, is ending from the moment its reader stops: its
// requests in flight finish, and it gives its place back. Its client
// has not hung up, so only the leaving count (the teardown's
// markEnding) says so: a client arriving at the cap meanwhile must wait
// for that place, not be refused.
//
// Mutant: the teardown without its markEnding (the deferred one, as
// the socket closes, is then the first); the arrival is then refused at
// once.
func TestH44cSessionEndedByTheDaemonCountsEnding(t *testing.T) {
	r := newCapRace(t)
	torn := make(chan string, 4)
	tear := func(_ *conn, reason string) { torn <- reason }
	teardownHook.Store(&tear)
	ctx := context.Background()
	a, err := DialSocketFraming(ctx, r.socket, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	h, _, err := a.Open(ctx, "a", OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	held, release := holdOps(t, OpFsync)
	if err := a.Submit([]Request{{Tag: 1, Op: OpFsync, Handle: h}}); err != nil {
		t.Fatal(err)
	}
	<-held // in a worker: the reader reads on
	if _, err := a.uc.Write([]byte("not a batch")); err != nil {
		t.Fatal(err)
	}
	if reason := awaitTorn(t, torn, "after a message that is no batch"); reason != "bad framing" {
		t.Fatalf("the session's reader stopped for %q, want bad framing", reason)
	}
	r.arrivalWaits(t, "a session the daemon ended, its client connected", release)
}
