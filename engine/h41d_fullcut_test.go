package engine

// A power-cut loop on a device filled to the brim: writers create many
// small files and a few large ones, fsyncing as they go, until ENOSPC,
// and then remove, rename over and truncate their files to make room
// and fill it again, while GC runs. The power is cut at a random
// operation count (as TestPowerCutLoop cuts); after each cut fsck must
// find no damage, every fsynced byte and acknowledged namespace
// operation must be there, and removing files must give the space back
// (a write and its fsync succeed again).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/zonefold/zonefold/zns"
)

// fullFile is one file's model: its bytes are fullByte(tag, off); the
// first acked of them are durable; none past written was ever written.
type fullFile struct {
	tag     int
	acked   int64
	written int64
	pending string // an operation in flight: "remove", "rename:TO", "truncate"
	// doubt: an operation on it failed (an injected fault): its
	// outcome is open, as pending says, and what it wrote unsynced may
	// be partly there.
	doubt bool
}

func fullByte(tag int, off int64) byte { return byte(int64(tag)*131 + off*7 + off>>9 + 1) }

type fullRun struct {
	t       *testing.T
	rng     *rand.Rand
	devName string
	cfg     Config
	e       *Engine

	mu       sync.Mutex
	files    map[string]*fullFile
	creating map[string]int // creates in flight: their tags
	gone     map[string]bool
	seq, tag int
	enospc   atomic.Int64
	stops    []string

	// faults: device faults are injected during each point (emu
	// FailWrite, FailFlush, FailRead, FailFinish); an operation that
	// fails with one leaves its file in limbo (pending "limbo"): either
	// outcome, and its unsynced bytes, may be there after the cut.
	faults  bool
	faulted map[string]int // errors met, by kind
	cutting atomic.Bool    // the cut has begun: errors are the cut's
	trace   []string       // this point's operations, for a failure's post-mortem
}

func (r *fullRun) logf(format string, args ...any) {
	r.mu.Lock()
	r.trace = append(r.trace, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

// fault reports whether err is an injected device fault to tolerate,
// counting it.
func (r *fullRun) fault(err error) bool {
	if !r.faults || err == nil || r.cutting.Load() || errors.Is(err, fs.ErrNotExist) || r.refused(err) || errors.Is(err, context.Canceled) || errors.Is(err, ErrClosed) {
		return false
	}
	kind := "other"
	switch {
	case errors.Is(err, ErrMetaLog):
		kind = "metalog"
	case errors.Is(err, syscall.EIO):
		kind = "eio"
	}
	r.mu.Lock()
	r.faulted[kind]++
	if kind == "other" {
		r.trace = append(r.trace, "error of no errno: "+err.Error())
	}
	r.mu.Unlock()
	return true
}

// refused reports whether err is a refusal for want of space (ENOSPC)
// that left everything as it was: not one joined to a device error (a
// truncate whose zeros' flush failed and whose undo found no room), nor
// one of an operation the cut interrupted, whose outcome is open.
func (r *fullRun) refused(err error) bool {
	return errors.Is(err, ErrNoSpace) && !errors.Is(err, syscall.EIO) && !r.cutting.Load()
}

// limbo leaves f's outcome open after a failed operation.
func (r *fullRun) limbo(f *fullFile) {
	r.mu.Lock()
	f.doubt = true
	r.mu.Unlock()
}

func TestH41dFullDevicePowerCuts(t *testing.T) { fullDeviceCuts(t, false) }

// TestH41dFullDeviceFaultsAndPowerCuts is the same loop with device
// faults injected (failed appends and writes, flushes, reads, finishes)
// during GC relocation, checkpoints and metadata log writes with fsyncs
// in flight: the errors reach the callers, and nothing fsynced before
// is lost.
func TestH41dFullDeviceFaultsAndPowerCuts(t *testing.T) { fullDeviceCuts(t, true) }

func fullDeviceCuts(t *testing.T, faults bool) {
	seeds, points := []uint64{41401}, 12
	if s := envSeeds(t, "ZONEFOLD_POWERCUT_SEEDS"); s != nil {
		seeds, points = s, 30
	}
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := &fullRun{t: t, rng: rand.New(rand.NewPCG(seed, 41)), devName: memDevice(t, 24, "256K"),
				cfg:   Config{CacheBytes: 2 << 20, DirtyLimit: 1 << 20, MaxOrder: 4},
				files: map[string]*fullFile{}, creating: map[string]int{}, gone: map[string]bool{},
				faults: faults, faulted: map[string]int{}}
			r.e = formatOpen(t, r.devName, r.cfg)
			for p := range points {
				r.point(p)
			}
			if err := r.e.Close(); err != nil {
				t.Fatal(err)
			}
			checkFsck(t, r.devName)
			t.Logf("seed %d: %d cuts, %d ENOSPC met, faults met %v", seed, points, r.enospc.Load(), r.faulted)
		})
	}
}

