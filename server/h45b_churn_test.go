package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// h45bChurn opens and closes one connection of kind i%5 on socket, as a
// client that goes fast does: it reports whether the daemon let it in
// and an error for anything but that or a refusal at the cap (or a full
// listen backlog).
func h45bChurn(ctx context.Context, socket string, i int) (bool, error) {
	switch i % 5 {
	case 0, 4: // no hello, or a hello cut short, then gone
		uc, err := net.Dial("unixpacket", socket)
		if err != nil {
			return false, ignoreBacklog(err)
		}
		if i%5 == 4 {
			uc.Write(make([]byte, HelloSize/2))
		}
		return false, uc.Close()
	}
	dial := Dial
	if i%2 == 0 {
		dial = DialSocketFraming
	}
	c, err := dial(ctx, socket, 128<<10)
	if err != nil {
		if errors.Is(err, StatusTooManyClients) || evicted(err) {
			return false, nil
		}
		return false, ignoreBacklog(err)
	}
	defer c.Close()
	// Requests in flight, never read: an fsync (a worker runs it) and a
	// batch of nops (the reader does).
	reqs := []Request{{Tag: 1, Op: OpFsync}, {Tag: 2, Op: OpNop}, {Tag: 3, Op: OpNop}}
	if err := c.Submit(reqs); err != nil {
		return true, err
	}
	switch i % 5 {
	case 1: // Close: shuts down both sides, then closes
	case 2: // gone, as a killed process's socket closes
		c.uc.Close()
	case 3: // half-closed, then gone
		if err := c.uc.CloseWrite(); err != nil {
			return true, err
		}
	}
	return true, nil
}

// evicted says whether a dial's error is the daemon closing a connection
// whose hello it had not read: at its cap on connections still to say
// hello, the daemon evicts the oldest, and a connection whose hello has
// not come within evictedHelloWait is closed unanswered. A worker
// stalled that long between its connect and its hello (a loaded machine
// under -race) is evicted, as the daemon is meant to do.
func evicted(err error) bool {
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}

// ignoreBacklog is nil for a connect refused because the listen backlog
// is full (EAGAIN on a Unix socket), err otherwise.
func ignoreBacklog(err error) error {
	if errors.Is(err, syscall.EAGAIN) {
		return nil
	}
	return err
}

// TestH45bThousandsOfConnectionsOpenedAndClosedFast: thousands of
// connections, from several goroutines at once, each gone within a few
// calls: some with no hello or half a hello, some with requests in
// flight that they close on (Close), drop (a close with no shutdown, as
// a killed client's) or half-close first, at a cap of 8 clients (a
// client at the cap is refused, or waits for the place of one ending). A
// client that holds a place meanwhile is served throughout; afterwards
// nothing is held (no place but its own, no leaving count, no waiter,
// no greeting connection, its region's memory only), and shutdown,
// with a grace period of an hour, ends within the watchdog.
func TestH45bThousandsOfConnectionsOpenedAndClosedFast(t *testing.T) {
	// Fewer workers than the cap on connections still to say hello
	// (MaxConns). That does not keep evictions away: a connection
	// closed with no hello stays in the greeting set until its
	// goroutine reads its end, and on a loaded machine eight of them
	// pile up (0 to 4 evictions a run under -race, h45i). A connection
	// with a hello evicted is answered EUSERS (a refusal here) if its
	// hello is there or comes within evictedHelloWait; one stalled
	// longer than that between its connect and its hello is closed
	// unanswered (evicted), which is the daemon's to do, not a failure.
	const conns, workers = 2000, 4
	watches := hangupWatches()
	socket, _, srv, stop := newTestServerEmuStop(t, Options{MaxConns: 8, Grace: time.Hour})
	ctx := context.Background()
	good, err := Dial(ctx, socket, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	shm := srv.SharedMemory()
	h, _, err := good.Open(ctx, "good", OpenCreate)
	if err != nil {
		t.Fatal(err)
	}

	var next, in atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1))
				if i > conns {
					return
				}
				ok, err := h45bChurn(ctx, socket, i)
				if ok {
					in.Add(1)
				}
				if err != nil {
					t.Errorf("connection %d (kind %d): %v", i, i%5, err)
					return
				}
			}
		})
	}
	churned := make(chan struct{})
	go func() { wg.Wait(); close(churned) }()
	msg := []byte("served while thousands of connections come and go")
	got := make([]byte, len(msg))
	rounds := 0
	for done := false; !done; rounds++ {
		select {
		case <-churned:
			done = true
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, noProgress)
		_, err := good.WriteAt(cctx, h, msg, int64(rounds%64*len(msg)))
		if err == nil {
			_, err = good.ReadAt(cctx, h, got, int64(rounds%64*len(msg)))
		}
		if err == nil && rounds%16 == 0 {
			err = good.Fsync(cctx, h)
		}
		cancel()
		if err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("the client holding a place, round %d: %v, read %q", rounds, err, got)
		}
	}
	t.Logf("%d connections, %d let in; %d rounds of the client holding a place", conns, in.Load(), rounds)
	if in.Load() == 0 {
		t.Fatal("no connection was let in")
	}

	awaitProgress(t, "the churned connections' end", 1, func() int64 {
		if srv.Connections() == 1 {
			return 1
		}
		return 0
	})
	srv.mu.Lock()
	greeting := len(srv.greeting)
	srv.mu.Unlock()
	if s, l, w, m := srv.sessions.Load(), srv.leaving.Load(), srv.awaiting.Load(), srv.SharedMemory(); s != 1 || l != 0 || w != 0 || m != shm || greeting != 0 {
		t.Fatalf("after the churn: %d places held, %d leaving, %d waiting, %d greeting, %d bytes of shared memory; want 1, 0, 0, 0, %d",
			s, l, w, greeting, m, shm)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	awaitServe(t, stopped, "after the churn (the grace period is an hour)")
	noHangupWatchLeft(t, watches)
}
