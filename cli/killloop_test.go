package cli

// The kill -9 loop: the real daemon on a device small enough that GC runs
// all the time, under three kinds of clients at once (`zonefold put` and
// `zonefold rm`, raw protocol writes with fsync through the Go client,
// fio with end_fsync through the external engine), killed with SIGKILL
// at seeded moments, about half of them while a GC pass is relocating or
// resetting a zone. After each kill: `zonefold fsck` must say clean, the
// daemon restarts, and every acknowledged byte must read back exactly.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/zonefold/zonefold/internal/stampfile"
	"github.com/zonefold/zonefold/internal/syncbuf"
	"github.com/zonefold/zonefold/server"
)

const (
	killBlock     = 4096
	killRawFiles  = 3
	killRawBlocks = 512 // 2 MiB per raw file
	killMaxPuts   = 6
	killMaxFios   = 3
	killFioSize   = 1 << 20
)

// killSeeds are the kill schedules make test runs; ZONEFOLD_KILL_SEEDS
// (comma separated) replaces them, ZONEFOLD_KILL_POINTS the points per
// seed.
var killSeeds = []uint64{1, 2}

// TestKill9Loop is the judge of crash safety: it fails if any kill point
// loses an acknowledged byte or leaves a device fsck does not call clean.
func TestKill9Loop(t *testing.T) {
	bin := buildZonefold(t)
	seeds := killSeeds
	if s := os.Getenv("ZONEFOLD_KILL_SEEDS"); s != "" {
		seeds = nil
		for _, f := range strings.Split(s, ",") {
			v, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
			if err != nil {
				t.Fatalf("ZONEFOLD_KILL_SEEDS: %v", err)
			}
			seeds = append(seeds, v)
		}
	}
	points := 16 // per seed
	if testing.Short() {
		points = 4
	}
	if s := os.Getenv("ZONEFOLD_KILL_POINTS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("ZONEFOLD_KILL_POINTS: %v", err)
		}
		points = n
	}
	fio, fioEngine := killFioEnv(t)
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			dir := t.TempDir()
			r := &killRun{t: t, bin: bin, seed: seed, rng: rand.New(rand.NewPCG(seed, 12)),
				dev:    fmt.Sprintf("emu:%s?zone_size=1M&zones=24", filepath.Join(dir, "dev")),
				socket: filepath.Join(dir, "zf.sock"), dir: dir, fio: fio, fioEngine: fioEngine,
				puts: map[string][]byte{}}
			if os.Getenv("ZONEFOLD_KILL_RECOVERY") != "" {
				r.recRng = rand.New(rand.NewPCG(seed, 33))
			}
			r.run(points)
		})
	}
}

// killFioEnv finds fio and the engine; the fio clients are left out
// without them, unless ZONEFOLD_REQUIRE_FIO is set (make test sets it).
func killFioEnv(t *testing.T) (string, string) {
	fio, err := exec.LookPath("fio")
	eng := os.Getenv("ZONEFOLD_FIO_ENGINE")
	if eng == "" {
		eng, _ = filepath.Abs("../build/fio/zonefold-engine.so")
	}
	if err == nil {
		_, err = os.Stat(eng)
	}
	if err != nil {
		if os.Getenv("ZONEFOLD_REQUIRE_FIO") != "" {
			t.Fatalf("fio or its engine missing (make fio-engine): %v", err)
		}
		t.Logf("no fio clients: %v", err)
		return "", ""
	}
	return fio, eng
}

// fioSet is one fio run whose end_fsync was acknowledged.
type fioSet struct{ file string }

