package pebblefs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/uring"
	"github.com/zonefold/zonefold/zns"
)

// The crash test runs Pebble, writing with pebble.Sync, in a child
// process (this test binary again), and cuts the emulated device's power
// at a random device operation: the child counts every operation that
// changes the device and, at the chosen one, either dies at once (SIGKILL:
// the emu keeps exactly what its last Flush made durable, as a device
// that loses power does), or first freezes the device and tears the last
// write (emu.TearLastWrite: a power cut in the middle of it), or, one
// killing life in eight, freezes it and cuts with each zone keeping none,
// all or a prefix of what it took since the last Flush
// (emu.PowerCutKeeping: a drive cache that wrote some zones back). The child
// logs each operation before committing it and acknowledges it after;
// the parent then recovers the engine and Pebble from the device and
// checks that every acknowledged operation is there and the one in
// flight is there whole or not at all, that Pebble's levels are
// consistent, and that it can write on. The next child starts from that
// device, so cuts also land in recovery's aftermath.

const (
	crashWriters = 2    // goroutines committing at once (group commit)
	crashKeys    = 400  // keys per writer
	crashMaxOps  = 1500 // cut within this many device operations
)

var crashEnv = cutEnv{
	"PEBBLEFS_CRASH_DEV", "PEBBLEFS_CRASH_LOG", "PEBBLEFS_CRASH_CUT", "PEBBLEFS_CRASH_SEED",
}

// cutEnv names the environment variables through which a power-cut
// test's parent tells its child the device, the log to write, where to
// cut ("AT tear|kill|persist|keep KEEP") and which life this is.
type cutEnv struct{ dev, log, cut, life string }

// randomCut picks where a life's power cut lands: at one of the first
// maxOps device changes, every third life tearing that write at a random
// fraction, one in eight of the others cutting with each zone keeping
// part of what it took since the last flush (keep; see cutDevice.keepCut),
// the others killing the process before it. (A tearing life draws a kill
// first and a keeping life draws only that, so the seeds give the cuts
// they always gave.) PEBBLEFS_CUT_KEEP=1 makes every life keep.
func randomCut(rng *rand.Rand, life, maxOps int) string {
	kill := "kill"
	if os.Getenv("PEBBLEFS_CUT_PERSIST") != "" {
		kill = "persist" // (a soak's knob: see cutDevice.persist)
	}
	if life%8 == 3 {
		kill = "keep"
	}
	cut := fmt.Sprintf("%d %s 0", 1+rng.IntN(maxOps), kill)
	if life%3 == 2 {
		cut = fmt.Sprintf("%d tear %.2f", 1+rng.IntN(maxOps), rng.Float64())
	}
	if cutKeepAll() {
		f := strings.Fields(cut)
		cut = f[0] + " keep 0"
	}
	return cut
}

// cutKeepAll reports whether PEBBLEFS_CUT_KEEP is set: a soak's knob
// that makes every power cut of the crash tests a keeping one
// (emu.PowerCutKeeping with keepSome), in place of kills, tears,
// persisting cuts and plain PowerCuts.
func cutKeepAll() bool { return os.Getenv("PEBBLEFS_CUT_KEEP") != "" }

// keepSome is a PowerCutKeeping keep function: each zone keeps none, all,
// or a random block multiple of the n bytes written to it since the last
// flush, a third of the zones each, drawn from rng (seeded by the caller,
// so that a failing seed cuts the same way again, as far as the writes
// before the cut repeat). note, if not nil, hears each zone's share.
func keepSome(rng *rand.Rand, blockSize int64, note func(zone int, k, n int64)) func(zone int, n int64) int64 {
	return func(zone int, n int64) int64 {
		var k int64
		switch rng.IntN(3) {
		case 1:
			k = n
		case 2:
			k = rng.Int64N(n/blockSize+1) * blockSize
		}
		if note != nil {
			note(zone, k, n)
		}
		return k
	}
}

