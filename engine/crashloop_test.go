package engine

// The power-cut loop: the engine in process on an emulated device small
// enough that GC runs all the time, under concurrent writers that fsync
// and two namespace churners (whose durable operations share flushes),
// with the power cut at a random operation
// count: most cuts close the device at once, mid-flight (what was not
// flushed is lost, whatever the engine is doing, GC included), the rest
// stop the engine and cut with PowerCut, TearLastWrite or
// PowerCutKeeping (each zone keeps a prefix of its unflushed writes). After each cut
// fsck must find no damage and every acknowledged byte and namespace
// operation must be there.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zonefold/zonefold/internal/stampfile"
	"github.com/zonefold/zonefold/zns"
)

const (
	cutBlock   = 4096
	cutFiles   = 3
	cutBlocks  = 256 // 1 MiB per stamped file
	cutChurn   = 5   // churn files kept
	cutMaxData = 160 << 10
)

// churnFile is a churn file's acknowledged content; pending, if set, is
// an operation in flight whose effect may or may not be there.
type churnFile struct {
	data    []byte
	pending *churnOp
}

type churnOp struct {
	kind   string // "remove", "rename", "truncate"
	to     string
	size   int
	before []byte
}

type cutRun struct {
	t       *testing.T
	rng     *rand.Rand
	devName string
	cfg     Config
	e       *Engine

	mu       sync.Mutex
	stamped  [cutFiles]*stampfile.File
	churn    map[string]*churnFile
	creating map[string]bool // creates in flight
	gone     map[string]bool // removed or renamed away, acknowledged
	churnSeq int

	points, midFlight, gcCuts, losses int
	stops                             []string // why clients stopped, this point

	// trace is every operation of the run, for a failure's post-mortem
	// (ZONEFOLD_POWERCUT_KEEP names a directory that receives it and the
	// device image of a failing point).
	trace []string
}

// stopped records why a client stopped.
func (r *cutRun) stopped(who string, err error) {
	r.mu.Lock()
	r.stops = append(r.stops, fmt.Sprintf("%s: %v", who, err))
	r.mu.Unlock()
}

func (r *cutRun) logf(format string, args ...any) {
	r.mu.Lock()
	r.trace = append(r.trace, fmt.Sprintf("p%d ", r.points)+fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

// TestPowerCutLoop runs 220 power cuts (4 seeds of 55); under the race
// detector, which slows the engine several times over, and with -short,
// 30 (make test runs the full loop without the race detector too).
// ZONEFOLD_POWERCUT_SEEDS=FIRST-LAST runs those seeds instead, and
// ZONEFOLD_POWERCUT_KEEP=DIR keeps the device image and the operation
// trace of a failing point there.
// envSeeds is the seeds FIRST to LAST that the environment variable
// name gives as FIRST-LAST, or nil if it is unset: the crash tests'
// opt-in soaks with seeds CI does not run.
func envSeeds(t *testing.T, name string) []uint64 {
	v := os.Getenv(name)
	if v == "" {
		return nil
	}
	var a, b uint64
	if _, err := fmt.Sscanf(v, "%d-%d", &a, &b); err != nil || a > b {
		t.Fatalf("%s=%q: want FIRST-LAST", name, v)
	}
	var seeds []uint64
	for s := a; s <= b; s++ {
		seeds = append(seeds, s)
	}
	return seeds
}

func TestPowerCutLoop(t *testing.T) {
	seeds, points := []uint64{1, 2, 3, 4}, 55
	if testing.Short() || raceEnabled {
		seeds, points = []uint64{1}, 30
	}
	if s := envSeeds(t, "ZONEFOLD_POWERCUT_SEEDS"); s != nil {
		seeds, points = s, 55
	}
	// A dead device makes every background pass fail loudly: keep the
	// test's output to what it checks.
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	total := 0
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := &cutRun{t: t, rng: rand.New(rand.NewPCG(seed, 21)), devName: cutDevice(t),
				cfg:   Config{CacheBytes: 2 << 20, DirtyLimit: 1 << 20, MaxOrder: 4},
				churn: map[string]*churnFile{}, creating: map[string]bool{}, gone: map[string]bool{}}
			r.e = formatOpen(t, r.devName, r.cfg)
			r.setup()
			for range points {
				r.point()
			}
			if err := r.e.Close(); err != nil {
				t.Fatal(err)
			}
			checkFsck(t, r.devName)
			total += r.points
			t.Logf("seed %d: %d power cuts (%d mid-flight, %d during a GC pass), %d lost acknowledged data",
				seed, r.points, r.midFlight, r.gcCuts, r.losses)
		})
	}
	t.Logf("%d power cuts in all", total)
}

