package engine

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// watchdog fails a test that stops making progress: when no operation has
// completed for window, it hands every goroutine's stack to the test.
// Progress, not a wall-clock budget, decides: a loaded machine only slows
// the operations down.
type watchdog struct {
	ops   atomic.Int64
	fired chan string
	stop  chan struct{}
}

func startWatchdog(window time.Duration) *watchdog {
	w := &watchdog{fired: make(chan string, 1), stop: make(chan struct{})}
	go func() {
		tick := time.NewTicker(window / 10)
		defer tick.Stop()
		last, since := w.ops.Load(), time.Now()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			if n := w.ops.Load(); n != last {
				last, since = n, time.Now()
				continue
			}
			if time.Since(since) >= window {
				buf := make([]byte, 8<<20)
				w.fired <- string(buf[:runtime.Stack(buf, true)])
				return
			}
		}
	}()
	return w
}

// done counts one completed operation.
func (w *watchdog) done() { w.ops.Add(1) }

// wait waits for wg; it fails the test with the goroutines' stacks if the
// watchdog fires first (the stuck goroutines are left where they are).
func (w *watchdog) wait(t *testing.T, wg *sync.WaitGroup, what string) bool {
	t.Helper()
	defer close(w.stop)
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
		return true
	case stacks := <-w.fired:
		t.Errorf("%s: no operation completed for 10s; every goroutine:\n%s", what, stacks)
		return false
	}
}

// stressRun is one stress test's engine and the errors its operations may
// return.
type stressRun struct {
	t     *testing.T
	e     *Engine
	names []string
	wd    *watchdog
	stop  atomic.Bool
	wg    sync.WaitGroup
	count [16]atomic.Int64 // operations done, by kind
}

// expected reports whether err is an outcome the racing namespace makes
// legitimate: the file is gone, or an exclusive create lost.
func expected(err error) bool {
	return err == nil || errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrExist) || errors.Is(err, io.EOF)
}

// worker runs op until the run stops, pausing pace between operations
// (device-wide operations would otherwise crowd the others out).
func (s *stressRun) worker(kind int, seed uint64, pace time.Duration, op func(rng *rand.Rand) error) {
	s.wg.Go(func() {
		rng := rand.New(rand.NewPCG(seed, uint64(kind)))
		for !s.stop.Load() {
			if err := op(rng); !expected(err) {
				s.t.Errorf("operation kind %d: %v", kind, err)
				s.stop.Store(true)
				return
			}
			s.count[kind].Add(1)
			s.wd.done()
			time.Sleep(pace)
		}
	})
}

func (s *stressRun) name(rng *rand.Rand) string { return s.names[rng.IntN(len(s.names))] }

// closed closes the handle an open returned, if any, and returns the
// open's error.
func closed(f *File, err error) error {
	if err == nil {
		f.Close()
	}
	return err
}

// open opens a random existing file.
func (s *stressRun) open(rng *rand.Rand) (*File, error) {
	return s.e.Open(s.name(rng))
}

const stressMaxSize = 192 << 10

