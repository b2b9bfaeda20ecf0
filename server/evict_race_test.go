package server

import (
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// seqpair returns a connected unixpacket pair as the daemon's end and the
// peer's.
func seqpair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	mk := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "sp")
		defer f.Close()
		nc, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return nc.(*net.UnixConn)
	}
	return mk(fds[0]), mk(fds[1])
}

// evictAt serves connection a on a server with MaxConns 1; the hook at
// hookAt (one of hello's test hooks) starts connection b there once,
// which evicts a if a is still greeting. With hello set, a's peer has
// sent a hello first. Cleanup closes the peers and waits for both
// connections to end.
func evictAt(t *testing.T, hookAt *atomic.Pointer[func(*conn)], hello bool) (s *Server, a, apeer, b *net.UnixConn) {
	t.Helper()
	s = New(nil, Options{MaxConns: 1})
	a, apeer = seqpair(t)
	b, bpeer := seqpair(t)
	t.Cleanup(func() {
		apeer.Close()
		bpeer.Close()
		s.connWG.Wait()
	})
	var once sync.Once
	hook := func(c *conn) {
		once.Do(func() { s.start(b) })
	}
	hookAt.Store(&hook)
	t.Cleanup(func() { hookAt.Store(nil) })
	if hello {
		var hb [HelloSize]byte
		h := Hello{Magic: Magic, Version: VersionFraming, Region: 1 << 20}
		h.Encode(hb[:])
		if _, err := apeer.Write(hb[:]); err != nil {
			t.Fatal(err)
		}
	}
	s.start(a)
	return s, a, apeer, b
}

// TestEvictionBeforeHelloStartsClosesTheConnection: with MaxConns 1, a
// second silent connection arrives before the first one's goroutine
// reaches hello and evicts it (out of the greeting set, read deadline
// now). hello's own deadline must not replace the eviction's: before the
// fix the evicted connection stayed open (and out of the greeting set)
// for the whole hello timeout, so silent connections were no longer
// capped at MaxConns.
func TestEvictionBeforeHelloStartsClosesTheConnection(t *testing.T) {
	s, _, apeer, b := evictAt(t, &helloStartHook, false)
	apeer.SetReadDeadline(time.Now().Add(5 * time.Second))
	var buf [64]byte
	_, err := apeer.Read(buf[:])
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("evicted connection still open 5 s after its eviction (hello's %v deadline replaced the eviction's); silent connections held: %d, MaxConns 1", helloTimeout, s.stats.active.Load())
	}
	if ev := s.stats.evicted.Load(); ev != 1 {
		t.Fatalf("evicted %d, want 1", ev)
	}
	s.mu.Lock()
	bGreeting := false
	for g := range s.greeting {
		bGreeting = g.uc == b && len(s.greeting) == 1
	}
	s.mu.Unlock()
	if !bGreeting {
		t.Fatal("the newer connection is not the one greeting")
	}
}

// TestEvictionAfterHelloIsReadServesAndDoesNotCount: a new connection
// (MaxConns 1) arrives once the first one's hello is read. The first is
// a client and is served; nothing was evicted. Before the fix it left
// the greeting set only after this point, so the newcomer "evicted" it:
// the evicted counter said one was, the session carried evicted=true,
// and only hello's clearing of the deadline kept it served.
func TestEvictionAfterHelloIsReadServesAndDoesNotCount(t *testing.T) {
	s, a, apeer, _ := evictAt(t, &helloHook, true)
	apeer.SetReadDeadline(time.Now().Add(5 * time.Second))
	var rb [HelloReplyV2Size]byte
	n, _, _, _, err := apeer.ReadMsgUnix(rb[:], make([]byte, 64))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := ParseHelloReply(rb[:n])
	if err != nil || rep.Status != StatusOK {
		t.Fatalf("hello reply %+v, %v; want OK", rep, err)
	}
	if ev := s.stats.evicted.Load(); ev != 0 {
		t.Fatalf("a client was served, none evicted, but zonefold_server_evicted_connections_total = %d", ev)
	}
	s.mu.Lock()
	for c := range s.conns {
		if c.uc == a && c.evicted.Load() {
			t.Error("the served session carries evicted=true")
		}
	}
	s.mu.Unlock()
}

// TestEvictionBeforeHelloIsTakenInClosesUnserved: the newcomer evicts the
// first connection after its hello was read but before it left the
// greeting set. The eviction wins: the connection is told the daemon is
// at its cap (EUSERS, as docs/protocol.md's Caps promise a client that
// said hello), closed and counted once, and is never served.
func TestEvictionBeforeHelloIsTakenInClosesUnserved(t *testing.T) {
	s, _, apeer, _ := evictAt(t, &helloReadHook, true)
	apeer.SetReadDeadline(time.Now().Add(5 * time.Second))
	var rb [HelloReplyV2Size]byte
	n, err := apeer.Read(rb[:])
	if err != nil {
		t.Fatalf("evicted connection: %v; want a hello reply saying EUSERS", err)
	}
	if rep, err := ParseHelloReply(rb[:n]); err != nil || rep.Status != StatusTooManyClients {
		t.Fatalf("evicted connection's hello reply %+v, %v; want status EUSERS", rep, err)
	}
	_, err = apeer.Read(rb[:])
	if err == nil {
		t.Fatal("evicted connection got a second reply")
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("evicted connection still open 5 s after its eviction")
	}
	if ev := s.stats.evicted.Load(); ev != 1 {
		t.Fatalf("evicted %d, want 1", ev)
	}
	if n := s.sessions.Load(); n != 0 {
		t.Fatalf("%d sessions, want 0: the evicted connection was served", n)
	}
}