// cutDevice is the loop's emulated device, in memory when /dev/shm is
// there: the power cut is the emulator's (its zone table goes back to
// the last flush), so the backing file's own syncs, hundreds of them a
// point, need not reach a disk.
func cutDevice(t *testing.T) string { return memDevice(t, 32, "256K") }

// memDevice is an emulated zoned device in /dev/shm where there is one
// (else in the test's temp dir), for tests whose many flushes need not
// reach a disk.
func memDevice(t *testing.T, zones int, zoneSize string) string {
	dir := ""
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "zonefold-test-"); err == nil {
			dir = d
			t.Cleanup(func() { os.RemoveAll(d) })
		}
	}
	if dir == "" {
		dir = t.TempDir()
	}
	return fmt.Sprintf("emu:%s?zone_size=%s&zones=%d", filepath.Join(dir, "dev"), zoneSize, zones)
}

func (r *cutRun) setup() {
	buf := make([]byte, cutBlocks*cutBlock)
	for i := range r.stamped {
		f := stampfile.New(fmt.Sprintf("s%d", i), i, cutBlocks, cutBlock)
		f.Initial(buf)
		h, err := r.e.Create(f.Name)
		if err != nil {
			r.t.Fatal(err)
		}
		if _, err := h.WriteAt(buf, 0); err != nil {
			r.t.Fatal(err)
		}
		if err := h.Sync(); err != nil {
			r.t.Fatal(err)
		}
		r.stamped[i] = f
	}
}

// point runs the workload until a random number of operations, cuts
// the power, recovers and checks.
func (r *cutRun) point() {
	t := r.t
	r.points++
	r.mu.Lock()
	r.stops = nil
	r.mu.Unlock()
	cutAt := int64(20 + r.rng.IntN(250))
	// The cut's kind (cutKindOf): 5 in 8 mid-flight.
	mode := r.rng.IntN(8)
	ctx, cancel := context.WithCancel(context.Background())
	var ops atomic.Int64
	reached := make(chan struct{})
	var once sync.Once
	tick := func() {
		if ops.Add(1) >= cutAt {
			once.Do(func() { close(reached) })
		}
	}
	var wg sync.WaitGroup
	for i := range r.stamped {
		seed := r.rng.Uint64()
		wg.Go(func() { r.stopped(fmt.Sprintf("writer %d", i), r.writer(ctx, i, seed, tick)) })
	}
	// Two churners, on names of their own (c..., d...): their durable
	// namespace operations run at once and share flushes (group commit),
	// so cuts fall between and inside such groups.
	for _, prefix := range []string{"c", "d"} {
		churnSeed := r.rng.Uint64()
		wg.Go(func() { r.stopped("churner "+prefix, r.churner(ctx, churnSeed, tick, prefix)) })
	}
	// Every client stopping before the cut (on an error: a client stops
	// at its first) is not a hang: say why they stopped.
	allStopped := make(chan struct{})
	go func() { wg.Wait(); close(allStopped) }()

	switch awaitCut(reached, allStopped, &ops, 30*time.Second) {
	case cutClientsStopped:
		r.mu.Lock()
		why := slices.Clone(r.stops)
		r.mu.Unlock()
		t.Fatalf("point %d: every client stopped before the cut (%d of %d ops): %v; stats %+v",
			r.points, ops.Load(), cutAt, why, r.e.Stats())
	case cutStalled:
		t.Fatalf("point %d: no operation completed for 30 s (%d of %d); stats %+v; every goroutine:\n%s",
			r.points, ops.Load(), cutAt, r.e.Stats(), goroutineStacks())
	}
	emu := r.e.dev.(*zns.Emu)
	inGC := r.e.stats.gcActive.Load() > 0
	kind := cutKindOf(mode)
	if kind == cutMidFlight {
		r.midFlight++
		if inGC {
			r.gcCuts++
		}
	}
	powerCut(t, r.e, emu, kind, func() { cancel(); r.waitWorkers(&wg) },
		func() int64 { return int64(r.rng.IntN(4)) * BlockSize }, r.keepSome)

	r.logf("cut (mode %d, %d ops, during GC %v)", mode, cutAt, inGC)
	keep := os.Getenv("ZONEFOLD_POWERCUT_KEEP")
	image := ""
	if keep != "" {
		image = r.saveImage(keep)
	}
	bad := false
	if err := fsckAfterCut(t, r.devName); err != nil {
		bad = true
		t.Errorf("point %d (mode %d): fsck after the power cut: %v", r.points, mode, err)
	}
	r.e = reopen(t, r.devName, r.cfg)
	if n := r.check(); n > 0 {
		bad = true
		r.losses++
		t.Errorf("point %d (mode %d, %d ops, during GC %v): %d checks failed", r.points, mode, cutAt, inGC, n)
	}
	if bad && image != "" {
		name := filepath.Join(keep, fmt.Sprintf("%s-p%d", strings.ReplaceAll(t.Name(), "/", "_"), r.points))
		_ = os.Rename(image, name+".img")
		r.mu.Lock()
		_ = os.WriteFile(name+".trace", []byte(strings.Join(r.trace, "\n")+"\n"), 0o644)
		r.mu.Unlock()
		t.Logf("kept %s.img and %s.trace (device %s)", name, name, r.devName)
	}
}