// cutKeeping cuts emu's power with PowerCutKeeping, keepSome drawing
// from a generator seeded with seed, and returns what each zone kept
// ("zone:kept/written ..."), for the test's log.
func cutKeeping(emu *zns.Emu, seed uint64) (string, error) {
	var kept []string
	rng := rand.New(rand.NewPCG(seed, 0x6b656570))
	err := emu.PowerCutKeeping(keepSome(rng, int64(emu.Geometry().BlockSize), func(zone int, k, n int64) {
		kept = append(kept, fmt.Sprintf("%d:%d/%d", zone, k, n))
	}))
	return strings.Join(kept, " "), err
}

// runCutLife runs the child test named child (this test binary again) on
// devName for one life with the given cut, and fails the test unless the
// child died of the power cut (SIGKILL); it returns the child's log.
func runCutLife(t *testing.T, env cutEnv, child, devName string, life int, cut string) string {
	t.Helper()
	logPath := fmt.Sprintf("%s/life%02d.log", t.TempDir(), life)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+child+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env.dev+"="+devName, env.log+"="+logPath,
		env.cut+"="+cut, env.life+"="+strconv.Itoa(life))
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		l, _ := os.ReadFile(logPath)
		t.Fatalf("life %d (cut %s): child ended with %v, not the power cut; errors it met:\n%s\noutput:\n%s\nlog tail:\n%s",
			life, cut, err, ioErrors(l), out, tail(l, 2000))
	}
	return logPath
}

// startCutChild is a child's start: it opens the log the parent named and
// the device wrapped to cut where the parent said. die logs a fatal error
// for the parent and exits (not the power cut, so the parent fails). It
// returns a nil device when the parent set no environment: the caller is
// not a child and skips.
func startCutChild(t *testing.T, env cutEnv) (cd *cutDevice, life int, die func(format string, args ...any)) {
	devName := os.Getenv(env.dev)
	if devName == "" {
		return nil, 0, nil
	}
	logf, err := os.OpenFile(os.Getenv(env.log), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	die = func(format string, args ...any) {
		fmt.Fprintf(logf, "FATAL "+format+"\n", args...)
		os.Exit(3)
	}
	cut := strings.Fields(os.Getenv(env.cut))
	if len(cut) != 3 {
		die("cut %q: want AT tear|kill|persist|keep KEEP", os.Getenv(env.cut))
	}
	life, _ = strconv.Atoi(os.Getenv(env.life))
	at, _ := strconv.ParseInt(cut[0], 10, 64)
	keep, _ := strconv.ParseFloat(cut[2], 64)
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		die("open device: %v", err)
	}
	emu, ok := dev.(*zns.Emu)
	if !ok {
		die("device %s is not an emu device", devName)
	}
	return &cutDevice{Device: dev, emu: emu, cutAt: at, tear: cut[1] == "tear", persist: cut[1] == "persist",
		keepCut: cut[1] == "keep", keepSeed: uint64(at)<<16 ^ uint64(life), keep: keep, log: logf}, life, die
}

// crashValue is the value of key at version ver: a deterministic pattern
// whose length comes from the version, so the parent rebuilds what the
// child wrote from the log line.
func crashValue(key string, ver, n int) []byte {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", key, ver)
	seed := h.Sum64()
	v := make([]byte, n)
	for i := range v {
		seed = seed*6364136223846793005 + 1442695040888963407
		v[i] = byte(seed >> 56)
	}
	return v
}

// crashOp is one key's change in a logged operation.
type crashOp struct {
	kind byte // 'S'et, 'D'elete, 'M'erge
	key  string
	ver  int
	n    int
}

func (o crashOp) String() string { return fmt.Sprintf("%c %s %d %d", o.kind, o.key, o.ver, o.n) }

func parseCrashOp(s string) (crashOp, error) {
	f := strings.Fields(s)
	if len(f) != 4 || len(f[0]) != 1 {
		return crashOp{}, fmt.Errorf("bad op %q", s)
	}
	ver, err1 := strconv.Atoi(f[2])
	n, err2 := strconv.Atoi(f[3])
	if err := errors.Join(err1, err2); err != nil {
		return crashOp{}, fmt.Errorf("bad op %q: %w", s, err)
	}
	return crashOp{kind: f[0][0], key: f[1], ver: ver, n: n}, nil
}