type killRun struct {
	t                *testing.T
	bin              string
	seed             uint64
	rng              *rand.Rand
	dev, socket, dir string
	fio, fioEngine   string

	daemon *exec.Cmd
	exited chan struct{}
	stderr *syncbuf.Buffer

	mu       sync.Mutex // guards the model while clients run
	raw      [killRawFiles]*stampfile.File
	puts     map[string][]byte // acknowledged puts not removed
	putOrder []string
	fios     []fioSet
	removing map[string]bool // removes in flight at the kill
	ns       nsModel         // the namespace client's files (killns_test.go)
	gone     map[string]bool // removes acknowledged: names are never reused

	putSeq, fioSeq int
	stragglers     atomic.Int64 // client processes that outlived their leader
	gcPoints       int
	// recRng, when ZONEFOLD_KILL_RECOVERY is set, draws a second kill
	// after each first, that long into the restart (up to lastStart, how
	// long the last restart took to serve): a kill -9 during recovery.
	// A draw of its own, so that a seed's kill points stay as they were.
	recRng     *rand.Rand
	lastStart  time.Duration
	recKills   [2]int // second kills before and after the daemon served
	pointNo    int    // the kill point running
	lossPoints []int
	fsckPoints []int
}

func (r *killRun) run(points int) {
	t := r.t
	r.removing = map[string]bool{}
	r.gone = map[string]bool{}
	r.ns.files, r.ns.acked, r.ns.killed, r.ns.hist = map[string][]byte{}, map[string]int{}, map[string]int{}, map[string][]string{}
	r.ns.busy, r.ns.deferred = map[string]bool{}, map[*nsOp]bool{}
	r.serve(true)
	t.Cleanup(func() {
		if r.daemon != nil {
			r.daemon.Process.Kill()
			<-r.exited
		}
	})
	r.setupRaw()
	for p := 1; p <= points; p++ {
		r.point(p)
	}
	r.stop()
	t.Logf("seed %d: %d kill points, %d during GC; acknowledged data lost at %d %v; fsck not clean at %d %v; %d client processes outlived their leader",
		r.seed, points, r.gcPoints, len(r.lossPoints), r.lossPoints, len(r.fsckPoints), r.fsckPoints, r.stragglers.Load())
	t.Logf("seed %d: namespace clients acknowledged %v; in flight at a kill %v", r.seed, r.ns.acked, r.ns.killed)
	if r.recRng != nil {
		t.Logf("seed %d: second kills during the restart: %d before it served, %d after", r.seed, r.recKills[0], r.recKills[1])
	}
	if len(r.lossPoints) > 0 || len(r.fsckPoints) > 0 {
		t.Errorf("seed %d: acknowledged data lost at %d of %d kill points, fsck not clean at %d", r.seed, len(r.lossPoints), points, len(r.fsckPoints))
	}
	if r.gcPoints < points/3 {
		t.Errorf("only %d of %d kill points hit a GC pass", r.gcPoints, points)
	}
}

// serve starts the daemon and waits until it serves.
func (r *killRun) serve(format bool) {
	r.t.Helper()
	args := []string{"serve", r.dev, "--socket", r.socket, "--cache", "8M"}
	if format {
		args = append(args, "--format")
	}
	cmd := exec.Command(r.bin, args...)
	r.stderr = &syncbuf.Buffer{}
	cmd.Stderr = r.stderr
	exited := runServe(r.t, cmd, r.stderr)
	r.daemon, r.exited = cmd, exited
}

// kill sends SIGKILL and waits for the daemon to die.
func (r *killRun) kill() {
	r.daemon.Process.Signal(syscall.SIGKILL)
	<-r.exited
	r.daemon = nil
}

// stop ends the last daemon with SIGTERM, which must exit 0.
func (r *killRun) stop() {
	r.daemon.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
	case <-time.After(2 * time.Minute):
		r.t.Fatalf("daemon did not exit after SIGTERM\n%s", r.stderr)
	}
	if !r.daemon.ProcessState.Success() {
		r.t.Errorf("daemon exit after SIGTERM: %v\n%s", r.daemon.ProcessState, r.stderr)
	}
	r.daemon = nil
}