// fataler is what the power-cut steps need of a test: a *testing.T, or
// h23c's rapid.TB.
type fataler interface {
	Helper()
	Fatal(args ...any)
}

// cutKind is how a power-cut test's cut ends the engine (powerCut).
type cutKind int

const (
	// cutTear: the clients stop, the engine crashes, and the device
	// loses what was not flushed but for the last write, torn (a plain
	// cut if it cannot be torn).
	cutTear cutKind = iota
	// cutPlain: the clients stop, the engine crashes, and the device
	// loses what was not flushed (PowerCut).
	cutPlain
	// cutKeeping: as cutPlain, but each zone keeps a prefix of what was
	// written to it since the last flush (PowerCutKeeping), as a
	// drive's volatile cache may have written back some zones and not
	// others.
	cutKeeping
	// cutMidFlight: the power fails now: the device closes first, and
	// nothing that was not flushed survives, whatever the engine was in
	// the middle of; then the clients stop and the engine crashes.
	cutMidFlight
)

// cutKindOf is the cut the loops draw as mode: 0 tears the last write,
// 1 cuts plainly, 2 keeps some zones' unflushed writes, the rest (the
// most) cut mid-flight.
func cutKindOf(mode int) cutKind { return cutKind(min(mode, int(cutMidFlight))) }

// powerCut cuts the power of emu, e's device, as kind says, and closes
// it: stop stops the clients and returns once they have; tear (called
// for cutTear only, so a seeded run draws as before) is the bytes the
// torn write keeps; keep is what a zone keeps of its n unflushed bytes
// (cutKeeping). It reports whether the last write was torn or zones kept
// unflushed writes.
func powerCut(t fataler, e *Engine, emu *zns.Emu, kind cutKind, stop func(), tear func() int64, keep func(zone int, n int64) int64) (torn bool) {
	t.Helper()
	if kind == cutMidFlight {
		emu.Close()
		stop()
		e.crashForTest()
		return false
	}
	stop()
	e.crashForTest()
	switch kind {
	case cutTear:
		torn = emu.TearLastWrite(tear()) == nil
	case cutKeeping:
		if err := emu.PowerCutKeeping(keep); err != nil {
			t.Fatal(err)
		}
		torn = true
	}
	if !torn {
		if err := emu.PowerCut(); err != nil {
			t.Fatal(err)
		}
	}
	emu.Close()
	return torn
}

