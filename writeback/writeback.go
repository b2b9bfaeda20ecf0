// Package writeback decides when and what of the cache goes to the device:
// thresholds, expiry, fsync, sync and memory pressure trigger flushes; a
// flush takes one file's dirty data in offset order (from where the file's
// last flush stopped, round the file), caps it (the iomap
// series' bounded ioend chains), and hands it to a Store, which decides
// where it goes. Everything one flush round submits goes under one plug of
// the ring: one kernel entry for many files' appends.
//
// Flushes are pipelined: the background flusher and each FlushFile keep
// up to Config.Window bytes (and Config.MaxFiles flushes) in flight, and
// submit the next chains — of the same file too — while the first ones
// complete; between two chains they end the writeback of those that
// finished, so that their data is clean (and throttled writers go on)
// without waiting for the window to fill. A flusher that waited for each
// chain before building the next stalled once per chain for a
// completion's round trip (the ring's reaper waking up, then the
// flusher), which on a busy machine made the writers' throughput swing
// with the scheduler.
//
// Invariants:
//
//   - Data handed to the Store stays under writeback (stable) until the
//     Store reports it written; then it is clean. A failed write leaves it
//     dirty, to be written again, and the error is kept for the file until
//     an fsync reports it: a write is never dropped silently. Every
//     FlushFile called before a failure of its file reports it, not only
//     the first to ask (Linux's errseq_t does the same for each open
//     file): an fsync and a sync of everything waiting for the same
//     failed writeback both fail. FlushFileSeen, with a handle's cursor
//     (ErrCursor), also reports each failure since the cursor once to
//     that handle, as Linux does to each file descriptor open when it
//     failed. SyncAll and FlushFileLeaveError
//     report the failures during them but leave each file's error to
//     the file's own FlushFile, as syncfs leaves each open file's
//     errseq alone.
//   - FlushFile returns only when every byte of the file that was dirty
//     when it was called is on the device or its error is returned.
//   - The background flusher's failures are logged once per episode (a
//     WARN for the first, debug for the retries, info when writeback
//     succeeds again; see episode); the errors themselves still go to
//     each file's FlushFile.
//   - writeback never imports engine: the engine is a Store.
//
// The package has one lock, Writeback.mu (leaf: the per-file errors);
// episode is the flusher goroutine's own and takes none.
package writeback

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
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
// The extents are in offset order, but for one wrap round the file's end
// (cache.BeginWriteback), and stable until p's last Done.
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
	// MaxFiles caps the flushes one flusher has in flight. Default 64.
	MaxFiles int
	// Window caps the bytes one flusher has in flight: it builds and
	// submits more while earlier chains complete. Default 8 x MaxChain.
	Window int64
}

// Stats are writeback's counters.
type Stats struct {
	Flushes    uint64 `json:"flushes"`     // file flushes started
	Rounds     uint64 `json:"rounds"`      // background rounds: plugs that started flushes
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
	// Free flushes and FlushFile's pipes, with the extent lists and
	// queues they grew. Not sync.Pools: a collection empties those, and
	// every flush after one regrew its list (an allocation per append
	// grown, once per GC cycle, on the writers' critical path). A
	// buffered channel keeps them for good and needs no lock.
	flushPool chan *flush
	pipePool  chan *pipe

	mu   sync.Mutex
	errs map[uint64]fileErr // per-file write errors (see fileErr)
	// failSeq numbers failed flushes (changed under mu); FlushFile
	// samples it to know which failures came after its call.
	failSeq atomic.Uint64
	// failBytes is bytes (written back) when the latest failure came,
	// noted before its writeback ends: the flusher's episode counts
	// writeback succeeding since from it.
	failBytes atomic.Uint64

	flushes, rounds, bytes, errCount, flushNanos atomic.Uint64
}