func (r *fullRun) point(p int) {
	t := r.t
	cutAt := int64(30 + r.rng.IntN(300))
	mode := r.rng.IntN(6)
	ctx, cancel := context.WithCancel(context.Background())
	var ops atomic.Int64
	reached := make(chan struct{})
	var once sync.Once
	emu := r.e.dev.(*zns.Emu)
	arm := map[int64]func(){}
	if r.faults {
		for range 1 + r.rng.IntN(3) {
			n := 1 + r.rng.IntN(4)
			var f func()
			switch r.rng.IntN(5) {
			case 0, 1:
				n = 1 + r.rng.IntN(40)
				f = func() { r.logf("FailWrite(%d)", n); emu.FailWrite(n) }
			case 2:
				f = func() { r.logf("FailFlush(%d)", n); emu.FailFlush(n) }
			case 3:
				n = 1 + r.rng.IntN(40)
				f = func() { r.logf("FailRead(%d)", n); emu.FailRead(n) }
			case 4:
				f = func() { r.logf("FailFinish(%d)", n); emu.FailFinish(n) }
			}
			at := r.rng.Int64N(cutAt)
			arm[at] = func() { r.logf("arm fault at op %d", at); f() }
		}
	}
	tick := func() {
		n := ops.Add(1)
		if f := arm[n]; f != nil {
			f()
		}
		if n >= cutAt {
			once.Do(func() { close(reached) })
		}
	}
	var wg sync.WaitGroup
	cutting := &r.cutting
	cutting.Store(false)
	for i := range 3 {
		seed := r.rng.Uint64()
		wg.Go(func() {
			err := r.worker(ctx, fmt.Sprintf("w%d-", i), seed, tick)
			if !cutting.Load() {
				r.mu.Lock()
				r.stops = append(r.stops, fmt.Sprintf("worker %d: %v", i, err))
				r.mu.Unlock()
			}
		})
	}
	allStopped := make(chan struct{})
	go func() { wg.Wait(); close(allStopped) }()
	switch awaitCut(reached, allStopped, &ops, 60*time.Second) {
	case cutClientsStopped:
		t.Fatalf("point %d: every worker stopped before the cut (%d of %d ops): %v; stats %+v", p, ops.Load(), cutAt, r.stops, r.e.Stats())
	case cutStalled:
		t.Fatalf("point %d: no operation for 60 s; stats %+v\n%s", p, r.e.Stats(), goroutineStacks())
	}
	cutting.Store(true)
	powerCut(t, r.e, emu, cutKindOf(mode), func() { cancel(); wg.Wait() },
		func() int64 { return int64(r.rng.IntN(4)) * BlockSize },
		func(_ int, n int64) int64 { return keepDrawn(r.rng, n) })
	for _, s := range r.stops {
		t.Errorf("point %d: before the cut, %s", p, s)
	}
	r.stops = nil
	if err := fsckAfterCut(t, r.devName); err != nil {
		t.Errorf("point %d (mode %d): fsck after the cut: %v", p, mode, err)
	}
	r.e = reopen(t, r.devName, r.cfg)
	r.logf("cut mode %d", mode)
	if n := r.check(p); n > 0 {
		for _, l := range r.trace {
			t.Log(l)
		}
		t.Fatalf("point %d (mode %d, %d ops): %d checks failed; stats %+v", p, mode, cutAt, n, r.e.Stats())
	}
	r.probe(p)
	r.trace = nil
}