func (r *killRun) dial() *server.Client {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := server.Dial(ctx, r.socket, 4<<20)
	if err != nil {
		r.t.Fatalf("dial daemon: %v\n%s", err, r.stderr)
	}
	return c
}

// setupRaw writes every block of the raw files once and fsyncs them.
func (r *killRun) setupRaw() {
	c := r.dial()
	defer c.Close()
	ctx := context.Background()
	buf := make([]byte, killRawBlocks*killBlock)
	for i := range r.raw {
		f := stampfile.New(fmt.Sprintf("raw.%d", i), i, killRawBlocks, killBlock)
		f.Initial(buf)
		h, _, err := c.Open(ctx, f.Name, server.OpenCreate|server.OpenTrunc)
		if err != nil {
			r.t.Fatal(err)
		}
		if _, err := c.WriteAt(ctx, h, buf, 0); err != nil {
			r.t.Fatal(err)
		}
		if err := c.Fsync(ctx, h); err != nil {
			r.t.Fatal(err)
		}
		r.raw[i] = f
	}
}

// point runs the clients, kills the daemon, checks, and restarts it.
func (r *killRun) point(p int) {
	t := r.t
	r.pointNo = p
	// Every other point aims at a GC pass. A draw per point decided
	// that once, and a seed could draw few (seed 1001: 1 of 16, below
	// the third run checks for); it is still drawn, so the draws after
	// it, and a seed's other choices, stay as they were.
	_ = r.rng.IntN(2)
	wantGC := p%2 == 1
	warm := time.Duration(100+r.rng.IntN(600)) * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range r.raw {
		seed := r.rng.Uint64()
		wg.Go(func() { r.rawWriter(ctx, i, seed) })
	}
	putSeed := r.rng.Uint64()
	wg.Go(func() { r.putClient(ctx, putSeed) })
	nsSeed := r.rng.Uint64()
	for id := range nsClients {
		// The first client's seed as before: a seed's kill points
		// stay as they were.
		wg.Go(func() { r.nsClient(ctx, id, nsSeed^uint64(id)*0x9e3779b97f4a7c15) })
	}
	if r.fio != "" {
		fioSeed := r.rng.Uint64()
		wg.Go(func() { r.fioClient(ctx, fioSeed) })
	}

	mon := r.dial()
	time.Sleep(warm)
	polled := time.Now()
	inGC := false
	deadline := time.Now().Add(2 * time.Second)
	// Kill while a GC pass relocates or resets a zone, or while none
	// does, as the seed says (GC runs most of the time on this device).
	for {
		st, err := mon.Stats(context.Background())
		if err != nil {
			break
		}
		inGC = st.GCActive > 0
		if inGC == wantGC || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	waited := time.Since(polled)
	r.kill()
	mon.Close()
	cancel()
	stopped := time.Now()
	wg.Wait()
	waited2 := time.Since(stopped)
	if inGC {
		r.gcPoints++
	}

	killed := time.Now()
	// The device as the kill left it.
	out, err := exec.Command(r.bin, "fsck", r.dev).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "clean") {
		r.fsckPoints = append(r.fsckPoints, p)
		t.Errorf("point %d: fsck after kill -9: %v\n%s", p, err, out)
	}
	fscked := time.Now()
	var saved string
	if keep := os.Getenv("ZONEFOLD_KILL_KEEP"); keep != "" {
		// The device as the kill left it, kept if this point fails.
		saved = filepath.Join(keep, fmt.Sprintf("seed%d-point%d.dev", r.seed, p))
		src := strings.TrimPrefix(r.dev[:strings.IndexByte(r.dev, '?')], "emu:")
		if b, err := os.ReadFile(src); err == nil {
			os.WriteFile(saved, b, 0o644)
		}
	}
	if r.recRng != nil {
		// A second kill while the daemon opens after the first.
		r.killInRecovery(p)
		fscked = time.Now()
	}
	r.serve(false)
	served := time.Now()
	r.lastStart = served.Sub(fscked)
	lost := r.check(p)
	if lost > 0 {
		r.lossPoints = append(r.lossPoints, p)
	} else if saved != "" {
		os.Remove(saved)
	}
	t.Logf("point %d: killed after %v+%v, during GC %v; %d checks failed (clients %v, fsck %v, restart %v, check %v)",
		p, warm, waited.Round(time.Millisecond), inGC, lost, waited2.Round(time.Millisecond), fscked.Sub(killed).Round(time.Millisecond), served.Sub(fscked).Round(time.Millisecond), time.Since(served).Round(time.Millisecond))
}