// fileErr is what a file's failed flushes left for FlushFile, in the
// manner of Linux's errseq_t: err is the first error no FlushFile has
// reported yet; last and lastErr are the file's latest failure, which
// every FlushFile that started before it reports, whoever took err. The
// entry stays until the file is forgotten (removed): a failure is rare,
// and a FlushFile may still be waiting that must see it.
type fileErr struct {
	err     error
	last    uint64 // failSeq of the latest failure
	lastErr error
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
	if cfg.Window <= 0 {
		cfg.Window = 8 * cfg.MaxChain
	}
	w := &Writeback{cfg: cfg, cache: c, store: store, ring: ring,
		kick: make(chan struct{}, 1), errs: map[uint64]fileErr{}}
	w.flushPool = make(chan *flush, 2*cfg.MaxFiles)
	w.pipePool = make(chan *pipe, 16)
	return w
}

// getFlush takes a free flush, or makes one.
func (w *Writeback) getFlush() *flush {
	select {
	case f := <-w.flushPool:
		return f
	default:
		return &flush{w: w, done: make(chan struct{}, 1)}
	}
}

// putFlush keeps a finished flush for reuse, unless enough are kept.
func (w *Writeback) putFlush(f *flush) {
	select {
	case w.flushPool <- f:
	default:
	}
}

// getPipe takes a free pipe, or makes one.
func (w *Writeback) getPipe() *pipe {
	select {
	case p := <-w.pipePool:
		return p
	default:
		return &pipe{w: w}
	}
}

// putPipe keeps an empty pipe for reuse, unless enough are kept.
func (w *Writeback) putPipe(p *pipe) {
	select {
	case w.pipePool <- p:
	default:
	}
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
	bytes   int64 // of exts
	start   time.Time
	pending atomic.Int64
	errOnce atomic.Pointer[error]
	done    chan struct{}
}

func (f *flush) Add(n int) { f.pending.Add(int64(n)) }

func (f *flush) Done(err error) {
	if err != nil {
		f.fail(err)
	}
	if f.pending.Add(-1) == 0 {
		f.finish()
	}
}

// fail keeps the flush's first error. Its own function so that only a
// failure moves err to the heap: with the CompareAndSwap in Done, err
// escaped on every call and each append's completion allocated.
//
//go:noinline
func (f *flush) fail(err error) { f.errOnce.CompareAndSwap(nil, &err) }

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
	if err != nil {
		// Before the writeback ends: a FlushFile waiting for it must
		// find the error once it sees the writeback over.
		w.errCount.Add(1)
		w.failBytes.Store(w.bytes.Load())
		w.mu.Lock()
		fe := w.errs[f.file]
		if fe.err == nil {
			fe.err = err
		}
		fe.last, fe.lastErr = w.failSeq.Add(1), err
		w.errs[f.file] = fe
		w.mu.Unlock()
	}
	w.cache.EndWriteback(f.exts, err)
	w.flushNanos.Add(uint64(time.Since(f.start)))
	if err != nil {
		return err
	}
	w.bytes.Add(uint64(f.bytes))
	return nil
}

// start takes up to MaxChain of file's dirty data and submits it. It
// returns nil when the file had nothing dirty that was not already under
// writeback. A failed submission is the flush's error, reported by wait.
func (w *Writeback) start(file uint64) *flush {
	f := w.getFlush()
	f.file = file
	f.exts = w.cache.BeginWriteback(file, w.cfg.MaxChain, f.exts[:0])
	if len(f.exts) == 0 {
		w.putFlush(f)
		return nil
	}
	f.bytes = 0
	for _, e := range f.exts {
		f.bytes += int64(len(e.Data))
	}
	f.start = time.Now()
	f.errOnce.Store(nil)
	// The guard count keeps the flush from finishing while WriteExtents
	// is still submitting.
	f.pending.Store(1)
	w.flushes.Add(1)
	if err := w.store.WriteExtents(file, f.exts, f); err != nil {
		f.Done(err)
		return f
	}
	f.Done(nil)
	return f
}

// wait blocks until f's appends are done, ends its writeback and returns
// its error.
func (w *Writeback) wait(f *flush) error {
	// Wait even if the ring's flush fails: the appends still complete,
	// and returning early would leave the extents under writeback for
	// good.
	_ = w.ring.Flush()
	<-f.done
	return w.release(f)
}