// apply applies ops (one atomic batch) to m.
func apply(m model, ops []crashOp) {
	for _, o := range ops {
		switch o.kind {
		case 'S':
			m[o.key] = crashValue(o.key, o.ver, o.n)
		case 'D':
			delete(m, o.key)
		case 'M':
			m[o.key] = append(append([]byte(nil), m[o.key]...), crashValue(o.key, o.ver, o.n)...)
		}
	}
}

// cutDevice counts the operations that change the device and cuts power
// at the chosen one. After a tear it refuses every change, so that
// nothing more reaches the medium before the process dies.
type cutDevice struct {
	zns.Device
	emu   *zns.Emu
	cutAt int64
	tear  bool
	keep  float64 // fraction of the torn write that lands
	// persist: the process dies but the device keeps every write that
	// completed (the emu is flushed first), as after kill -9 on a
	// device, or a power cut once a drive's cache drained; a plain kill
	// keeps exactly the last Flush. PEBBLEFS_CUT_PERSIST=1 makes every
	// killing life persist.
	persist bool
	// keepCut: the power is cut with emu.PowerCutKeeping, each zone
	// keeping none, all or a prefix of what it took since the last
	// flush (keepSome, seeded with keepSeed, which the cut's operation
	// and the life give): a drive whose volatile cache wrote some zones
	// back and not others. From the cut's operation on, flushes are
	// held back (they never end) while other writes go on for a while
	// (keepHold), so that the cut finds several zones' worth unflushed.
	keepCut  bool
	keepSeed uint64
	holding  atomic.Bool // a keeping cut holds flushes back
	log      *os.File
	n        atomic.Int64
	frozen   atomic.Bool
}

var errFrozen = fmt.Errorf("crash test: device frozen for the power cut: %w", syscall.EIO)

// change is called before each operation that changes the device, with
// the bytes it writes; it returns errFrozen once power is being cut.
func (d *cutDevice) change(bytes int64, do func() error) error {
	if d.frozen.Load() {
		return errFrozen
	}
	n := d.n.Add(1)
	if d.keepCut && n >= d.cutAt {
		// From the cut's operation on, the drive takes writes into its
		// cache but finishes no flush (Flush blocks): what is written
		// meanwhile, in several zones, is what the cut keeps some of.
		// The cut comes keepHold operations later, or keepHoldTime
		// after the first if the writers all wait on a flush first.
		if n == d.cutAt {
			d.holding.Store(true)
			time.AfterFunc(keepHoldTime, d.cutKeepingOnce)
		}
		err := do()
		if n >= d.cutAt+keepHold {
			d.cutKeepingOnce()
		}
		return err
	}
	if n != d.cutAt {
		return do()
	}
	if !d.tear {
		if d.persist {
			if err := d.emu.Flush(); err != nil {
				fmt.Fprintf(d.log, "PERSIST-FAILED %v\n", err)
			}
		}
		fmt.Fprintf(d.log, "CUT %d\n", d.cutAt)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // dying
	}
	d.frozen.Store(true)
	err := do()
	go func() {
		bs := int64(d.emu.Geometry().BlockSize)
		keep := int64(float64(bytes)*d.keep) / bs * bs
		if bytes > 0 && keep < bytes {
			if terr := d.emu.TearLastWrite(keep); terr != nil {
				fmt.Fprintf(d.log, "TEAR-FAILED %v\n", terr)
			} else {
				fmt.Fprintf(d.log, "TORN %d of %d\n", keep, bytes)
			}
		}
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}()
	return err
}

// How long a keeping cut holds flushes back before it cuts: keepHold
// more device changes, or keepHoldTime if fewer come.
const (
	keepHold     = 64
	keepHoldTime = 100 * time.Millisecond
)

// cutKeepingOnce freezes d and cuts keeping (cutKeepingAndDie, in a
// goroutine of its own), unless d is frozen already.
func (d *cutDevice) cutKeepingOnce() {
	if d.frozen.CompareAndSwap(false, true) {
		go d.cutKeepingAndDie()
	}
}