// killInRecovery starts the daemon on the device the kill left and kills
// it again at a drawn moment of its start (recovery: the log's replay,
// its checkpoint, the resets of dead zones); fsck must then say clean,
// and the restart after it must find every acknowledged byte (point's
// check).
func (r *killRun) killInRecovery(p int) {
	t := r.t
	delay := time.Duration(r.recRng.Int64N(int64(max(r.lastStart, 20*time.Millisecond))))
	cmd := exec.Command(r.bin, "serve", r.dev, "--socket", r.socket, "--cache", "8M")
	out := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(delay)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	served := strings.Contains(out.String(), "serving ")
	if served {
		r.recKills[1]++
	} else {
		r.recKills[0]++
	}
	fsck, err := exec.Command(r.bin, "fsck", r.dev).CombinedOutput()
	if err != nil || !strings.Contains(string(fsck), "clean") {
		r.fsckPoints = append(r.fsckPoints, p)
		t.Errorf("point %d: fsck after a kill -9 %v into the restart (served: %v): %v\n%s\ndaemon:\n%s", p, delay, served, err, fsck, out)
	}
}

// rawWriter overwrites random runs of one raw file's blocks, fsyncing
// every few writes, until the daemon dies or ctx ends.
func (r *killRun) rawWriter(ctx context.Context, i int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 3))
	// Calls end when the daemon dies; ctx only stops the loop (a call
	// cancelled by ctx would race the client's deadline callback with
	// Close).
	stop := ctx
	ctx = context.Background()
	c, err := server.Dial(ctx, r.socket, 4<<20)
	if err != nil {
		return
	}
	defer c.Close()
	f := r.raw[i]
	h, _, err := c.Open(ctx, f.Name, 0)
	if err != nil {
		return
	}
	buf := make([]byte, 16*killBlock)
	var since []int // blocks written since the last fsync
	for w := 0; stop.Err() == nil; w++ {
		n := 1 + rng.IntN(16)
		b := rng.IntN(killRawBlocks - n + 1)
		r.mu.Lock()
		var k uint64
		k, since = f.Begin(b, n, since)
		r.mu.Unlock()
		f.Fill(buf, b, n, k)
		if _, err := c.WriteAt(ctx, h, buf[:n*killBlock], int64(b)*killBlock); err != nil {
			return
		}
		if w%8 != 7 {
			continue
		}
		r.mu.Lock()
		cover := r.nsFlushBegins()
		r.mu.Unlock()
		if err := c.Fsync(ctx, h); err != nil {
			return
		}
		// Acknowledged: each block's newest stamp is durable, and so
		// are the deferred creates answered before it began.
		r.mu.Lock()
		f.Synced(since)
		r.nsFlushed(cover)
		r.mu.Unlock()
		since = since[:0]
	}
}