// fsckAfterCut runs fsck on the device devName, closed by a power cut:
// an error says what it found wrong (fsck's error and problems), nil
// that it found nothing.
func fsckAfterCut(t fataler, devName string) error {
	t.Helper()
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Fsck(dev)
	dev.Close()
	if err != nil || len(rep.Problems) > 0 {
		var problems []string
		if rep != nil {
			problems = rep.Problems
		}
		return fmt.Errorf("%v %v", err, problems)
	}
	return nil
}

// cutWait is how awaitCut's wait ended.
type cutWait int

const (
	cutReached        cutWait = iota // the workload reached the cut
	cutClientsStopped                // every client stopped first
	cutStalled                       // no operation completed for the stall
)

// awaitCut waits until reached closes (the workload made the operations
// the cut comes after). It is a hang detector, not a timing test: the
// workload must keep making operations (ops), and it returns
// cutClientsStopped if every client stops first (allStopped closes:
// clients stop at their first error, which is not a hang), cutStalled if
// ops stays still for stall.
func awaitCut(reached, allStopped <-chan struct{}, ops *atomic.Int64, stall time.Duration) cutWait {
	last, lastAt := int64(-1), time.Now()
	for {
		select {
		case <-reached:
			return cutReached
		case <-allStopped:
			return cutClientsStopped
		case <-time.After(100 * time.Millisecond):
			if n := ops.Load(); n != last {
				last, lastAt = n, time.Now()
			} else if time.Since(lastAt) > stall {
				return cutStalled
			}
		}
	}
}

// keepSome is how much of the n bytes written to zone since the last
// flush a PowerCutKeeping cut keeps (keepDrawn), logged.
func (r *cutRun) keepSome(zone int, n int64) int64 {
	k := keepDrawn(r.rng, n)
	r.logf("cut keeps %d of %d bytes in zone %d", k, n, zone)
	return k
}

// keepDrawn draws how much of a zone's n unflushed bytes a cutKeeping
// cut keeps: none, all, or a random number of blocks, a third of the
// zones each.
func keepDrawn(rng *rand.Rand, n int64) int64 {
	switch rng.IntN(3) {
	case 1:
		return n
	case 2:
		return rng.Int64N(n/BlockSize+1) * BlockSize
	}
	return 0
}

// saveImage copies the device's backing file into dir.
func (r *cutRun) saveImage(dir string) string {
	path := strings.TrimPrefix(r.devName, "emu:")
	path = path[:strings.IndexByte(path, '?')]
	data, err := os.ReadFile(path)
	if err != nil {
		r.t.Fatal(err)
	}
	out := filepath.Join(dir, fmt.Sprintf("last-%d.img", os.Getpid()))
	if err := os.WriteFile(out, data, 0o644); err != nil {
		r.t.Fatal(err)
	}
	return out
}

func (r *cutRun) waitWorkers(wg *sync.WaitGroup) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		r.t.Fatalf("point %d: clients did not stop within a minute of the power cut; every goroutine:\n%s",
			r.points, goroutineStacks())
	}
}

// goroutineStacks is every goroutine's stack, with how long each has
// been blocked, for a watchdog that fires: a hang is diagnosed from
// where everything waits.
func goroutineStacks() string {
	var b strings.Builder
	if err := pprof.Lookup("goroutine").WriteTo(&b, 2); err != nil {
		return err.Error()
	}
	return b.String()
}