// cutKeepingAndDie cuts the power keeping part of each zone's unflushed
// writes (keepCut), logs what each zone kept, and kills the process.
// Its caller has frozen d.
func (d *cutDevice) cutKeepingAndDie() {
	kept, err := cutKeeping(d.emu, d.keepSeed)
	if err != nil {
		fmt.Fprintf(d.log, "KEEP-FAILED %v\n", err)
	} else {
		fmt.Fprintf(d.log, "KEPT %d (seed %d) %s\n", d.cutAt, d.keepSeed, kept)
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // dying
}

func bufLen(bufs [][]byte) int64 {
	var n int64
	for _, b := range bufs {
		n += int64(len(b))
	}
	return n
}

func (d *cutDevice) Append(zone int, bufs [][]byte, c zns.AppendCompletion) error {
	return d.change(bufLen(bufs), func() error { return d.Device.Append(zone, bufs, c) })
}

func (d *cutDevice) Write(zone int, off int64, bufs [][]byte, c uring.Completion) error {
	return d.change(bufLen(bufs), func() error { return d.Device.Write(zone, off, bufs, c) })
}

func (d *cutDevice) Flush() error {
	if d.holding.Load() {
		select {} // a keeping cut's drive: the power goes before the flush ends
	}
	return d.change(0, d.Device.Flush)
}

func (d *cutDevice) ResetZone(zone int) error {
	return d.change(0, func() error { return d.Device.ResetZone(zone) })
}

func (d *cutDevice) FinishZone(zone int) error {
	return d.change(0, func() error { return d.Device.FinishZone(zone) })
}

// childLogger stops the goroutine that reports a fatal error once the
// power is being cut (the device refuses writes then); before that, a
// fatal error fails the test.
type childLogger struct{ d *cutDevice }

func (childLogger) Infof(string, ...any)  {}
func (childLogger) Errorf(string, ...any) {}
func (l childLogger) Fatalf(format string, args ...any) {
	if l.d.frozen.Load() {
		select {}
	}
	fmt.Fprintf(l.d.log, "FATAL "+format+"\n", args...)
	os.Exit(3)
}

// TestCrashChild is the child's side; it runs only when the parent sets
// its environment.
func TestCrashChild(t *testing.T) {
	cd, life, die := startCutChild(t, crashEnv)
	if cd == nil {
		t.Skip("the crash test's child process (run by TestCrash)")
	}
	seed, at, logf := uint64(life), cd.cutAt, cd.log
	e, err := engine.OpenDevice(cd, testConfig())
	if err != nil {
		if cd.frozen.Load() {
			select {} // the cut landed in the open: power is being cut
		}
		die("open engine: %v", err)
	}
	o := smallOptions(New(e))
	o.FS = crashFS{FS: o.FS, d: cd}
	o.Logger = childLogger{cd}
	db, err := pebble.Open("db", o)
	if err != nil {
		if cd.frozen.Load() {
			select {}
		}
		die("open Pebble: %v", err)
	}
	var wg sync.WaitGroup
	for w := range crashWriters {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for seq := 0; ; seq++ {
				b := crashBatch(rng, db, w, seq, logf)
				if err := b.Commit(pebble.Sync); err != nil {
					if cd.frozen.Load() {
						select {} // power is being cut
					}
					die("writer %d: commit %d: %v", w, seq, err)
				}
				fmt.Fprintf(logf, "A %d %d\n", w, seq)
			}
		})
	}
	go func() {
		time.Sleep(2 * time.Minute)
		die("no power cut after 2 minutes (%d device operations, cut at %d)", cd.n.Load(), at)
	}()
	wg.Wait()
}

// crashBatch is writer w's seq-th batch of random operations on its
// own keys, logged to log ("P w seq ops") before it is committed: what
// the parent's model applies if the log says it was acknowledged.
func crashBatch(rng *rand.Rand, db *pebble.DB, w, seq int, log io.Writer) *pebble.Batch {
	ops := make([]crashOp, 1+rng.IntN(4)*rng.IntN(2))
	for i := range ops {
		kind := "SSSDM"[rng.IntN(5)]
		ops[i] = crashOp{kind: kind, key: fmt.Sprintf("w%d-%04d", w, rng.IntN(crashKeys)), ver: rng.IntN(1 << 30), n: 1 + rng.IntN(2048)}
		if kind == 'M' {
			ops[i].n = 1 + rng.IntN(32)
		}
	}
	parts := make([]string, len(ops))
	for i, op := range ops {
		parts[i] = op.String()
	}
	fmt.Fprintf(log, "P %d %d %s\n", w, seq, strings.Join(parts, ";"))
	b := db.NewBatch()
	for _, op := range ops {
		v := crashValue(op.key, op.ver, op.n)
		switch op.kind {
		case 'S':
			_ = b.Set([]byte(op.key), v, nil)
		case 'D':
			_ = b.Delete([]byte(op.key), nil)
		case 'M':
			_ = b.Merge([]byte(op.key), v, nil)
		}
	}
	return b
}