// worker fills the device with its files (prefix) until ENOSPC, and
// removes, renames over and truncates them.
func (r *fullRun) worker(ctx context.Context, prefix string, seed uint64, tick func()) error {
	rng := rand.New(rand.NewPCG(seed, 7))
	e := r.e
	buf := make([]byte, 96<<10)
	for ctx.Err() == nil {
		r.mu.Lock()
		var names []string
		for n, f := range r.files {
			if strings.HasPrefix(n, prefix) && f.pending == "" && !f.doubt {
				names = append(names, n)
			}
		}
		slices.Sort(names)
		r.mu.Unlock()
		op := rng.IntN(10)
		switch {
		case op < 2 && len(names) > 0: // remove
			name := names[rng.IntN(len(names))]
			r.mu.Lock()
			r.files[name].pending = "remove"
			r.mu.Unlock()
			err := e.Remove(name)
			r.logf("remove %s: %v", name, err)
			if err != nil {
				if r.fault(err) {
					r.limbo(r.files[name])
					tick()
					continue
				}
				return err
			}
			r.mu.Lock()
			delete(r.files, name)
			r.gone[name] = true
			r.mu.Unlock()
		case op < 3 && len(names) > 1: // rename over another of its files
			from, to := names[rng.IntN(len(names))], names[rng.IntN(len(names))]
			if from == to {
				continue
			}
			r.mu.Lock()
			r.files[from].pending = "rename:" + to
			r.files[to].pending = "over"
			r.mu.Unlock()
			err := e.Rename(from, to)
			r.logf("rename %s -> %s: %v", from, to, err)
			if err != nil {
				if r.fault(err) {
					r.limbo(r.files[from])
					r.limbo(r.files[to])
					tick()
					continue
				}
				return err
			}
			r.mu.Lock()
			r.files[to] = r.files[from]
			r.files[to].pending = ""
			delete(r.files, from)
			r.gone[from] = true
			r.mu.Unlock()
		case op < 4 && len(names) > 0: // truncate to within what is durable
			name := names[rng.IntN(len(names))]
			r.mu.Lock()
			f := r.files[name]
			if f.written != f.acked {
				r.mu.Unlock()
				continue
			}
			size := rng.Int64N(f.acked + 1)
			f.pending = "truncate"
			r.mu.Unlock()
			h, err := e.Open(name)
			if err != nil {
				return err
			}
			err = h.Truncate(size)
			h.Close()
			r.logf("truncate %s to %d (acked %d): %v", name, size, f.acked, err)
			if r.fault(err) {
				r.limbo(f)
				tick()
				continue
			}
			if r.refused(err) {
				r.enospc.Add(1)
				r.mu.Lock()
				f.pending = ""
				r.mu.Unlock()
				continue
			}
			if err != nil {
				return err
			}
			r.mu.Lock()
			f.acked, f.written, f.pending = size, size, ""
			r.mu.Unlock()
		case op < 5 && len(names) > 0: // append to a file (truncated, maybe), fsync
			name := names[rng.IntN(len(names))]
			r.mu.Lock()
			f := r.files[name]
			if f.written != f.acked {
				r.mu.Unlock()
				continue
			}
			off, n := f.acked, int64(1+rng.IntN(12<<10))
			f.written = off + n
			r.mu.Unlock()
			for i := range n {
				buf[i] = fullByte(f.tag, off+i)
			}
			h, err := e.Open(name)
			if err != nil {
				return err
			}
			_, err = h.WriteAtContext(ctx, buf[:n], off)
			if err == nil {
				err = h.SyncContext(ctx)
			}
			h.Close()
			r.logf("append %s %d+%d and sync: %v", name, off, n, err)
			if r.fault(err) {
				r.limbo(f)
				tick()
				continue
			}
			if r.refused(err) {
				r.enospc.Add(1)
				continue
			}
			if err != nil {
				return err
			}
			r.mu.Lock()
			f.acked = off + n
			r.mu.Unlock()
		default: // a new file, filled until its size or ENOSPC
			r.mu.Lock()
			r.seq++
			r.tag++
			name := fmt.Sprintf("%s%05d", prefix, r.seq)
			tag := r.tag
			r.creating[name] = tag
			r.mu.Unlock()
			size := int64(1 + rng.IntN(16<<10))
			if rng.IntN(6) == 0 {
				size = int64(256<<10 + rng.IntN(1<<20))
			}
			h, err := e.Create(name)
			r.logf("create %s (tag %d): %v", name, tag, err)
			if err != nil {
				if r.fault(err) {
					tick()
					continue // the name stays in creating: it may be there
				}
				if r.refused(err) {
					r.enospc.Add(1)
					r.mu.Lock()
					delete(r.creating, name)
					r.mu.Unlock()
					continue
				}
				return err
			}
			f := &fullFile{tag: tag}
			r.mu.Lock()
			delete(r.creating, name)
			r.files[name] = f
			r.mu.Unlock()
			full := false
			for off := int64(0); off < size && !full && ctx.Err() == nil; {
				n := min(size-off, int64(1+rng.IntN(len(buf))))
				for i := range n {
					buf[i] = fullByte(tag, off+i)
				}
				r.mu.Lock()
				f.written = max(f.written, off+n)
				r.mu.Unlock()
				_, err := h.WriteAtContext(ctx, buf[:n], off)
				r.logf("write %s %d+%d: %v", name, off, n, err)
				if err != nil {
					refused, bad := r.stopOn(err, f)
					if bad != nil {
						h.Close()
						return bad
					}
					full = full || refused
					break
				}
				off += n
				tick()
				if rng.IntN(3) == 0 || off == size {
					err := h.SyncContext(ctx)
					r.logf("sync %s at %d: %v", name, off, err)
					if err != nil {
						refused, bad := r.stopOn(err, f)
						if bad != nil {
							h.Close()
							return bad
						}
						full = full || refused
						break
					}
					r.mu.Lock()
					f.acked = off
					r.mu.Unlock()
				}
			}
			h.Close()
		}
		tick()
	}
	return ctx.Err()
}