// writer overwrites runs of one stamped file and fsyncs every few writes.
func (r *cutRun) writer(ctx context.Context, i int, seed uint64, tick func()) error {
	rng := rand.New(rand.NewPCG(seed, 5))
	f := r.stamped[i]
	h, err := r.e.Open(f.Name)
	if err != nil {
		return err
	}
	buf := make([]byte, 16*cutBlock)
	var since []int
	for w := 0; ctx.Err() == nil; w++ {
		n := 1 + rng.IntN(16)
		b := rng.IntN(cutBlocks - n + 1)
		r.mu.Lock()
		var k uint64
		k, since = f.Begin(b, n, since)
		r.mu.Unlock()
		f.Fill(buf, b, n, k)
		if _, err := h.WriteAtContext(ctx, buf[:n*cutBlock], int64(b)*cutBlock); err != nil {
			return err
		}
		r.logf("write %s blocks %d+%d stamp %d", f.Name, b, n, k)
		tick()
		if w%6 != 5 {
			continue
		}
		if err := h.SyncContext(ctx); err != nil {
			return err
		}
		r.logf("synced %s", f.Name)
		tick()
		r.mu.Lock()
		f.Synced(since)
		r.mu.Unlock()
		since = since[:0]
	}
	return ctx.Err()
}

// churner creates, fills and fsyncs small files, renames and truncates
// them, and removes the oldest, among the names that start with prefix:
// namespace operations and garbage.
func (r *cutRun) churner(ctx context.Context, seed uint64, tick func(), prefix string) error {
	rng := rand.New(rand.NewPCG(seed, 6))
	e := r.e
	for ctx.Err() == nil {
		r.mu.Lock()
		names := make([]string, 0, len(r.churn))
		for n := range r.churn {
			if strings.HasPrefix(n, prefix) {
				names = append(names, n)
			}
		}
		slices.Sort(names)
		r.mu.Unlock()
		switch op := rng.IntN(10); {
		case len(names) >= cutChurn || (op < 2 && len(names) > 0):
			name := names[0]
			r.mu.Lock()
			cf := r.churn[name]
			cf.pending = &churnOp{kind: "remove"}
			r.mu.Unlock()
			fi, _ := e.Stat(name)
			// Half the removes are deferred, acknowledged by the
			// SyncNamespace after them: held for a pack (metaPack)
			// with what the other churner logs meanwhile.
			deferred := rng.IntN(2) == 0
			r.logf("remove %s (id %d, deferred %v) ...", name, fi.ID, deferred)
			if deferred {
				if err := e.RemoveDeferred(name); err != nil {
					return err
				}
				if err := e.SyncNamespace(); err != nil {
					return err
				}
			} else if err := e.Remove(name); err != nil {
				return err
			}
			r.logf("removed %s", name)
			r.mu.Lock()
			delete(r.churn, name)
			r.gone[name] = true
			r.mu.Unlock()
		case op < 4 && len(names) > 0:
			name := names[rng.IntN(len(names))]
			r.mu.Lock()
			r.churnSeq++
			to := fmt.Sprintf("%s%04d", prefix, r.churnSeq)
			cf := r.churn[name]
			cf.pending = &churnOp{kind: "rename", to: to}
			r.mu.Unlock()
			fi, _ := e.Stat(name)
			r.logf("rename %s (id %d) -> %s ...", name, fi.ID, to)
			if err := e.Rename(name, to); err != nil {
				return err
			}
			r.logf("renamed %s -> %s", name, to)
			r.mu.Lock()
			delete(r.churn, name)
			r.gone[name] = true
			cf.pending = nil
			r.churn[to] = cf
			r.mu.Unlock()
		case op < 6 && len(names) > 0:
			name := names[rng.IntN(len(names))]
			r.mu.Lock()
			cf := r.churn[name]
			size := rng.IntN(len(cf.data) + 1)
			cf.pending = &churnOp{kind: "truncate", size: size}
			r.mu.Unlock()
			fi, _ := e.Stat(name)
			r.logf("truncate %s (id %d) %d -> %d ...", name, fi.ID, len(cf.data), size)
			h, err := e.Open(name)
			if err != nil {
				return err
			}
			if err := h.Truncate(int64(size)); err != nil {
				return err
			}
			r.logf("truncated %s", name)
			r.mu.Lock()
			cf.data = cf.data[:size]
			cf.pending = nil
			r.mu.Unlock()
		default:
			r.mu.Lock()
			r.churnSeq++
			name := fmt.Sprintf("%s%04d", prefix, r.churnSeq)
			r.creating[name] = true
			r.mu.Unlock()
			data := make([]byte, 1+rng.IntN(cutMaxData))
			for i := range data {
				data[i] = byte(rng.Uint32())
			}
			// Half the creates are deferred: the fsync below
			// acknowledges them (it lands what is held).
			flags := OCreate
			if rng.IntN(2) == 0 {
				flags |= ODeferSync
			}
			h, err := e.OpenFile(name, flags)
			if err != nil {
				return err
			}
			r.logf("created %s (id %d, flags %#x), writing %d", name, h.Stat().ID, flags, len(data))
			if _, err := h.WriteAtContext(ctx, data, 0); err != nil {
				return err
			}
			if err := h.SyncContext(ctx); err != nil {
				return err
			}
			r.logf("synced %s (%d bytes)", name, len(data))
			r.mu.Lock()
			delete(r.creating, name)
			r.churn[name] = &churnFile{data: data}
			r.mu.Unlock()
		}
		tick()
	}
	return ctx.Err()
}