// release ends a finished flush's writeback and recycles it.
func (w *Writeback) release(f *flush) error {
	err := w.end(f)
	f.exts = f.exts[:0]
	w.putFlush(f)
	return err
}

// FlushFile writes back every dirty byte of file and waits for it, and for
// any writeback of the file already in flight. It returns the first write
// error of the file no FlushFile has reported yet, and forgets it; failing
// that, the file's latest error if that failure came after FlushFile was
// called (a writeback it waited for, which another caller may have
// reported too: its data is dirty again, not on the device). Its chains are
// pipelined (see Config.Window); after a failure it starts no more (the
// data is dirty again; retrying at once would loop) and waits for those
// in flight. A done ctx stops it the same way, and its error is all it
// returns: the file's unreported error stays for the next FlushFile.
func (w *Writeback) FlushFile(ctx context.Context, file uint64) error {
	return w.flushFile(ctx, file, true, nil)
}

// ErrCursor samples file's failures for a new handle of it, as Linux's
// errseq_sample does at open: FlushFileSeen with the cursor then reports
// every failure after it, once to that handle. A failure no FlushFile
// has reported yet counts as after it (the new handle sees it too).
func (w *Writeback) ErrCursor(file uint64) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	fe, ok := w.errs[file]
	if !ok || fe.err != nil {
		return 0
	}
	return fe.last
}

// FlushFileSeen is FlushFile for one handle of the file (its fsync),
// whose cursor seen (from ErrCursor) says which of the file's failures
// it has reported: it also reports the latest failure after the cursor
// and moves the cursor there, so that each handle open when a failure
// came reports it once, as each file descriptor does on Linux
// (file_check_and_advance_wb_err). mu guards *seen.
func (w *Writeback) FlushFileSeen(ctx context.Context, file uint64, seen *uint64) error {
	return w.flushFile(ctx, file, true, seen)
}

// TakeSeen is what FlushFileSeen reports of the handle's cursor without
// flushing, for a handle's fsync that failed before its flush: the
// failure it returns is then reported to that handle.
func (w *Writeback) TakeSeen(file uint64, seen *uint64) error {
	return w.takeErr(file, math.MaxUint64, true, seen)
}

// FlushFileLeaveError is FlushFile for a flush the file's client did not
// ask for (the engine's own, on the file's behalf: a sync of everything,
// a background retry): it reports the file's failures since its call but
// leaves the unreported error for the file's own FlushFile (its fsync),
// as SyncAll does.
func (w *Writeback) FlushFileLeaveError(ctx context.Context, file uint64) error {
	return w.flushFile(ctx, file, false, nil)
}

