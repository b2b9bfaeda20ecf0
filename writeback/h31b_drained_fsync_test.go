package writeback

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zonefold/zonefold/cache"
)

// gateStore holds every chain until its gate is opened, then completes
// it (with an error while fail is set); it counts the chains.
type gateStore struct {
	mu     sync.Mutex
	held   []Pending
	chains int
	fail   bool
	calls  chan struct{}
}

func (s *gateStore) WriteExtents(_ uint64, _ []cache.Extent, p Pending) error {
	p.Add(1)
	s.mu.Lock()
	s.held = append(s.held, p)
	s.chains++
	s.mu.Unlock()
	s.calls <- struct{}{}
	return nil
}

// complete ends the chains held now, failing them if fail.
func (s *gateStore) complete(fail bool) int {
	s.mu.Lock()
	held := s.held
	s.held = nil
	s.mu.Unlock()
	var err error
	if fail {
		err = errors.New("injected write error")
	}
	for _, p := range held {
		p.Done(err)
	}
	return len(held)
}

// TestH31bFsyncOfAFileFillSkips: the background flusher has a chain of a
// file in flight that took all the file had, so fill skips the file
// (DirtyIdle under MaxChain/minChainDiv) while it dirties more; an
// fsync of the file (FlushFile) then starts its own chain for what fill
// skipped and returns once both are written, with no further kick or
// tick of the flusher. If the flusher's chain fails, the fsync reports
// the failure (the data is dirty again), and the next fsync, on a device
// that works again, writes it back.
func TestH31bFsyncOfAFileFillSkips(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(map[bool]string{false: "chain succeeds", true: "chain fails"}[fail], func(t *testing.T) {
			store := &gateStore{calls: make(chan struct{}, 64)}
			// Expire long: the flusher runs only when kicked (and on
			// a tick that finds nothing expired).
			w, c := newTestWriteback(t, store, Config{MaxChain: 8 << 20, Background: 1, Expire: time.Hour})
			ctx, cancel := context.WithCancel(context.Background())
			ran := make(chan struct{})
			go func() { defer close(ran); w.Run(ctx) }()
			defer func() { cancel(); store.complete(false); <-ran }()
			fh := c.File(1)
			write := func(off int64) {
				t.Helper()
				if _, err := c.Write(context.Background(), fh, off, make([]byte, 8<<10), nil); err != nil {
					t.Fatal(err)
				}
			}
			wait := func(what string) {
				t.Helper()
				select {
				case <-store.calls:
				case <-time.After(20 * time.Second):
					t.Fatalf("after 20 s: no chain for %s", what)
				}
			}
			write(0)
			w.Kick()
			wait("the first write")
			write(64 << 10) // fill skips it: the file's chain in flight took all it had
			w.Kick()
			flushed := make(chan error, 1)
			go func() { flushed <- w.FlushFile(context.Background(), 1) }()
			wait("the fsync")
			// From here the device completes every chain as it comes
			// (failing while failing is set): the flusher may start
			// another of the data a failed chain left dirty, which the
			// fsync then waits for too.
			var failing atomic.Bool
			failing.Store(fail)
			if n := store.complete(fail); n != 2 {
				t.Fatalf("%d chains in flight with the fsync's, want 2 (the flusher's and the fsync's)", n)
			}
			serving := make(chan struct{})
			served := make(chan struct{})
			go func() {
				defer close(served)
				for {
					select {
					case <-store.calls:
						store.complete(failing.Load())
					case <-serving:
						return
					}
				}
			}()
			defer func() { close(serving); <-served }()
			select {
			case err := <-flushed:
				switch {
				case fail && err == nil:
					t.Fatal("fsync returned no error when the chains it waited for failed")
				case !fail && err != nil:
					t.Fatalf("fsync: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("fsync of a file fill skipped did not return within 20 s of its chains' completion")
			}
			if !fail {
				if d := c.DirtyBytes(); d != 0 {
					t.Fatalf("%d bytes dirty after the fsync", d)
				}
				return
			}
			if d := c.DirtyBytes(); d == 0 {
				t.Fatal("nothing dirty after failed chains (dropped?)")
			}
			// The device works again: an fsync writes it all back.
			failing.Store(false)
			go func() { flushed <- w.FlushFile(context.Background(), 1) }()
			select {
			case err := <-flushed:
				if err != nil {
					t.Fatalf("fsync once the device works again: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("fsync once the device works again did not return in 20 s")
			}
			if d := c.DirtyBytes(); d != 0 {
				t.Fatalf("%d bytes dirty after the second fsync", d)
			}
		})
	}
}