// check compares the reopened engine with the model and brings the
// model (and the files) to a state where each file is all durable.
func (r *fullRun) check(p int) int {
	t, e := r.t, r.e
	failed := 0
	fail := func(format string, args ...any) {
		failed++
		if failed <= 8 {
			t.Errorf("point %d: %s", p, fmt.Sprintf(format, args...))
		}
	}
	have := map[string]bool{}
	for _, fi := range e.List() {
		have[fi.Name] = true
	}
	// Resolve pending operations.
	for name, f := range r.files {
		switch {
		case f.pending == "remove" && !have[name]:
			delete(r.files, name)
		case strings.HasPrefix(f.pending, "rename:"):
			to := strings.TrimPrefix(f.pending, "rename:")
			f.pending = ""
			if !have[name] {
				if over := r.files[to]; over != nil {
					f.doubt = f.doubt || over.doubt
				}
				r.files[to] = f
				delete(r.files, name)
			} else if r.files[to] != nil {
				r.files[to].pending = ""
			}
		case f.doubt && !have[name]:
			delete(r.files, name)
		}
	}
	for name, f := range r.files {
		if f.pending == "over" {
			f.pending = ""
		}
		if !have[name] {
			fail("%s (%d bytes fsynced) is gone", name, f.acked)
			delete(r.files, name)
			continue
		}
		h, err := e.Open(name)
		if err != nil {
			fail("open %s: %v", name, err)
			continue
		}
		size := h.Size()
		got := make([]byte, size)
		limbo := f.doubt
		if _, err := h.ReadAt(got, 0); err != nil && !errors.Is(err, io.EOF) {
			// What a failed operation left unsynced may read EIO;
			// what was fsynced must not.
			if !limbo || errors.Is(err, syscall.EIO) && f.acked > 0 {
				fail("read %s (%d bytes fsynced, size %d, pending %q): %v", name, f.acked, size, f.pending, err)
			}
		}
		h.Close()
		trunc := f.pending == "truncate" || limbo
		f.pending = ""
		if size < f.acked && !trunc {
			fail("%s: size %d, %d bytes fsynced", name, size, f.acked)
		}
		if size > f.written {
			fail("%s: size %d, only %d written", name, size, f.written)
		}
		whole := true
		for i := int64(0); i < size; i++ {
			want := fullByte(f.tag, i)
			if got[i] == want {
				continue
			}
			if i < f.acked && !trunc {
				fail("%s: byte %d is %d, fsynced %d", name, i, got[i], want)
				break
			}
			if got[i] != 0 {
				fail("%s: byte %d is %d, never written (%d or zeros)", name, i, got[i], want)
				break
			}
			whole = false
		}
		if !whole {
			// Unsynced data lost in the middle: drop the file.
			if err := e.Remove(name); err != nil {
				t.Fatalf("remove %s: %v", name, err)
			}
			delete(r.files, name)
			delete(have, name)
			continue
		}
		f.acked, f.written, f.doubt = size, size, false
	}
	for name := range have {
		if r.gone[name] && r.files[name] == nil {
			fail("%s is back after its remove or rename was acknowledged", name)
		}
		if r.files[name] == nil {
			if err := e.Remove(name); err != nil {
				t.Fatalf("remove %s: %v", name, err)
			}
		}
	}
	clear(r.creating)
	for name := range r.files {
		delete(r.gone, name)
	}
	return failed
}

