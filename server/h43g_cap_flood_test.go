package server

import (
	"context"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestH43gArrivalAtCapCostsNoPollPerConnection: at the cap, a client
// is let wait only if a connection is ending (awaitEnd), and whether
// one is was learned by polling every open connection's socket, one
// system call each, for every arrival: with 1024 sessions open, a flood
// of connections (each refused) held the accept loop ~15 ms per
// arrival on the project's test machine, 64 arrivals a second where it
// refused 11,500 before, so the listen backlog filled and a client
// connecting as a place came free found it full for a minute after the
// flood. Learning whether any connection is ending must cost a bounded
// number of system calls per arrival, however many are open.
func TestH43gArrivalAtCapCostsNoPollPerConnection(t *testing.T) {
	const n, arrivals = 32, 40
	socket, _, srv := newTestServerEmu(t, Options{MaxConns: n})
	ctx := context.Background()
	for range n {
		c, err := Dial(ctx, socket, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	refused := srv.stats.refused.Load()
	before := hupSyscalls.Load()
	for range arrivals {
		uc, err := net.Dial("unixpacket", socket)
		if err != nil {
			t.Fatal(err)
		}
		uc.Close()
	}
	deadline := time.Now().Add(noProgress)
	for srv.stats.refused.Load() < refused+arrivals {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d arrivals at the cap refused within %v", srv.stats.refused.Load()-refused, arrivals, noProgress)
		}
		time.Sleep(time.Millisecond)
	}
	if got := hupSyscalls.Load() - before; got > 2*arrivals {
		t.Fatalf("%d arrivals at a cap of %d sessions cost %d system calls to learn whether one is ending (want at most %d: a bounded number per arrival)",
			arrivals, n, got, 2*arrivals)
	}
}

// TestH43gEndingSeesAHangUpNotYetRead: Server.ending learns from one
// epoll instance (Server.hangups) that a client holding a place has
// hung up, before anything reads its end; not the waiting connection's
// own client (self), and no socket once its connection closed it, even
// one that now has its descriptor's number.
func TestH43gEndingSeesAHangUpNotYetRead(t *testing.T) {
	s := New(nil, Options{MaxConns: 4})
	if s.hangups == nil {
		t.Fatal("New made no epoll instance (epoll_create1 failed): the test cannot check what ending sees")
	}
	t.Cleanup(func() { s.hangups.Close() })
	pair := func() (daemon *net.UnixConn, client *os.File) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		f := os.NewFile(uintptr(fds[0]), "daemon end")
		defer f.Close()
		fc, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return fc.(*net.UnixConn), os.NewFile(uintptr(fds[1]), "client end")
	}
	ua, pa := pair()
	ub, pb := pair()
	defer pb.Close()
	defer ub.Close()
	a, b := newConn(s, ua), newConn(s, ub)
	s.watchHangup(a)
	s.watchHangup(b)
	if s.ending(nil) {
		t.Fatal("a connection is ending before any client hung up")
	}
	pa.Close()
	if !s.ending(nil) || !s.ending(b) {
		t.Fatal("a's client hung up, and no connection is ending")
	}
	if s.ending(a) {
		t.Fatal("only a's own client hung up, and a finds another connection ending")
	}
	ua.Close()
	if s.ending(nil) {
		t.Fatal("a's socket is closed, and it is still seen ending")
	}
	// A socket that may get a's descriptor number, its peer gone.
	uc, pc := pair()
	defer uc.Close()
	pc.Close()
	if s.ending(nil) {
		t.Fatal("a socket no connection watched is seen ending (a's closed descriptor reused?)")
	}
}

// TestH43gCapWaitAccountingReturnsToZero: the waits at the cap
// (awaitEnd) in every order they end in (a waiter let in, a second
// waiter for the same place refused at once, a waiter that shutdown
// ends) give back every place, byte of shared memory and count they
// took, and leave no goroutine behind.
func TestH43gCapWaitAccountingReturnsToZero(t *testing.T) {
	waiting := make(chan struct{}, 16)
	hook := func() { waiting <- struct{}{} }
	awaitEndHook.Store(&hook)
	// No wait ends by its time limit here: each ends by what it waits for.
	wait0 := slotWait
	slotWait = time.Hour
	t.Cleanup(func() { awaitEndHook.Store(nil); slotWait = wait0 })
	socket, _, srv, stop := newTestServerEmuStop(t, Options{MaxConns: 1})
	goroutines := runtime.NumGoroutine() // with the engine's and Serve's
	ctx := context.Background()
	// gone dials a client, holds a write of it in the daemon and closes
	// it: its session is ending until release.
	gone := func() (release func()) {
		c, err := Dial(ctx, socket, 0)
		if err != nil {
			t.Fatal(err)
		}
		release = holdWrite(t, c, "f", 1)
		c.Close()
		return release
	}
	dial := func() <-chan *Client {
		got := make(chan *Client, 1)
		go func() {
			c, err := Dial(ctx, socket, 0)
			if err != nil {
				c = nil
			}
			got <- c
		}()
		return got
	}
	wait := func(what string) {
		select {
		case <-waiting:
		case <-time.After(noProgress):
			t.Fatalf("%s: no connection waited for the ending session within %v", what, noProgress)
		}
	}

	refused := func(got <-chan *Client, who string) {
		select {
		case c := <-got:
			if c != nil {
				c.Close()
				t.Fatalf("%s was let in", who)
			}
		case <-time.After(noProgress):
			t.Fatalf("%s was not let go within %v", who, noProgress)
		}
	}

	release := gone()
	first := dial()
	wait("first")
	// As many waiting as there are places: refused at once.
	refused(dial(), "a second client for the one place, one waiting for it already,")
	release()
	b := <-first
	if b == nil {
		t.Fatal("the waiting client was refused once the place came free")
	}
	b.Close()

	release = gone()
	for len(waiting) > 0 { // gone's own client may have waited for b's place
		<-waiting
	}
	shut := dial()
	wait("at shutdown")
	served := make(chan error, 1)
	go func() { served <- stop() }()
	refused(shut, "a client waiting for a place at shutdown")
	release()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if n, m, w, l := srv.sessions.Load(), srv.shm.Load(), srv.awaiting.Load(), srv.leaving.Load(); n|m|w|l != 0 || srv.Connections() != 0 {
		t.Fatalf("after every connection ended: %d places taken, %d bytes of shared memory, %d waiting, %d leaving, %d connections",
			n, m, w, l, srv.Connections())
	}
	deadline := time.Now().Add(noProgress)
	for runtime.NumGoroutine() > goroutines+2 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines a while after the server stopped, %d when it had started:\n%s", runtime.NumGoroutine(), goroutines, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}
