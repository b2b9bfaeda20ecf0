package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zonefold/zonefold/engine"
)

// TestNamespaceOpsRaceIO runs, through the daemon and with one client
// each, cold readers, writers, fsyncers, truncaters, removers and
// renamers on the same few files, with a cache much smaller than the
// files so that reads go to the device. No request may hang (a watchdog
// dumps every goroutine if the daemon stops answering), each request
// gets an answer that is either success or an error code, and afterwards
// the daemon serves a new client and shuts down cleanly. It runs for at
// least ZONEFOLD_NSRACE_SECONDS (default 2) and until GC has run
// minGCRuns times, so that the namespace changes race GC too; GC that
// has not run that often by a generous cap fails the test.
// ZONEFOLD_NSRACE_SECONDS makes the run longer.
func TestNamespaceOpsRaceIO(t *testing.T) {
	dur := 2 * time.Second
	if s := os.Getenv("ZONEFOLD_NSRACE_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		dur = time.Duration(n) * time.Second
	}
	cfg := testConfig(fmt.Sprintf("emu:%s?zone_size=1M&zones=16", filepath.Join(t.TempDir(), "dev")),
		filepath.Join(t.TempDir(), "zf.sock"))
	cfg.Engine = engine.Config{CacheBytes: 1 << 20, DirtyLimit: 512 << 10}
	d := startDaemon(t, cfg)
	ctx := context.Background()
	const files, fileBytes = 4, 1 << 20
	names := func(i int) string { return fmt.Sprintf("f%d", i) }
	{
		c := dial(t, d.socket)
		buf := make([]byte, fileBytes)
		for i := range files {
			h, _, err := c.Open(ctx, names(i), OpenCreate)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.WriteAt(ctx, h, buf, 0); err != nil {
				t.Fatal(err)
			}
			if err := c.Fsync(ctx, h); err != nil {
				t.Fatal(err)
			}
			c.CloseFile(ctx, h)
		}
	}
	var ops atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	worker := func(seed uint64, step func(c *Client, r *rand.Rand) error) {
		wg.Go(func() {
			c := dial(t, d.socket)
			r := rand.New(rand.NewPCG(seed, 7))
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := step(c, r); err != nil {
					t.Errorf("worker %d: %v", seed, err)
					return
				}
				ops.Add(1)
			}
		})
	}
	// tolerated are the errors a request may fairly get while another
	// client removes, renames or truncates its file.
	tolerated := func(err error) error {
		if err == nil || errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrExist) {
			return nil
		}
		return err
	}
	withFile := func(c *Client, r *rand.Rand, create bool, f func(h uint32) error) error {
		var fl uint8
		if create {
			fl = OpenCreate
		}
		h, _, err := c.Open(ctx, names(r.IntN(files)), fl)
		if err != nil {
			return tolerated(err)
		}
		ferr := f(h)
		if err := c.CloseFile(ctx, h); err != nil {
			return fmt.Errorf("close: %w", err)
		}
		return tolerated(ferr) // a handle's file removed: ENOENT
	}
	for i := range 3 { // cold readers
		worker(uint64(i), func(c *Client, r *rand.Rand) error {
			return withFile(c, r, false, func(h uint32) error {
				p := make([]byte, 4096<<r.IntN(6))
				_, err := c.ReadAt(ctx, h, p, int64(r.IntN(fileBytes)))
				if errors.Is(err, io.EOF) { // truncated meanwhile
					return nil
				}
				return err
			})
		})
	}
	for i := range 2 { // writers, fsyncing now and then
		worker(uint64(10+i), func(c *Client, r *rand.Rand) error {
			return withFile(c, r, true, func(h uint32) error {
				p := make([]byte, 4096<<r.IntN(5))
				if _, err := c.WriteAt(ctx, h, p, int64(r.IntN(fileBytes))); err != nil {
					return fmt.Errorf("write: %w", err)
				}
				if r.IntN(4) == 0 {
					return c.Fsync(ctx, h)
				}
				return nil
			})
		})
	}
	worker(20, func(c *Client, r *rand.Rand) error { // truncater
		return withFile(c, r, false, func(h uint32) error {
			return c.Truncate(ctx, h, int64(r.IntN(fileBytes)))
		})
	})
	worker(21, func(c *Client, r *rand.Rand) error { // remover
		time.Sleep(time.Millisecond)
		return tolerated(c.Remove(ctx, names(r.IntN(files))))
	})
	worker(22, func(c *Client, r *rand.Rand) error { // renamer
		time.Sleep(time.Millisecond)
		return tolerated(c.Rename(ctx, names(r.IntN(files)), names(r.IntN(files))))
	})
	worker(23, func(c *Client, r *rand.Rand) error { // fsync of every file
		return c.Fsync(ctx, 0)
	})
	const minGCRuns, gcCap = 3, 3 * time.Minute
	statc := dial(t, d.socket)
	gcRuns := func() int64 {
		st, err := statc.Stats(ctx)
		if err != nil {
			t.Fatalf("stats: %v", err)
		}
		return st.GCRuns
	}
	start := time.Now()
	deadline := start.Add(dur)
	last, since := ops.Load(), time.Now()
	for (time.Now().Before(deadline) || gcRuns() < minGCRuns) && !t.Failed() {
		if time.Since(start) > max(gcCap, dur) {
			t.Fatalf("GC ran %d times in %v of namespace changes and I/O, want %d: the test did not race GC",
				gcRuns(), time.Since(start).Round(time.Second), minGCRuns)
		}
		time.Sleep(50 * time.Millisecond)
		if v := ops.Load(); v != last {
			last, since = v, time.Now()
		} else if time.Since(since) > noProgress {
			var b strings.Builder
			pprof.Lookup("goroutine").WriteTo(&b, 2)
			t.Fatalf("no request answered for %v; goroutines:\n%s", noProgress, b.String())
		}
	}
	close(stop)
	wg.Wait()
	c := dial(t, d.socket)
	st, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d operations; %d GC runs, %d cache misses", ops.Load(), st.GCRuns, st.Cache.Misses)
	if st.GCRuns < minGCRuns {
		t.Fatalf("GC ran %d times, want at least %d", st.GCRuns, minGCRuns)
	}
	if err := d.stop(t); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}