// crashLife is one child's log, parsed.
type crashLife struct {
	acked   [crashWriters][][]crashOp // acknowledged operations, in order
	pending [crashWriters][]crashOp   // the operation in flight, if any
	end     string                    // the last non-operation line
}

func parseCrashLog(t *testing.T, path string) crashLife {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var l crashLife
	var inflight [crashWriters]map[int][]crashOp
	for i := range inflight {
		inflight[i] = map[int][]crashOp{}
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		kind, rest, _ := strings.Cut(line, " ")
		switch kind {
		case "P", "A":
			f := strings.SplitN(rest, " ", 3)
			w, _ := strconv.Atoi(f[0])
			seq, _ := strconv.Atoi(f[1])
			if kind == "A" {
				l.acked[w] = append(l.acked[w], inflight[w][seq])
				delete(inflight[w], seq)
				continue
			}
			var ops []crashOp
			for _, s := range strings.Split(f[2], ";") {
				op, err := parseCrashOp(s)
				if err != nil {
					t.Fatalf("%s: %v", path, err)
				}
				ops = append(ops, op)
			}
			inflight[w][seq] = ops
		case "FATAL":
			t.Fatalf("child failed before the power cut: %s", line)
		case "IOERR":
			// An error Pebble went on from (a panic on one fails the
			// life before this): shown, not the life's end.
			t.Logf("%s: %s", path, line)
		default:
			l.end = line
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for w := range inflight {
		if len(inflight[w]) > 1 {
			t.Fatalf("writer %d had %d operations in flight", w, len(inflight[w]))
		}
		for _, ops := range inflight[w] {
			l.pending[w] = ops
		}
	}
	return l
}

// checkRecovered compares the recovered DB with the model: every key of
// writer w holds the model's value, or — for all of its keys at once —
// the value with w's operation in flight applied. It returns the model
// the DB holds.
func checkRecovered(t *testing.T, life int, db *pebble.DB, m model, pending [crashWriters][]crashOp) (model, int) {
	t.Helper()
	got := model{}
	it, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		got[string(it.Key())] = append([]byte(nil), it.Value()...)
	}
	if err := it.Close(); err != nil {
		t.Fatalf("life %d: iterate the recovered DB: %v", life, err)
	}
	applied := 0
	want := model{}
	for w := range crashWriters {
		prefix := fmt.Sprintf("w%d-", w)
		without, with := model{}, model{}
		for k, v := range m {
			if strings.HasPrefix(k, prefix) {
				without[k], with[k] = v, v
			}
		}
		apply(with, pending[w])
		mine := model{}
		for k, v := range got {
			if strings.HasPrefix(k, prefix) {
				mine[k] = v
			}
		}
		switch {
		case equalModels(mine, without):
		case equalModels(mine, with):
			if len(pending[w]) > 0 {
				applied++
			}
		default:
			k, g, wv := firstDiff(mine, without)
			t.Fatalf("life %d: writer %d: key %q holds %d bytes (present %v), acknowledged state %d bytes; in flight: %v",
				life, w, k, len(g), g != nil, len(wv), pending[w])
		}
		for k, v := range mine {
			want[k] = v
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Fatalf("life %d: key %q in the DB was never written", life, k)
		}
	}
	return want, applied
}

func equalModels(a, b model) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

func firstDiff(got, want model) (string, []byte, []byte) {
	for k, v := range want {
		if g, ok := got[k]; !ok || !bytes.Equal(g, v) {
			return k, got[k], v
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			return k, g, nil
		}
	}
	return "", nil, nil
}

func TestCrash(t *testing.T) {
	if os.Getenv(crashEnv.dev) != "" {
		t.Skip("in the child")
	}
	lives := 32
	if testing.Short() {
		lives = 8
	}
	devName := emuDevice(t, 64, "2M")
	cfg := testConfig()
	e := formatOpen(t, devName, 0, cfg)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	// ZONEFOLD_PEBBLEFS_CRASH_SEED=N draws the cuts from seed N instead
	// of 17 (for soaks; the children's workloads follow from the lives).
	seed := uint64(17)
	if v := os.Getenv("ZONEFOLD_PEBBLEFS_CRASH_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("ZONEFOLD_PEBBLEFS_CRASH_SEED=%q: %v", v, err)
		}
		seed = n
	}
	rng := rand.New(rand.NewPCG(seed, 17))
	m := model{}
	var acked, applied, torn, kept int
	for life := range lives {
		cut := randomCut(rng, life, crashMaxOps)
		logPath := runCutLife(t, crashEnv, "TestCrashChild", devName, life, cut)
		l := parseCrashLog(t, logPath)
		if strings.HasPrefix(l.end, "TORN") {
			torn++
		}
		if strings.HasPrefix(l.end, "KEPT") {
			kept++
			t.Logf("life %d: %.300s", life, l.end) // the zones' share, the seed
		}
		e, db, m2 := reopenAfterCut(t, life, "cut "+cut, devName, cfg, m, l, &acked, &applied)
		m = m2
		// It writes on: a key of its own, durable, then a clean close.
		if err := db.Set([]byte("parent"), []byte(strconv.Itoa(life)), pebble.Sync); err != nil {
			t.Fatalf("life %d: write after recovery: %v", life, err)
		}
		if err := db.Delete([]byte("parent"), pebble.Sync); err != nil {
			t.Fatalf("life %d: write after recovery: %v", life, err)
		}
		if err := db.Close(); err != nil {
			t.Fatalf("life %d: close Pebble: %v", life, err)
		}
		if err := e.Close(); err != nil {
			t.Fatalf("life %d: close engine: %v", life, err)
		}
	}
	t.Logf("%d power cuts (%d tearing a write, %d keeping part of each zone's unflushed writes), %d acknowledged operations all recovered, %d of the operations in flight at a cut recovered whole, %d keys at the end",
		lives, torn, kept, acked, applied, len(m))
	if acked == 0 {
		t.Fatal("no operation was acknowledged: the cuts came too early to test anything")
	}
}