// TestStressNamespaceAgainstIO runs namespace operations (create,
// exclusive create, remove, rename over an existing file, truncate up and
// down) against cold and warm reads, partial-block writes, fsync, sync,
// checkpoints and GC on a small emulated device, under a watchdog that
// fails the test with every goroutine's stack if nothing completes for
// 10 s. It hung on the first round when Remove and Rename held the
// namespace lock into the cache's file lock while a cold read held that
// lock into ReadBacking, which took the namespace lock.
func TestStressNamespaceAgainstIO(t *testing.T) {
	// 14 data zones of 512 KiB for at most 1.1 MiB of files: the
	// overwrites keep GC busy.
	devName := emuDevice(t, 16, "512K", "")
	cfg := Config{CacheBytes: 4 << 20, DirtyLimit: 1 << 20, MaxOrder: 4}
	e := formatOpen(t, devName, cfg)
	s := &stressRun{t: t, e: e, names: []string{"a", "b", "c", "d", "e", "f"}, wd: startWatchdog(10 * time.Second)}
	for _, n := range s.names {
		f, err := e.Create(n)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(make([]byte, 64<<10), 0); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	// Every operation closes the handles it opens: a file removed or
	// renamed over while open stays until its last close, so leaked
	// handles would keep every replaced file's data on the device.
	const (
		opNamespace = iota
		opColdRead
		opWarmRead
		opPartialWrite
		opFsync
		opSync
		opCheckpoint
		opGC
	)
	for i := range 3 {
		s.worker(opNamespace, uint64(i), 0, func(rng *rand.Rand) error {
			switch rng.IntN(6) {
			case 0:
				return closed(e.OpenFile(s.name(rng), OCreate|OTrunc))
			case 1:
				return closed(e.OpenFile(s.name(rng), OCreate|OExcl))
			case 2:
				return e.Remove(s.name(rng))
			case 3:
				return e.Rename(s.name(rng), s.name(rng))
			default:
				f, err := s.open(rng)
				if err != nil {
					return err
				}
				defer f.Close()
				return f.Truncate(rng.Int64N(stressMaxSize))
			}
		})
	}
	read := func(rng *rand.Rand) error {
		f, err := s.open(rng)
		if err != nil {
			return err
		}
		defer f.Close()
		p := make([]byte, 1+rng.IntN(40<<10))
		_, err = f.ReadAt(p, rng.Int64N(stressMaxSize))
		return err
	}
	for i := range 2 {
		s.worker(opColdRead, uint64(i), 0, func(rng *rand.Rand) error {
			e.cache.EvictClean(1 << 30) // the read goes to the device
			return read(rng)
		})
	}
	s.worker(opWarmRead, 0, 0, read)
	for i := range 2 {
		s.worker(opPartialWrite, uint64(i), 0, func(rng *rand.Rand) error {
			f, err := s.open(rng)
			if err != nil {
				return err
			}
			defer f.Close()
			// Unaligned at both ends: the write reads its edge blocks
			// through the backing store under the cache's file lock.
			n := 1 + rng.IntN(32<<10)
			p := make([]byte, n)
			for i := range p {
				p[i] = byte(rng.Uint32())
			}
			_, err = f.WriteAt(p, rng.Int64N(stressMaxSize-int64(n)))
			return err
		})
	}
	s.worker(opFsync, 0, 0, func(rng *rand.Rand) error {
		f, err := s.open(rng)
		if err != nil {
			return err
		}
		defer f.Close()
		return f.Sync()
	})
	s.worker(opSync, 0, 5*time.Millisecond, func(rng *rand.Rand) error { return e.Sync(t.Context()) })
	s.worker(opCheckpoint, 0, 5*time.Millisecond, func(rng *rand.Rand) error {
		e.nsMu.RLock()
		defer e.nsMu.RUnlock()
		return e.checkpoint()
	})
	s.worker(opGC, 0, time.Millisecond, func(rng *rand.Rand) error {
		e.gc.reclaim(nil, minGCGain)
		return nil
	})
	time.AfterFunc(3*time.Second, func() { s.stop.Store(true) })
	if !s.wd.wait(t, &s.wg, "stress") {
		return // the engine is stuck: closing it would hang too
	}
	var counts []string
	for kind := range opGC + 1 {
		counts = append(counts, fmt.Sprint(s.count[kind].Load()))
	}
	st := e.Stats()
	t.Logf("operations by kind (namespace, cold read, warm read, partial write, fsync, sync, checkpoint, gc): %v; zones reset by GC: %d, checkpoints: %d",
		counts, st.GCResets, st.Checkpoints)
	if t.Failed() {
		return
	}
	if err := e.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	checkValidCounts(t, e)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	checkFsck(t, devName)
	e = reopen(t, devName, cfg)
	checkValidCounts(t, e)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}