// putClient runs `zonefold put` of fresh names with random content, and
// `zonefold rm` of the oldest when too many are kept.
func (r *killRun) putClient(ctx context.Context, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 4))
	local := filepath.Join(r.dir, "put.local")
	for ctx.Err() == nil {
		r.mu.Lock()
		var victim string
		if len(r.putOrder) >= killMaxPuts {
			victim = r.putOrder[0]
			r.removing[victim] = true
		}
		r.putSeq++
		name := fmt.Sprintf("put.%d", r.putSeq)
		r.mu.Unlock()
		if victim != "" {
			if _, err := r.runClient(ctx, r.bin, "rm", victim, "--socket", r.socket); err != nil {
				return
			}
			r.mu.Lock()
			delete(r.puts, victim)
			delete(r.removing, victim)
			r.gone[victim] = true
			r.putOrder = slices.DeleteFunc(r.putOrder, func(s string) bool { return s == victim })
			r.mu.Unlock()
			continue
		}
		content := make([]byte, 1+rng.IntN(600<<10))
		for i := range content {
			content[i] = byte(rng.Uint32())
		}
		if err := os.WriteFile(local, content, 0o644); err != nil {
			r.t.Error(err)
			return
		}
		if _, err := r.runClient(ctx, r.bin, "put", local, name, "--socket", r.socket); err != nil {
			return
		}
		r.mu.Lock()
		r.puts[name] = content
		r.putOrder = append(r.putOrder, name)
		r.mu.Unlock()
	}
}

// fioArgs is one fio job on file, writing (verify=false) or verifying.
// The job runs as a thread of fio's process (--thread): a job process
// calls setsid, so the kill of fio's process group at the end of a point
// missed it, and with its parent killed it waited on fio's startup
// semaphore for ever, holding whatever descriptors it inherited (the
// shared heavy-run lock among them).
func (r *killRun) fioArgs(file string, verify bool) []string {
	args := []string{"--name=" + file, "--thread", "--ioengine=external:" + r.fioEngine, "--sock=" + r.socket,
		"--filename=" + file, "--rw=write", "--bs=64k", "--iodepth=4", fmt.Sprintf("--size=%d", killFioSize),
		"--verify=crc32c", "--verify_fatal=1", "--verify_state_save=0"}
	if verify {
		return append(args, "--verify_only=1")
	}
	return append(args, "--end_fsync=1", "--do_verify=0")
}

// fioClient runs fio writers with end_fsync on fresh files, removing the
// oldest when too many are kept.
func (r *killRun) fioClient(ctx context.Context, seed uint64) {
	for ctx.Err() == nil {
		r.mu.Lock()
		var victim string
		if len(r.fios) >= killMaxFios {
			victim = r.fios[0].file
			r.removing[victim] = true
		}
		r.fioSeq++
		file := fmt.Sprintf("fio.%d", r.fioSeq)
		r.mu.Unlock()
		if victim != "" {
			c, err := server.Dial(context.Background(), r.socket, 1<<20)
			if err != nil {
				return
			}
			err = c.Remove(context.Background(), victim)
			c.Close()
			if err != nil {
				return
			}
			r.mu.Lock()
			r.fios = r.fios[1:]
			delete(r.removing, victim)
			r.gone[victim] = true
			r.mu.Unlock()
			continue
		}
		out, err := r.runClient(ctx, r.fio, r.fioArgs(file, false)...)
		if err != nil || !strings.Contains(out, "err= 0") {
			return
		}
		r.mu.Lock()
		r.fios = append(r.fios, fioSet{file: file})
		r.mu.Unlock()
	}
}

