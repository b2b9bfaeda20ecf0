package writeback

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/zonefold/zonefold/cache"
	"github.com/zonefold/zonefold/internal/syncbuf"
)

// fullStore refuses every write with ENOSPC while full is set, as the
// engine does for data that cannot fit, and counts the attempts.
type fullStore struct {
	full  atomic.Bool
	tries atomic.Int64
}

func (s *fullStore) WriteExtents(_ uint64, _ []cache.Extent, _ Pending) error {
	s.tries.Add(1)
	if s.full.Load() {
		return syscall.ENOSPC
	}
	return nil
}

// TestRunWarnsOncePerFailureEpisode: data that cannot fit stays dirty and
// the background flusher retries it on every tick; the daemon logged the
// same WARN on every tick, forever (on a full device, one line every few
// seconds for as long as it ran). It must warn once for the episode, and
// FlushFile (fsync) must still report the error; once writes succeed
// again, a later failure is a new episode and warns again.
//
// The test drives the flusher's rounds itself, one at a time (a kick, then
// the round's end), with the ticker out of the way: a round still running
// when room returned failed after the test's FlushFile began, and that
// FlushFile rightly reported it (about 2 runs in 300 failed so).
func TestRunWarnsOncePerFailureEpisode(t *testing.T) {
	var logged syncbuf.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelInfo})))
	t.Cleanup(func() { slog.SetDefault(old) })
	warns := func() int { return strings.Count(logged.String(), "level=WARN") }
	const succeed = "writes succeed again"

	store := &fullStore{}
	store.full.Store(true)
	// Expire of an hour: the ticker never starts a round during the test.
	w, c := newTestWriteback(t, store, Config{MaxChain: 256 << 10, Window: 1 << 20, Background: 1, Expire: time.Hour})
	ctx, round, _ := runRounds(t, w)

	episode := func(file uint64) {
		t.Helper()
		if _, err := c.Write(ctx, c.File(file), 0, make([]byte, 4096), nil); err != nil {
			t.Fatal(err)
		}
		// Let the flusher retry many times: each round retries once.
		const retries = 20
		start := store.tries.Load()
		for range retries {
			round()
		}
		if n := store.tries.Load() - start; n != retries {
			t.Fatalf("%d writes in %d rounds of the flusher, want one a round", n, retries)
		}
		if err := w.FlushFile(ctx, file); !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("FlushFile of data that cannot fit: %v, want ENOSPC", err)
		}
	}
	episode(1)
	if n := warns(); n != 1 {
		t.Fatalf("%d WARN lines over one episode of failing writeback, want 1:\n%s", n, logged.String())
	}
	// Room again: the data is written, the episode ends.
	store.full.Store(false)
	if err := w.FlushFile(ctx, 1); err != nil {
		t.Fatalf("FlushFile once writes succeed: %v", err)
	}
	if strings.Contains(logged.String(), succeed) {
		t.Fatalf("the episode ended before a round of the flusher:\n%s", logged.String())
	}
	// The flusher's next round fails nothing: the episode ends, said
	// once at info level.
	round()
	round()
	if n := strings.Count(logged.String(), succeed); n != 1 {
		t.Fatalf("%d %q lines after writes succeeded, want 1:\n%s", n, succeed, logged.String())
	}
	store.full.Store(true)
	episode(2)
	if n := warns(); n != 2 {
		t.Fatalf("%d WARN lines over two episodes of failing writeback, want 2:\n%s", n, logged.String())
	}
}

// runRounds runs w's background flusher until the test ends, and
// returns the test's context; round, which runs one whole round of the
// flusher (afterwards the flusher is idle, its kick taken, nothing in
// flight); and ended, which waits for the end of a round already begun. w's
// Config.Expire must be long enough that its ticker starts no round
// during the test.
func runRounds(t *testing.T, w *Writeback) (context.Context, func(), func()) {
	rounds := make(chan struct{})
	testHookRound = func(ctx context.Context) {
		select {
		case rounds <- struct{}{}:
		case <-ctx.Done():
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan struct{})
	go func() { defer close(runDone); w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-runDone
		testHookRound = nil
	})
	ended := func() {
		t.Helper()
		select {
		case <-rounds:
		case <-time.After(time.Minute):
			t.Fatal("the flusher did not finish a round in a minute")
		}
	}
	return ctx, func() { t.Helper(); w.Kick(); ended() }, ended
}

