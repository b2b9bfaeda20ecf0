// Package writeback decides when and what of the cache goes to the device:
// thresholds, expiry, fsync, sync and memory pressure trigger flushes; a
// flush takes one file's dirty data in offset order, caps it (the iomap
// series' bounded ioend chains), and hands it to a Store, which decides
// where it goes. Everything one flush round submits goes under one plug of
// the ring: one kernel entry for many files' appends.
//
// Invariants:
//
//   - Data handed to the Store stays under writeback (stable) until the
//     Store reports it written; then it is clean. A failed write leaves it
//     dirty, to be written again, and the error is kept for the file until
//     an fsync reports it: a write is never dropped silently.
//   - FlushFile returns only when every byte of the file that was dirty
//     when it was called is on the device or its error is returned.
//   - writeback never imports engine: the engine is a Store.
package writeback

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zonefold/zonefold/cache"
	"github.com/zonefold/zonefold/uring"
)

// Pending tracks the appends of one flush. The Store calls Add before it
// submits appends and Done once per append when it completes.
type Pending interface {
	Add(n int)
	Done(err error)
}

// Store writes a file's dirty extents to the device. WriteExtents runs
// under the ring's plug: it submits and returns without waiting for I/O.
// The extents are in offset order and stable until p's last Done.
type Store interface {
	WriteExtents(file uint64, exts []cache.Extent, p Pending) error
}

// Config tunes writeback.
type Config struct {
	// Background is the dirty bytes above which the flusher writes back
	// without being asked. Default: the cache's background threshold.
	Background int64
	// Expire is the age after which dirty data is written back.
	// Default 5s.
	Expire time.Duration
	// MaxChain caps the bytes of one file taken by one flush. Default 8 MiB.
	MaxChain int64
	// MaxFiles caps the files flushed in one round (one plug). Default 64.
	MaxFiles int
}

// Stats are writeback's counters.
type Stats struct {
	Flushes    uint64 `json:"flushes"`     // file flushes started
	Rounds     uint64 `json:"rounds"`      // background rounds
	Bytes      uint64 `json:"bytes"`       // bytes written back
	Errors     uint64 `json:"errors"`      // failed flushes
	FlushNanos uint64 `json:"flush_nanos"` // total time from submission to completion of flushes
}

// Writeback runs flushes for one cache and one store.
type Writeback struct {
	cfg   Config
	cache *cache.Cache
	store Store
	ring  *uring.Ring

	kick chan struct{}
	pool sync.Pool // *flush

	mu   sync.Mutex
	errs map[uint64]error // per-file write errors not yet reported

	flushes, rounds, bytes, errCount, flushNanos atomic.Uint64
}

// New makes a Writeback; call Run to start the background flusher.
func New(cfg Config, c *cache.Cache, store Store, ring *uring.Ring) *Writeback {
	if cfg.Expire <= 0 {
		cfg.Expire = 5 * time.Second
	}
	if cfg.MaxChain <= 0 {
		cfg.MaxChain = 8 << 20
	}
	if cfg.MaxFiles <= 0 {
		cfg.MaxFiles = 64
	}
	w := &Writeback{cfg: cfg, cache: c, store: store, ring: ring,
		kick: make(chan struct{}, 1), errs: map[uint64]error{}}
	w.pool.New = func() any { return &flush{w: w, done: make(chan struct{}, 1)} }
	return w
}

// Kick wakes the background flusher; it never blocks (the cache calls it
// when dirty data passes its thresholds).
func (w *Writeback) Kick() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Stats returns a snapshot of the counters.
func (w *Writeback) Stats() Stats {
	return Stats{Flushes: w.flushes.Load(), Rounds: w.rounds.Load(), Bytes: w.bytes.Load(),
		Errors: w.errCount.Load(), FlushNanos: w.flushNanos.Load()}
}

// flush is one file's writeback in flight.
type flush struct {
	w       *Writeback
	file    uint64
	exts    []cache.Extent
	start   time.Time
	pending atomic.Int64
	errOnce atomic.Pointer[error]
	done    chan struct{}
}

func (f *flush) Add(n int) { f.pending.Add(int64(n)) }

func (f *flush) Done(err error) {
	if err != nil {
		f.errOnce.CompareAndSwap(nil, &err)
	}
	if f.pending.Add(-1) == 0 {
		f.finish()
	}
}

// finish runs once per flush, when the last append is done, possibly on
// the ring's reaper: it only hands the flush to its waiter, who ends the
// writeback (the cache wants EndWriteback called outside completions).
func (f *flush) finish() { f.done <- struct{}{} }

// end ends f's writeback in the cache and accounts for it; wait calls it.
func (w *Writeback) end(f *flush) error {
	var err error
	if p := f.errOnce.Load(); p != nil {
		err = *p
	}
	w.cache.EndWriteback(f.exts, err)
	w.flushNanos.Add(uint64(time.Since(f.start)))
	if err != nil {
		w.errCount.Add(1)
		w.mu.Lock()
		if _, ok := w.errs[f.file]; !ok {
			w.errs[f.file] = err
		}
		w.mu.Unlock()
		return err
	}
	for _, e := range f.exts {
		w.bytes.Add(uint64(len(e.Data)))
	}
	return nil
}