// probe checks that removing files gives the space back: a 64 KiB file
// written and fsynced succeeds once enough is removed.
func (r *fullRun) probe(p int) {
	t, e := r.t, r.e
	buf := make([]byte, 64<<10)
	for tries := 0; ; tries++ {
		h, err := e.Create("probe")
		if err == nil {
			_, err = h.WriteAt(buf, 0)
			if err == nil {
				err = h.Sync()
			}
			h.Close()
		}
		if err == nil {
			break
		}
		if !errors.Is(err, ErrNoSpace) {
			t.Fatalf("point %d: probe: %v", p, err)
		}
		var biggest string
		for name, f := range r.files {
			if biggest == "" || f.acked > r.files[biggest].acked {
				biggest = name
			}
		}
		if biggest == "" {
			t.Fatalf("point %d: every file removed and a 64 KiB write still gets %v; stats %+v", p, err, e.Stats())
		}
		if err := e.Remove(biggest); err != nil {
			_, serr := e.Stat(biggest)
			t.Fatalf("point %d: remove %s (%+v, stat %v): %v", p, biggest, *r.files[biggest], serr, err)
		}
		delete(r.files, biggest)
		r.gone[biggest] = true
	}
	if err := e.Remove("probe"); err != nil {
		t.Fatal(err)
	}
}

// stopOn sorts the error of a write or sync of f that stops its writer:
// a device fault puts f in limbo; a refusal (no room) is counted and
// reported (refused); anything else is returned, the test's failure.
func (r *fullRun) stopOn(err error, f *fullFile) (refused bool, bad error) {
	if r.fault(err) {
		r.limbo(f)
		return false, nil
	}
	if !r.refused(err) {
		return false, err
	}
	r.enospc.Add(1)
	return true, nil
}
