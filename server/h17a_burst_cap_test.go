package server

// docs/protocol.md, Caps: "A client over the connection cap gets status
// EUSERS (87) in its hello reply, if it says hello within 1 s". Clients
// that connect in a burst and say hello at once (fio's numjobs: every
// job connects in its init) are also closed without a word: Server.start
// evicts the oldest connection still in the greeting set for each one
// past MaxConns, though its hello is already in its socket (or read:
// leaveGreeting then says evicted), and closes it unread. The client's
// recv then fails with ECONNRESET: fio prints "Connection reset by peer"
// at "zonefold connect", with no line saying the daemon is at its cap,
// and the daemon logs nothing about it.

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

func TestH17aBurstOverTheCapGetsEUSERS(t *testing.T) {
	cfg := testConfig(emuDevice(t), filepath.Join(t.TempDir(), "zf.sock"))
	cfg.MaxConns = 2
	d := startDaemon(t, cfg)
	for round := 0; round < 20; round++ {
		const n = 12
		var wg sync.WaitGroup
		errs := make([]error, n)
		clients := make([]*Client, n)
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				clients[i], errs[i] = Dial(context.Background(), d.socket, 1<<20)
			})
		}
		close(start)
		wg.Wait()
		served := 0
		for i, err := range errs {
			if err == nil {
				served++
				clients[i].Close()
				continue
			}
			if !errors.Is(err, syscall.EUSERS) && !strings.Contains(err.Error(), "too many users") {
				t.Fatalf("round %d: a client of a burst of %d over a cap of %d: %v; want the hello reply's EUSERS", round, n, cfg.MaxConns, err)
			}
		}
		if served == 0 {
			t.Fatalf("round %d: no client of %d served", round, n)
		}
		awaitProgress(t, "sessions' end", 1, func() int64 {
			if d.connections() == 0 {
				return 1
			}
			return 0
		})
	}
}