// check compares everything acknowledged with what the restarted daemon
// serves, adopts what survived of unacknowledged writes, and removes
// files no acknowledged operation left. It returns the failed checks.
func (r *killRun) check(p int) int {
	t := r.t
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := r.dial()
	defer c.Close()
	failed := 0
	fail := func(format string, args ...any) {
		failed++
		if failed <= 5 {
			t.Errorf("point %d: %s", p, fmt.Sprintf(format, args...))
		}
	}
	list, err := c.List(ctx)
	if err != nil {
		t.Fatalf("point %d: list: %v", p, err)
	}
	have := map[string]int64{}
	for _, e := range list {
		have[e.Name] = e.Size
		if r.gone[e.Name] {
			fail("%s is back, after its remove was acknowledged", e.Name)
		}
	}

	// Raw files: every block holds its durable stamp or a later one.
	buf := make([]byte, killRawBlocks*killBlock)
	for _, f := range r.raw {
		h, size, err := c.Open(ctx, f.Name, 0)
		if err != nil {
			fail("raw file %s: %v", f.Name, err)
			continue
		}
		if size != int64(len(buf)) {
			fail("raw file %s: size %d, want %d", f.Name, size, len(buf))
		}
		clear(buf)
		if n, err := c.ReadAt(ctx, h, buf, 0); err != nil && !errors.Is(err, io.EOF) {
			fail("raw file %s: read %d bytes: %v", f.Name, n, err)
		}
		c.CloseFile(ctx, h)
		bad := 0
		for b := range killRawBlocks {
			if err := f.Check(b, buf[b*killBlock:(b+1)*killBlock]); err != nil {
				bad++
				if bad <= 3 {
					fail("raw file %v", err)
				}
			}
		}
		if bad > 3 {
			fail("raw file %s: %d blocks lost in all", f.Name, bad)
		}
	}

	// Puts: acknowledged content exactly; a remove in flight may or may
	// not have happened.
	for name, content := range r.puts {
		if _, ok := have[name]; !ok {
			if r.removing[name] {
				r.gone[name] = true
				r.forgetPut(name)
				continue
			}
			fail("put %s (%d bytes, acknowledged) is gone (kept %v, removing %v)", name, len(content), r.putOrder, r.removing)
			r.forgetPut(name)
			continue
		}
		got, err := readWhole(ctx, c, name)
		if err != nil || !bytes.Equal(got, content) {
			fail("put %s: %d bytes, %v; acknowledged %d bytes (equal %v)", name, len(got), err, len(content), bytes.Equal(got, content))
		}
		if r.removing[name] {
			if err := c.Remove(ctx, name); err != nil {
				t.Fatalf("point %d: rm %s: %v", p, name, err)
			}
			r.gone[name] = true
			r.forgetPut(name)
		}
	}

	// fio files: fio verifies its own checksums.
	var keep []fioSet
	var verify []string
	for _, fs := range r.fios {
		if _, ok := have[fs.file]; !ok {
			if !r.removing[fs.file] {
				fail("fio file %s (end_fsync acknowledged) is gone", fs.file)
			}
			r.gone[fs.file] = true
			continue
		}
		verify = append(verify, r.fioArgs(fs.file, true)...)
		if r.removing[fs.file] {
			continue // removed below, after the verification
		}
		keep = append(keep, fs)
	}
	if len(verify) > 0 {
		out, err := r.runClient(ctx, r.fio, verify...)
		if err != nil || strings.Contains(out, "verify:") {
			fail("fio verify of %v: %v\n%s", r.fios, err, lastLines(out, 15))
		}
	}
	for _, fs := range r.fios {
		if r.removing[fs.file] {
			if _, ok := have[fs.file]; ok {
				if err := c.Remove(ctx, fs.file); err != nil {
					t.Fatalf("point %d: rm %s: %v", p, fs.file, err)
				}
				r.gone[fs.file] = true
			}
		}
	}
	r.fios = keep
	clear(r.removing)

	// Anything else (a put or fio run the kill interrupted, a temporary
	// name) holds nothing acknowledged.
	known := map[string]bool{}
	for _, f := range r.raw {
		known[f.Name] = true
	}
	for name := range r.puts {
		known[name] = true
	}
	for _, fs := range r.fios {
		known[fs.file] = true
	}
	r.checkNS(ctx, c, have, known, fail)
	for name := range have {
		if !known[name] {
			if err := c.Remove(ctx, name); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("point %d: rm %s: %v", p, name, err)
			}
			r.gone[name] = true
		}
	}
	return failed
}