// reopenAfterCut adds what the life acknowledged (l) to the model m,
// counting it in acked, reopens the engine and Pebble on devName, checks
// every acknowledged operation is there and each in flight is whole or
// absent (those found counted in applied), and that Pebble's levels
// check: the start of every crash test's next life. It returns the
// model of what the database now holds. how says how the life ended,
// for the errors.
func reopenAfterCut(t *testing.T, life int, how, devName string, cfg engine.Config, m model, l crashLife, acked, applied *int) (*engine.Engine, *pebble.DB, model) {
	t.Helper()
	for w := range crashWriters {
		for _, ops := range l.acked[w] {
			apply(m, ops)
			*acked++
		}
	}
	e := reopenEngine(t, devName, cfg)
	db, err := pebble.Open("db", smallOptions(New(e)))
	if err != nil {
		t.Fatalf("life %d (%s, ended %q): reopen Pebble: %v", life, how, l.end, err)
	}
	m, n := checkRecovered(t, life, db, m, l.pending)
	*applied += n
	if err := db.CheckLevels(nil); err != nil {
		t.Fatalf("life %d (%s): CheckLevels after recovery: %v", life, how, err)
	}
	return e, db, m
}

// ioErrors is the errors a child's log records (crashFS): an engine
// error Pebble panicked on shows here, not in the panic.
func ioErrors(log []byte) string {
	var errs []string
	for _, ln := range strings.Split(string(log), "\n") {
		if strings.HasPrefix(ln, "IOERR ") {
			errs = append(errs, ln)
		}
	}
	if len(errs) == 0 {
		return "(none)"
	}
	return strings.Join(errs, "\n")
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