// check compares what the reopened engine holds with everything
// acknowledged, adopts what survived of the rest, and returns the failed
// checks.
func (r *cutRun) check() int {
	t := r.t
	e := r.e
	failed := 0
	fail := func(format string, args ...any) {
		failed++
		if failed <= 5 {
			t.Errorf("point %d: %s", r.points, fmt.Sprintf(format, args...))
		}
	}
	have := map[string]bool{}
	for _, fi := range e.List() {
		have[fi.Name] = true
		if r.gone[fi.Name] {
			fail("%s is back after its remove or rename was acknowledged", fi.Name)
		}
	}
	buf := make([]byte, cutBlocks*cutBlock)
	for _, f := range r.stamped {
		h, err := e.Open(f.Name)
		if err != nil {
			fail("stamped file %s: %v", f.Name, err)
			continue
		}
		if h.Size() != int64(len(buf)) {
			fail("stamped file %s: size %d", f.Name, h.Size())
		}
		clear(buf)
		if _, err := h.ReadAt(buf, 0); err != nil && !errors.Is(err, io.EOF) {
			fail("stamped file %s: %v", f.Name, err)
		}
		bad := 0
		for b := range cutBlocks {
			if err := f.Check(b, buf[b*cutBlock:(b+1)*cutBlock]); err != nil {
				bad++
				if bad <= 3 {
					fail("stamped file %v", err)
				}
			}
		}
	}
	read := func(name string) []byte {
		h, err := e.Open(name)
		if err != nil {
			return nil
		}
		got := make([]byte, h.Size())
		n, err := h.ReadAt(got, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			fail("read %s: %v", name, err)
		}
		return got[:n]
	}
	for name, cf := range r.churn {
		p := cf.pending
		cf.pending = nil
		switch {
		case p != nil && p.kind == "remove" && !have[name]:
			delete(r.churn, name)
			r.gone[name] = true
		case p != nil && p.kind == "rename" && !have[name] && have[p.to]:
			delete(r.churn, name)
			r.gone[name] = true
			r.churn[p.to] = cf
			if got := read(p.to); !bytes.Equal(got, cf.data) {
				fail("%s renamed to %s: %d bytes, acknowledged %d", name, p.to, len(got), len(cf.data))
			}
		case !have[name]:
			fail("%s (%d bytes, acknowledged) is gone", name, len(cf.data))
			delete(r.churn, name)
		default:
			got := read(name)
			ok := bytes.Equal(got, cf.data)
			if !ok && p != nil && p.kind == "truncate" && bytes.Equal(got, cf.data[:p.size]) {
				ok = true
				cf.data = cf.data[:p.size]
			}
			if !ok {
				fail("%s: %d bytes, acknowledged %d (pending %+v)", name, len(got), len(cf.data), p)
			}
		}
	}
	// Creates in flight, renames to a name never acknowledged: nothing
	// acknowledged lives there.
	known := map[string]bool{}
	for _, f := range r.stamped {
		known[f.Name] = true
	}
	for name := range r.churn {
		known[name] = true
	}
	for name := range have {
		if !known[name] {
			if err := e.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("remove %s: %v", name, err)
			}
			r.gone[name] = true
		}
	}
	clear(r.creating)
	return failed
}