// TestSyncAllErrorSaysHowManyFilesFailed: on a full device the daemon's
// shutdown SyncAll failed for each of 476 files, and its exit line joined
// all 476 errors, ~40 KB of one line. The error must still match each
// cause (errors.Is) and say how many files failed, but name only the
// first few.
func TestSyncAllErrorSaysHowManyFilesFailed(t *testing.T) {
	store := &fullStore{}
	store.full.Store(true)
	w, c := newTestWriteback(t, store, Config{MaxChain: 256 << 10, Window: 1 << 20})
	ctx := context.Background()
	const files = 100
	for f := uint64(1); f <= files; f++ {
		if _, err := c.Write(ctx, c.File(f), 0, make([]byte, 4096), nil); err != nil {
			t.Fatal(err)
		}
	}
	err := w.SyncAll(ctx)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("SyncAll of data that cannot fit: %v, want ENOSPC", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "100 files") {
		t.Errorf("SyncAll's error does not say how many files failed: %q", msg)
	}
	if n := strings.Count(msg, "no space left on device"); n > 3 {
		t.Errorf("SyncAll's error names %d failures (%d bytes), want the first few:\n%s", n, len(msg), msg)
	}
}

// TestRunEndsEpisodeWhenFsyncWritesDuringFailure: a FlushFile that writes
// the data, room having returned, between the end of the flusher's failed
// writeback and the flusher's logging of it, counted as written before the
// failure: the episode never ended ("writes succeed again" never came,
// and the next full device got no WARN, only debug lines).
func TestRunEndsEpisodeWhenFsyncWritesDuringFailure(t *testing.T) {
	var logged syncbuf.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelInfo})))
	t.Cleanup(func() { slog.SetDefault(old) })

	store := &fullStore{}
	store.full.Store(true)
	w, c := newTestWriteback(t, store, Config{MaxChain: 256 << 10, Window: 1 << 20, Background: 1, Expire: time.Hour})
	failing, resume := make(chan struct{}), make(chan struct{})
	testHookFailure = func(ctx context.Context) {
		select {
		case failing <- struct{}{}:
			<-resume
		case <-ctx.Done():
		}
	}
	t.Cleanup(func() { testHookFailure = nil })
	ctx, round, ended := runRounds(t, w)
	// failRound runs a round of the flusher that fails, and runs during
	// while the flusher has ended the failed writeback but not yet logged
	// the failure.
	failRound := func(file uint64, during func()) {
		t.Helper()
		if _, err := c.Write(ctx, c.File(file), 0, make([]byte, 4096), nil); err != nil {
			t.Fatal(err)
		}
		w.Kick()
		<-failing
		during()
		resume <- struct{}{}
		ended()
	}

	failRound(1, func() {
		// Room again; an fsync writes the data (and reports the
		// flusher's failure, which came after the fsync's last report).
		store.full.Store(false)
		if err := w.FlushFile(ctx, 1); !errors.Is(err, syscall.ENOSPC) {
			t.Errorf("FlushFile after the flusher's failure: %v, want its ENOSPC", err)
		}
		if n := c.DirtyBytes(); n != 0 {
			t.Errorf("%d bytes dirty after FlushFile with room, want 0", n)
		}
	})
	// The next round fails nothing: writes succeed again.
	round()
	if !strings.Contains(logged.String(), "writes succeed again") {
		t.Errorf("no \"writes succeed again\" after the data was written and a round failed nothing:\n%s", logged.String())
	}
	store.full.Store(true)
	failRound(2, func() {})
	if n := strings.Count(logged.String(), "level=WARN"); n != 2 {
		t.Errorf("%d WARN lines over two episodes of failing writeback, want 2:\n%s", n, logged.String())
	}
}