// start takes up to MaxChain of file's dirty data and submits it. It
// returns nil when the file had nothing dirty that was not already under
// writeback.
func (w *Writeback) start(file uint64) (*flush, error) {
	f := w.pool.Get().(*flush)
	f.file = file
	f.exts = w.cache.BeginWriteback(file, w.cfg.MaxChain, f.exts[:0])
	if len(f.exts) == 0 {
		w.pool.Put(f)
		return nil, nil
	}
	f.start = time.Now()
	f.errOnce.Store(nil)
	// The guard count keeps the flush from finishing while WriteExtents
	// is still submitting.
	f.pending.Store(1)
	w.flushes.Add(1)
	if err := w.store.WriteExtents(file, f.exts, f); err != nil {
		f.Done(err)
		return f, nil
	}
	f.Done(nil)
	return f, nil
}

// wait blocks until f's appends are done, ends its writeback and returns
// its error.
func (w *Writeback) wait(f *flush) error {
	if err := w.ring.Flush(); err != nil {
		return err
	}
	<-f.done
	err := w.end(f)
	f.exts = f.exts[:0]
	w.pool.Put(f)
	return err
}

// FlushFile writes back every dirty byte of file and waits for it, and for
// any writeback of the file already in flight. It returns the first write
// error of the file not yet reported, and forgets it.
func (w *Writeback) FlushFile(ctx context.Context, file uint64) error {
	var firstErr error
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		w.ring.Plug()
		f, err := w.start(file)
		uerr := w.ring.Unplug()
		if err == nil {
			err = uerr
		}
		if err != nil {
			return fmt.Errorf("writeback: flush file %d: %w", file, err)
		}
		if f == nil {
			break
		}
		if err := w.wait(f); err != nil {
			firstErr = err
			break // the data is dirty again; retrying now would loop
		}
	}
	if err := w.cache.WaitWriteback(ctx, file); err != nil {
		return err
	}
	if err := w.takeErr(file); err != nil && firstErr == nil {
		firstErr = err
	}
	if firstErr != nil {
		return fmt.Errorf("writeback: file %d: %w", file, firstErr)
	}
	return nil
}

// takeErr returns and forgets the file's unreported write error.
func (w *Writeback) takeErr(file uint64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	err := w.errs[file]
	delete(w.errs, file)
	return err
}

// Forget drops the file's unreported errors (the file was removed).
func (w *Writeback) Forget(file uint64) {
	w.mu.Lock()
	delete(w.errs, file)
	w.mu.Unlock()
}

// SyncAll writes back every dirty file and waits; it returns the first
// error.
func (w *Writeback) SyncAll(ctx context.Context) error {
	var errs []error
	for _, file := range w.cache.DirtyFiles(nil) {
		if err := w.FlushFile(ctx, file); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Run is the background flusher: on a kick, on dirty data past the
// background threshold and on expiry it writes back files, oldest dirty
// first, many files per plug. It returns when ctx is done.
func (w *Writeback) Run(ctx context.Context) {
	tick := time.NewTicker(max(w.cfg.Expire/4, 10*time.Millisecond))
	defer tick.Stop()
	var files []uint64
	var inflight []*flush
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		case <-tick.C:
		}
		for {
			files = w.cache.DirtyFiles(files[:0])
			now := time.Now()
			over := w.cache.DirtyBytes() > w.background()
			inflight = inflight[:0]
			w.ring.Plug()
			for _, file := range files {
				if len(inflight) >= w.cfg.MaxFiles {
					break
				}
				if !over {
					since, ok := w.cache.DirtySince(file)
					if !ok || now.Sub(since) < w.cfg.Expire {
						// Oldest first: nothing after this one expired.
						break
					}
				}
				f, err := w.start(file)
				if err != nil {
					slog.Warn("writeback: flush failed", "file", file, "err", err)
					continue
				}
				if f != nil {
					inflight = append(inflight, f)
				}
			}
			if err := w.ring.Unplug(); err != nil {
				slog.Error("writeback: submit", "err", err)
			}
			failed := false
			for _, f := range inflight {
				if err := w.wait(f); err != nil {
					failed = true
					slog.Warn("writeback: write failed; data stays dirty", "err", err)
				}
			}
			w.rounds.Add(1)
			// Keep going while over the threshold, unless nothing moved
			// or writes fail (then wait for the next tick, not spin).
			if len(inflight) == 0 || failed || w.cache.DirtyBytes() <= w.background() || ctx.Err() != nil {
				break
			}
		}
	}
}

func (w *Writeback) background() int64 {
	if w.cfg.Background > 0 {
		return w.cfg.Background
	}
	return w.cache.BackgroundBytes()
}