// flushFile is FlushFile; with take false (SyncAll, FlushFileLeaveError)
// it reports the file's failures since its call but leaves the
// unreported error for the file's own FlushFile (its fsync), as Linux's
// syncfs leaves each open file's errseq alone. seen, if not nil, is a
// handle's cursor (FlushFileSeen).
func (w *Writeback) flushFile(ctx context.Context, file uint64, take bool, seen *uint64) error {
	since := w.failSeq.Load()
	p := w.getPipe()
	defer w.putPipe(p)
	var firstErr error
	for {
		if firstErr == nil {
			if err := ctx.Err(); err != nil {
				firstErr = err
			}
		}
		if err := p.retireDone(); err != nil && firstErr == nil {
			firstErr = err
		}
		if firstErr == nil && !p.full() {
			// One chain per kernel entry: its I/O overlaps the building
			// of the next.
			w.ring.Plug()
			f := w.start(file)
			if f != nil {
				p.push(f)
			}
			if err := w.ring.Unplug(); err != nil {
				firstErr = fmt.Errorf("writeback: flush file %d: %w", file, err)
			}
			if f != nil {
				continue
			}
		}
		if p.empty() {
			break
		}
		if err := p.retire(); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if testHookFlushFile != nil {
		testHookFlushFile(file, false)
	}
	if err := w.cache.WaitWriteback(ctx, file); err != nil && firstErr == nil {
		return err
	}
	if testHookFlushFile != nil {
		testHookFlushFile(file, true)
	}
	// A flush that ends with its context's error reports only that, so it
	// must not take the file's unreported error: its caller (an fsync
	// the client canceled) never sees it, and nobody else would.
	canceled := firstErr != nil && errors.Is(firstErr, ctx.Err())
	if err := w.takeErr(file, since, take && !canceled, seen); err != nil && firstErr == nil {
		firstErr = err
	}
	if firstErr != nil {
		if canceled {
			return firstErr
		}
		return fmt.Errorf("writeback: file %d: %w", file, firstErr)
	}
	return nil
}

// testHookFlushFile, if set (by tests only), runs in FlushFile before
// (waited false) and after (waited true) its wait for the file's
// writeback in flight.
var testHookFlushFile func(file uint64, waited bool)

// pipe is one flusher's flushes in flight, oldest first.
type pipe struct {
	w     *Writeback
	q     []*flush
	bytes int64
}

// full says the flusher must retire a flush before it starts another.
func (p *pipe) full() bool {
	return len(p.q) >= p.w.cfg.MaxFiles || p.bytes >= p.w.cfg.Window
}

func (p *pipe) empty() bool { return len(p.q) == 0 }

// drained says whether p has a chain of file in flight that took less
// than a whole chain: all the file had dirty then.
func (p *pipe) drained(file uint64) bool {
	for _, f := range p.q {
		if f.file == file && f.bytes < p.w.cfg.MaxChain {
			return true
		}
	}
	return false
}

func (p *pipe) push(f *flush) {
	p.q = append(p.q, f)
	p.bytes += f.bytes
}

// retire waits for the oldest flush in flight, ends its writeback and
// returns its error.
func (p *pipe) retire() error {
	f := p.q[0]
	n := copy(p.q, p.q[1:])
	p.q[n] = nil
	p.q = p.q[:n]
	p.bytes -= f.bytes
	return p.w.wait(f)
}

// retireDone retires, oldest first, the flushes that have finished, without
// waiting: their data becomes clean (and throttled writers go on) as soon
// as the flusher is between two chains. It returns the first error.
func (p *pipe) retireDone() error {
	var first error
	for !p.empty() {
		f := p.q[0]
		select {
		case <-f.done:
		default:
			return first
		}
		n := copy(p.q, p.q[1:])
		p.q[n] = nil
		p.q = p.q[:n]
		p.bytes -= f.bytes
		if err := p.w.release(f); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// takeErr returns and forgets the file's unreported write error (with
// take) or, without one, its latest error if it failed after since. With
// a handle's cursor seen behind the latest failure, it returns that (the
// unreported error if there is one) and moves the cursor to it.
func (w *Writeback) takeErr(file uint64, since uint64, take bool, seen *uint64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	fe, ok := w.errs[file]
	if !ok {
		return nil
	}
	if seen != nil && take && fe.last > *seen {
		*seen = fe.last
		err := fe.err
		if err == nil {
			err = fe.lastErr
		}
		fe.err = nil
		w.errs[file] = fe
		return err
	}
	if err := fe.err; err != nil && take {
		fe.err = nil
		w.errs[file] = fe
		return err
	}
	if fe.last > since {
		return fe.lastErr
	}
	return nil
}

// Forget drops the file's unreported errors (the file was removed).
func (w *Writeback) Forget(file uint64) {
	w.mu.Lock()
	delete(w.errs, file)
	w.mu.Unlock()
}

// SyncAll writes back every dirty file and waits; it returns the errors
// of the writes that failed meanwhile. It takes no file's unreported
// error: that is for the file's own FlushFile to report.
func (w *Writeback) SyncAll(ctx context.Context) error {
	var errs []error
	for _, file := range w.cache.DirtyFiles(nil) {
		if err := w.flushFile(ctx, file, false, nil); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return &syncAllError{errs: errs}
}

// syncAllError is SyncAll's failure of one or more files: it matches each
// file's error (errors.Is, errors.As) but its text names only the first
// few. On a full device a shutdown's SyncAll failed for hundreds of files,
// and the daemon's exit line joined them all (~40 KB).
type syncAllError struct{ errs []error }

// syncAllNamed is how many of the files' errors syncAllError's text names.
const syncAllNamed = 3

func (e *syncAllError) Error() string {
	if len(e.errs) == 1 {
		return e.errs[0].Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "writeback: %d files failed to write back", len(e.errs))
	for i, err := range e.errs[:min(len(e.errs), syncAllNamed)] {
		sep := "; "
		if i == 0 {
			sep = ": "
		}
		b.WriteString(sep)
		b.WriteString(err.Error())
	}
	if len(e.errs) > syncAllNamed {
		fmt.Fprintf(&b, "; and %d more", len(e.errs)-syncAllNamed)
	}
	return b.String()
}

func (e *syncAllError) Unwrap() []error { return e.errs }

// Run is the background flusher: on a kick, on dirty data past the
// background threshold and on expiry it writes back files, oldest dirty
// first, one chain per file per pass and one plug per pass, keeping up
// to Window bytes in flight: it starts new chains as the oldest complete,
// for as long as dirty data is over the threshold or expired. It returns
// when ctx is done.
func (w *Writeback) Run(ctx context.Context) {
	tick := time.NewTicker(max(w.cfg.Expire/4, 10*time.Millisecond))
	defer tick.Stop()
	p := &pipe{w: w}
	var files []uint64
	var ep episode
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		case <-tick.C:
		}
		failed := false
		for {
			if !failed && ctx.Err() == nil {
				var err error
				if files, err = w.fill(p, files); err != nil {
					failed = true
					w.noteFailure(ctx, &ep, err)
				}
			}
			if p.empty() {
				break
			}
			if err := p.retire(); err != nil {
				// Start nothing more this time (the data is dirty
				// again); retire what is in flight, then wait for the
				// next tick rather than spin.
				failed = true
				w.noteFailure(ctx, &ep, err)
			}
		}
		if !failed {
			ep.round(w.bytes.Load())
		}
		if testHookRound != nil {
			testHookRound(ctx)
		}
	}
}

// noteFailure counts a failed round of the flusher in ep, with the bytes
// written back when the failure came (end noted them): a FlushFile may
// have written the data since, room having returned, and that success
// must end the episode.
func (w *Writeback) noteFailure(ctx context.Context, ep *episode, err error) {
	if testHookFailure != nil {
		testHookFailure(ctx)
	}
	ep.failed(err, w.failBytes.Load())
}

// testHookFailure, if set (by tests only), runs in the background flusher
// when a round fails, after the failed flush's writeback ended and before
// the failure is logged.
var testHookFailure func(ctx context.Context)

// testHookRound, if set (by tests only), runs in the background flusher
// after each round, once the round's flushes are retired and logged.
var testHookRound func(ctx context.Context)

// episode keeps the background flusher's log to one WARN per run of
// failures. Data that cannot be written (a full device) stays dirty and
// is retried on every tick; a WARN for each retry filled the daemon's log
// with the same line every few seconds for as long as it ran. The first
// failure of an episode warns, the retries log at debug, and the episode
// ends, with an info line counting them, after a round that fails nothing
// once some writeback has succeeded since the last failure (a round that
// starts nothing proves nothing). FlushFile (fsync) reports every failure
// regardless: only the log is quieter.
type episode struct {
	failures int64
	written  uint64 // bytes written back when the last failure came
}

// failed counts a failure; written is the bytes written back so far.
func (ep *episode) failed(err error, written uint64) {
	ep.written = written
	if ep.failures++; ep.failures == 1 {
		slog.Warn("writeback: write failed; data stays dirty and is retried (further failures are logged at debug level until writeback succeeds)", "err", err)
		return
	}
	slog.Debug("writeback: write failed again; data stays dirty", "err", err, "failures", ep.failures)
}

// round ends the episode after a round without failures, if bytes were
// written back since its last failure.
func (ep *episode) round(written uint64) {
	if ep.failures == 0 || written == ep.written {
		return
	}
	slog.Info("writeback: writes succeed again", "failures", ep.failures)
	*ep = episode{}
}

// fill starts flushes of the files that need writing back — all dirty
// files while dirty bytes are over the background threshold, else those
// whose dirty data expired — in passes of one chain per file, oldest
// first, one plug (one kernel entry) per pass, until p is full or a pass
// starts nothing. Between passes it retires the flushes that finished, so
// that their data is clean without waiting for the window to fill. It
// returns files for reuse and the first error of a retired flush.
//
// A file whose chain in flight took all it had dirty (less than
// MaxChain) gets no other chain until that one is retired, unless it
// has MaxChain/minChainDiv dirty again: what it dirtied since waits and
// goes in one record with what it dirties meanwhile. Without this each
// pass took every file's blocks dirtied since the last pass, a few
// writes: with the window's 64 chains in flight over 16 files of random
// 8 KiB writes (bench gc uniform, 4 MiB cache) a client record carried
// 86 KiB on average for its 4 KiB header, 19% of them under 32 KiB, and
// 35% of the chains started while one of the same file was in flight.
// Waiting made them 112 KiB. In bench gc (--workload uniform,hotcold
// --repeat 3; medians of five runs before, three after) hotcold's
// mru/cost-benefit WAF went from 2.90-3.07 to 2.82-2.86, its GC copies
// from 1.83-2.01 to 1.76-1.81 per host byte, with headers 0.078-0.085
// -> 0.073-0.074; uniform's mru/greedy moved within its spread
// (4.06-4.12 -> 4.02-4.07). A file with more than that dirty still has
// chains pipelined (TestRunPipelines).
func (w *Writeback) fill(p *pipe, files []uint64) ([]uint64, error) {
	files = w.cache.DirtyFiles(files[:0])
	now := time.Now()
	for {
		if err := p.retireDone(); err != nil {
			return files, err
		}
		if p.full() {
			return files, nil
		}
		started := false
		// Short of memory: a reclaim sleeps until a folio is clean,
		// which dirty data below the threshold and not yet expired
		// would not be for up to Expire (TestH46dReadShortOfMemoryGetsWritebackBelowBackground).
		over := w.cache.DirtyBytes() > w.background() || w.cache.ShortOfMemory()
		w.ring.Plug()
		for _, file := range files {
			if p.full() {
				break
			}
			if !over {
				since, ok := w.cache.DirtySince(file)
				if !ok || now.Sub(since) < w.cfg.Expire {
					// Oldest first: nothing after this one expired.
					break
				}
			}
			if p.drained(file) && w.cache.DirtyIdle(file) < w.cfg.MaxChain/minChainDiv {
				// What the file dirtied since its chain in flight
				// took all it had waits for that chain: see fill.
				continue
			}
			if f := w.start(file); f != nil {
				p.push(f)
				started = true
			}
		}
		if err := w.ring.Unplug(); err != nil {
			slog.Error("writeback: submit", "err", err)
		}
		if !started {
			return files, nil
		}
		w.rounds.Add(1)
	}
}

// minChainDiv: fill starts a second chain of a file whose chain in
// flight took all it had once it has MaxChain/minChainDiv (256 KiB by
// default) dirty again, so that one file alone still keeps chains in
// flight: without it, one file's random 4 KiB writes at iodepth 128
// (testdata/fio/write-cases.py --rounds 3 --cache 16M, 4k-qd128-fsync)
// ran 0.86x (4x1m-fsync 0.93x); with it the four cases ran 1.00x-1.04x,
// within their spreads (1.11-1.45).
const minChainDiv = 32

func (w *Writeback) background() int64 {
	if w.cfg.Background > 0 {
		return w.cfg.Background
	}
	return w.cache.BackgroundBytes()
}
