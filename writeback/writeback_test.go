package writeback

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/zonefold/zonefold/cache"
	"github.com/zonefold/zonefold/uring"
)

// holdStore is a Store that completes nothing until told: it counts the
// flushes it holds, so a test sees how many a flusher keeps in flight.
type holdStore struct {
	mu      sync.Mutex
	held    []Pending
	maxHeld int
	calls   chan struct{} // one per WriteExtents
	fail    bool          // complete with an error
}

func (s *holdStore) WriteExtents(_ uint64, _ []cache.Extent, p Pending) error {
	p.Add(1)
	s.mu.Lock()
	s.held = append(s.held, p)
	s.maxHeld = max(s.maxHeld, len(s.held))
	s.mu.Unlock()
	s.calls <- struct{}{}
	return nil
}

// release completes every held flush.
func (s *holdStore) release() {
	s.mu.Lock()
	held := s.held
	s.held = nil
	s.mu.Unlock()
	var err error
	if s.fail {
		err = errors.New("injected write error")
	}
	for _, p := range held {
		p.Done(err)
	}
}

func newTestWriteback(t *testing.T, store Store, cfg Config) (*Writeback, *cache.Cache) {
	t.Helper()
	return newTestWritebackOf(t, store, cfg, cache.Config{Bytes: 8 << 20, DirtyLimit: 6 << 20, BackgroundDirty: 6 << 20})
}

// newTestWritebackOf is newTestWriteback over a cache of ccfg.
func newTestWritebackOf(t *testing.T, store Store, cfg Config, ccfg cache.Config) (*Writeback, *cache.Cache) {
	t.Helper()
	c, err := cache.New(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := uring.New(uring.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.Close()
		c.Close()
	})
	return New(cfg, c, store, r), c
}

// serve completes the store's flushes once it holds releaseAt of them
// (a full window), or when none has come for two seconds (a flusher that
// waits for what it has: the old, unpipelined one), until stop closes.
func (s *holdStore) serve(stop <-chan struct{}, releaseAt int) {
	for {
		select {
		case <-stop:
			return
		case <-s.calls:
			s.mu.Lock()
			n := len(s.held)
			s.mu.Unlock()
			if n >= releaseAt {
				s.release()
			}
		case <-time.After(2 * time.Second):
			s.release()
		}
	}
}

// TestFlushFilePipelines: FlushFile of a file with eight chains of dirty
// data keeps a window of four chains in flight instead of waiting for
// each before building the next, and every byte ends up clean.
func TestFlushFilePipelines(t *testing.T) {
	store := &holdStore{calls: make(chan struct{}, 64)}
	const chain = 256 << 10
	w, c := newTestWriteback(t, store, Config{MaxChain: chain, Window: 4 * chain})
	ctx := context.Background()
	buf := make([]byte, 8*chain)
	if _, err := c.Write(ctx, c.File(1), 0, buf, nil); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go store.serve(stop, 4)
	if err := w.FlushFile(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if d := c.DirtyBytes(); d != 0 {
		t.Errorf("%d bytes still dirty after FlushFile", d)
	}
	if store.maxHeld != 4 {
		t.Errorf("%d flushes in flight at most; want the window's 4", store.maxHeld)
	}
	if s := w.Stats(); s.Flushes != 8 || s.Bytes != 8*chain {
		t.Errorf("stats %+v; want 8 flushes of %d bytes", s, 8*chain)
	}
}

// TestFlushFileFailureStopsAndReports: after a failed chain FlushFile
// starts no more, waits for those in flight, leaves the data dirty and
// returns the error.
func TestFlushFileFailureStopsAndReports(t *testing.T) {
	store := &holdStore{calls: make(chan struct{}, 64), fail: true}
	const chain = 256 << 10
	w, c := newTestWriteback(t, store, Config{MaxChain: chain, Window: 2 * chain})
	ctx := context.Background()
	if _, err := c.Write(ctx, c.File(1), 0, make([]byte, 8*chain), nil); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go store.serve(stop, 2)
	if err := w.FlushFile(ctx, 1); err == nil {
		t.Fatal("FlushFile returned nil after failed writes")
	}
	if d := c.DirtyBytes(); d != 8*chain {
		t.Errorf("%d bytes dirty; want all %d (failed writes stay dirty)", d, 8*chain)
	}
	if s := w.Stats(); s.Flushes != 2 {
		t.Errorf("%d flushes started; want the first window's 2, then none", s.Flushes)
	}
}

// TestRunPipelines: the background flusher, over the threshold, keeps a
// window of chains in flight too.
func TestRunPipelines(t *testing.T) {
	store := &holdStore{calls: make(chan struct{}, 64)}
	const chain = 256 << 10
	w, c := newTestWriteback(t, store, Config{MaxChain: chain, Window: 4 * chain, Background: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := c.Write(ctx, c.File(1), 0, make([]byte, 8*chain), nil); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go store.serve(stop, 4)
	// The flusher must have returned when the test does: a later test
	// sets testHookRound, which it reads (go test -race -count=2
	// reported the race).
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		w.Run(ctx)
	}()
	defer func() {
		cancel()
		<-ran
	}()
	w.Kick()
	// Wait, with a no-progress window, for everything to be written.
	last, lastChange := c.DirtyBytes(), time.Now()
	for d := c.DirtyBytes(); d != 0; d = c.DirtyBytes() {
		if d != last {
			last, lastChange = d, time.Now()
		}
		if time.Since(lastChange) > 10*time.Second {
			t.Fatalf("no progress for 10 s with %d bytes dirty", d)
		}
		time.Sleep(10 * time.Millisecond)
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	if store.maxHeld != 4 {
		t.Errorf("%d flushes in flight at most; want the window's 4", store.maxHeld)
	}
}