// runClient runs a client process in its own process group and returns
// its output. When it ends, or ctx does, the whole group is killed: fio
// forks its jobs, and a job may outlive a fio that gave up.
func (r *killRun) runClient(ctx context.Context, name string, args ...string) (string, error) {
	out, err := os.CreateTemp(r.dir, "client-*.out")
	if err != nil {
		return "", err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = r.dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Start(); err != nil {
		return "", err
	}
	err = cmd.Wait()
	if cmd.ProcessState != nil && cmd.ProcessState.Success() {
		// It finished on its own: whatever ctx did meanwhile (Wait then
		// reports the cancellation), its work was acknowledged.
		err = nil
	}
	if syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) == nil {
		r.stragglers.Add(1)
	}
	b, _ := os.ReadFile(out.Name())
	return string(b), err
}

func (r *killRun) forgetPut(name string) {
	delete(r.puts, name)
	r.putOrder = slices.DeleteFunc(r.putOrder, func(s string) bool { return s == name })
}

func readWhole(ctx context.Context, c *server.Client, name string) ([]byte, error) {
	h, size, err := c.Open(ctx, name, 0)
	if err != nil {
		return nil, err
	}
	defer c.CloseFile(ctx, h)
	buf := make([]byte, size)
	n, err := c.ReadAt(ctx, h, buf, 0)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return buf[:n], err
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestCheckpointTieSequence is the deterministic sequence that made two
// checkpoints share one sequence number: recovery reset zones that held
// only removed data without logging it, the checkpoint after it reused the
// previous number, and the next recovery kept the stale checkpoint, which
// still called those zones full, so the records written into them later
// were never replayed (half of B1..B8 came back empty).
func TestCheckpointTieSequence(t *testing.T) {
	bin := buildZonefold(t)
	dir := t.TempDir()
	r := &killRun{t: t, bin: bin, dev: fmt.Sprintf("emu:%s?zone_size=1M&zones=24", filepath.Join(dir, "dev")),
		socket: filepath.Join(dir, "zf.sock"), dir: dir}
	put := func(name string, content []byte) {
		t.Helper()
		local := filepath.Join(dir, "local")
		if err := os.WriteFile(local, content, 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(bin, "put", local, name, "--socket", r.socket).CombinedOutput(); err != nil {
			t.Fatalf("put %s: %v\n%s", name, err, out)
		}
	}
	rng := rand.New(rand.NewPCG(5, 5))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	r.serve(true)
	t.Cleanup(func() {
		if r.daemon != nil {
			r.daemon.Process.Kill()
			<-r.exited
		}
	})
	put("A", random(14<<20)) // fills fourteen of the 22 data zones
	r.kill()
	r.serve(false)
	if out, err := exec.Command(bin, "rm", "A", "--socket", r.socket).CombinedOutput(); err != nil {
		t.Fatalf("rm A: %v\n%s", err, out)
	}
	r.stop()
	r.serve(false) // recovery resets A's zones, which hold nothing live
	want := map[string][]byte{}
	for i := 1; i <= 8; i++ {
		name := fmt.Sprintf("B%d", i)
		want[name] = random(1280 << 10) // past the zones never used, into A's
		put(name, want[name])
	}
	r.kill()
	if out, err := exec.Command(bin, "fsck", r.dev).CombinedOutput(); err != nil || !strings.Contains(string(out), "clean") {
		t.Errorf("fsck after kill -9: %v\n%s", err, out)
	}
	r.serve(false)
	c := r.dial()
	defer c.Close()
	for i := 1; i <= 8; i++ {
		name := fmt.Sprintf("B%d", i)
		got, err := readWhole(context.Background(), c, name)
		if err != nil || !bytes.Equal(got, want[name]) {
			t.Errorf("%s after kill -9: %d bytes, %v; put acknowledged %d bytes (equal %v)", name, len(got), err, len(want[name]), bytes.Equal(got, want[name]))
		}
	}
	r.stop()
}
