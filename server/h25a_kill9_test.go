package server_test

// h25a: kill -9 cycles of the real daemon under concurrent fsyncing
// clients, renames over files another handle holds open, removes of
// open files, and kills during the next daemon's recovery itself. After
// each cycle fsck must say clean and every acknowledged byte must read
// back.

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/zonefold/zonefold/internal/stampfile"
	"github.com/zonefold/zonefold/server"
)

const (
	h25aWorkers = 4
	h25aBlocks  = 96
	h25aBlock   = 4096
	h25aVictim  = 64 << 10
)

type h25aProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	out  bytes.Buffer
}

func h25aStart(t *testing.T, dev, sock string) *h25aProc {
	cmd := exec.Command(os.Args[0], "serve", dev, "--socket", sock, "--format", "--cache", "8M")
	cmd.Env = append(os.Environ(), "ZONEFOLD_TEST_MAIN=zonefold")
	p := &h25aProc{cmd: cmd, done: make(chan struct{})}
	cmd.Stderr = &p.out
	cmd.Stdout = &p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(p.kill)
	return p
}

func (p *h25aProc) kill() {
	select {
	case <-p.done:
	default:
		p.cmd.Process.Kill() // our own child only
		<-p.done
	}
}

func (p *h25aProc) ready(t *testing.T, sock string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		select {
		case <-p.done:
			t.Fatalf("daemon exited: %v\n%s", p.cmd.ProcessState, p.out.String())
		default:
		}
		if c, err := server.Dial(context.Background(), sock, 1<<20); err == nil {
			c.Close()
			return
		}
	}
	t.Fatalf("daemon did not start\n%s", p.out.String())
}

func h25aFsck(t *testing.T, dev string, when string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "fsck", dev)
	cmd.Env = append(os.Environ(), "ZONEFOLD_TEST_MAIN=zonefold")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("fsck %s: %v\n%s", when, err, out)
	}
}

type h25aModel struct {
	mu     sync.Mutex
	files  [h25aWorkers]*stampfile.File
	since  [h25aWorkers][]int
	victim byte            // acknowledged content of "victim"
	vpend  byte            // a rename over victim in flight (0: none)
	gone   map[string]bool // removes acknowledged
	live   map[string]bool // creates (with fsynced data) acknowledged, not removed
	busy   map[string]bool // a churn operation in flight
}

// TestH25aKill9Checkpoints is TestH25aKill9Cycles with two more clients
// churning small files (create, write, fsync, remove), so that the
// metadata log fills and checkpoints switch halves while the daemon is
// killed.
func TestH25aKill9Checkpoints(t *testing.T) {
	for _, seed := range h25aSeeds(7) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { h25aRunChurn(t, seed, 4, 2) })
	}
}

func h25aChurn(ctx context.Context, sock string, m *h25aModel, id, cycle int) {
	bg := context.Background()
	c, err := server.Dial(bg, sock, 4<<20)
	if err != nil {
		return
	}
	defer c.Close()
	var mine []string
	for n := 0; ctx.Err() == nil; n++ {
		if len(mine) > 8 || (len(mine) > 0 && n%3 == 0) {
			name := mine[0]
			m.mu.Lock()
			m.busy[name] = true
			m.mu.Unlock()
			if err := c.Remove(bg, name); err != nil {
				return
			}
			m.mu.Lock()
			delete(m.live, name)
			delete(m.busy, name)
			m.gone[name] = true
			m.mu.Unlock()
			mine = mine[1:]
			continue
		}
		name := fmt.Sprintf("c%d-%d-%d", id, cycle, n)
		m.mu.Lock()
		m.busy[name] = true
		m.mu.Unlock()
		h, _, err := c.Open(bg, name, server.OpenCreate|server.OpenExcl)
		if err != nil {
			return
		}
		if _, err := c.WriteAt(bg, h, []byte(name), 0); err != nil {
			return
		}
		if err := c.Fsync(bg, h); err != nil {
			return
		}
		if err := c.CloseFile(bg, h); err != nil {
			return
		}
		m.mu.Lock()
		m.live[name] = true
		delete(m.busy, name)
		m.mu.Unlock()
		mine = append(mine, name)
	}
}

func TestH25aKill9Cycles(t *testing.T) {
	for _, seed := range h25aSeeds(1, 2) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { h25aRun(t, seed, 4) })
	}
}

// h25aSeeds is def, or ZONEFOLD_H25A_SEEDS=FIRST-LAST for a longer hunt.
func h25aSeeds(def ...uint64) []uint64 {
	var a, b uint64
	if _, err := fmt.Sscanf(os.Getenv("ZONEFOLD_H25A_SEEDS"), "%d-%d", &a, &b); err != nil {
		return def
	}
	var seeds []uint64
	for s := a; s <= b; s++ {
		seeds = append(seeds, s)
	}
	return seeds
}

func h25aRun(t *testing.T, seed uint64, cycles int) { h25aRunChurn(t, seed, cycles, 0) }

func h25aRunChurn(t *testing.T, seed uint64, cycles, churners int) {
	rng := rand.New(rand.NewPCG(seed, 25))
	dir := t.TempDir()
	dev := fmt.Sprintf("emu:%s?zone_size=1M&zones=24", filepath.Join(dir, "dev"))
	sock := filepath.Join(dir, "zf.sock")
	ctx := context.Background()
	m := &h25aModel{gone: map[string]bool{}, live: map[string]bool{}, busy: map[string]bool{}}
	p := h25aStart(t, dev, sock)
	p.ready(t, sock)
	c, err := server.Dial(ctx, sock, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	for i := range h25aWorkers {
		f := stampfile.New(fmt.Sprintf("w%d", i), i, h25aBlocks, h25aBlock)
		buf := make([]byte, h25aBlocks*h25aBlock)
		f.Initial(buf)
		writeFile(t, c, f.Name, 0, buf, true)
		m.files[i] = f
	}
	m.victim = 1
	writeFile(t, c, "victim", 0, bytes.Repeat([]byte{1}, h25aVictim), true)
	c.Close()
	recoveryKills := 0
	defer func() { t.Logf("seed %d: %d kills before the daemon served", seed, recoveryKills) }()
	for cycle := range cycles {
		cctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for i := range h25aWorkers {
			wseed := rng.Uint64()
			wg.Go(func() { h25aWriter(cctx, sock, m, i, wseed) })
		}
		wg.Go(func() { h25aRenamer(cctx, sock, m, seed, cycle) })
		for id := range churners {
			wg.Go(func() { h25aChurn(cctx, sock, m, id, cycle) })
		}
		run := 100 + rng.IntN(400)
		if churners > 0 {
			run = 300 + rng.IntN(1200) // long enough to fill the metadata log
		}
		time.Sleep(time.Duration(run) * time.Millisecond)
		if sc, err := server.Dial(ctx, sock, 1<<20); err == nil {
			if st, err := sc.Stats(ctx); err == nil {
				t.Logf("cycle %d before kill: checkpoints %d, flushes %d, gc resets %d, gc written %d, meta %d creates %d", cycle,
					st.Checkpoints, st.Flushes, st.GCResets, st.GCWritten, st.DevMeta, st.DevMetaCreates)
			}
			sc.Close()
		}
		p.kill()
		cancel()
		wg.Wait()
		// Kill the next daemons during their start (recovery) too.
		for range 1 + rng.IntN(3) {
			q := h25aStart(t, dev, sock)
			time.Sleep(time.Duration(rng.IntN(25)) * time.Millisecond)
			q.kill()
			if !bytes.Contains(q.out.Bytes(), []byte("serving ")) {
				recoveryKills++
			}
		}
		h25aFsck(t, dev, fmt.Sprintf("after cycle %d", cycle))
		p = h25aStart(t, dev, sock)
		p.ready(t, sock)
		h25aCheck(t, sock, m, cycle)
	}
	p.cmd.Process.Signal(os.Interrupt)
	<-p.done
	h25aFsck(t, dev, "after a clean stop")
}

func h25aWriter(ctx context.Context, sock string, m *h25aModel, i int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, uint64(i)))
	bg := context.Background()
	c, err := server.Dial(bg, sock, 4<<20)
	if err != nil {
		return
	}
	defer c.Close()
	f := m.files[i]
	h, _, err := c.Open(bg, f.Name, 0)
	if err != nil {
		return
	}
	for ctx.Err() == nil {
		n := 1 + rng.IntN(16)
		b := rng.IntN(h25aBlocks - n + 1)
		m.mu.Lock()
		var k uint64
		k, m.since[i] = f.Begin(b, n, m.since[i])
		m.mu.Unlock()
		buf := make([]byte, n*h25aBlock)
		f.Fill(buf, b, n, k)
		if _, err := c.WriteAt(bg, h, buf, int64(b*h25aBlock)); err != nil {
			return
		}
		if rng.IntN(3) == 0 {
			continue
		}
		if err := c.Fsync(bg, h); err != nil {
			return
		}
		m.mu.Lock()
		f.Synced(m.since[i])
		m.since[i] = nil
		m.mu.Unlock()
	}
}

// h25aRenamer renames fresh files over "victim" while it holds the old
// victim open and writes and fsyncs it unnamed, and removes open files.
func h25aRenamer(ctx context.Context, sock string, m *h25aModel, seed uint64, cycle int) {
	bg := context.Background()
	c, err := server.Dial(bg, sock, 4<<20)
	if err != nil {
		return
	}
	defer c.Close()
	for n := 0; ctx.Err() == nil; n++ {
		v := byte(2 + (cycle*37+n)%200) // never 0xdd, 0xde, 0xee
		old, _, err := c.Open(bg, "victim", 0)
		if err != nil {
			return
		}
		name := fmt.Sprintf("new-%d-%d", cycle, n)
		h, _, err := c.Open(bg, name, server.OpenCreate)
		if err != nil {
			return
		}
		if _, err := c.WriteAt(bg, h, bytes.Repeat([]byte{v}, h25aVictim), 0); err != nil {
			return
		}
		if err := c.Fsync(bg, h); err != nil {
			return
		}
		m.mu.Lock()
		m.vpend = v
		m.mu.Unlock()
		if err := c.Rename(bg, name, "victim"); err != nil {
			return
		}
		m.mu.Lock()
		m.victim, m.vpend = v, 0
		m.mu.Unlock()
		// The replaced file, unnamed now: its writes and fsyncs must
		// never show under the name.
		if _, err := c.WriteAt(bg, old, bytes.Repeat([]byte{0xee}, h25aVictim), 0); err != nil {
			return
		}
		if err := c.Fsync(bg, old); err != nil {
			return
		}
		if err := c.CloseFile(bg, old); err != nil {
			return
		}
		c.CloseFile(bg, h)
		// Remove an open file, write and fsync it unnamed, close it.
		rm := fmt.Sprintf("rm-%d-%d", cycle, n)
		r, _, err := c.Open(bg, rm, server.OpenCreate)
		if err != nil {
			return
		}
		if _, err := c.WriteAt(bg, r, bytes.Repeat([]byte{0xdd}, 8192), 0); err != nil {
			return
		}
		if err := c.Fsync(bg, r); err != nil {
			return
		}
		if err := c.Remove(bg, rm); err != nil {
			return
		}
		m.mu.Lock()
		m.gone[rm] = true
		m.mu.Unlock()
		if _, err := c.WriteAt(bg, r, bytes.Repeat([]byte{0xde}, 1<<16), 0); err != nil {
			return
		}
		if err := c.Fsync(bg, r); err != nil {
			return
		}
		if err := c.CloseFile(bg, r); err != nil {
			return
		}
	}
}

func h25aCheck(t *testing.T, sock string, m *h25aModel, cycle int) {
	t.Helper()
	ctx := context.Background()
	c, err := server.Dial(ctx, sock, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, f := range m.files {
		got := readWhole(t, c, f.Name)
		if len(got) != h25aBlocks*h25aBlock {
			t.Fatalf("cycle %d: %s has %d bytes, want %d", cycle, f.Name, len(got), h25aBlocks*h25aBlock)
		}
		for b := range h25aBlocks {
			if err := f.Check(b, got[b*h25aBlock:(b+1)*h25aBlock]); err != nil {
				t.Errorf("cycle %d: %v", cycle, err)
			}
		}
	}
	for i := range m.since {
		m.since[i] = nil
	}
	got := readWhole(t, c, "victim")
	if len(got) != h25aVictim {
		t.Fatalf("cycle %d: victim has %d bytes", cycle, len(got))
	}
	v := got[0]
	if (v != m.victim && (m.vpend == 0 || v != m.vpend)) || !bytes.Equal(got, bytes.Repeat([]byte{v}, h25aVictim)) {
		t.Errorf("cycle %d: victim holds %#x.. (whole: %v), acknowledged %#x, in flight %#x", cycle, v,
			bytes.Equal(got, bytes.Repeat([]byte{v}, h25aVictim)), m.victim, m.vpend)
	}
	m.victim, m.vpend = v, 0
	for name := range m.gone {
		if _, err := c.Stat(ctx, name); err == nil && !m.busy[name] {
			t.Errorf("cycle %d: %s is back after its acknowledged remove", cycle, name)
		}
	}
	for name := range m.live {
		if m.busy[name] {
			continue
		}
		if got := readWhole(t, c, name); string(got) != name {
			t.Errorf("cycle %d: acknowledged %s holds %q", cycle, name, got)
		}
	}
	for name := range m.busy {
		// In flight at the kill: either outcome; remove what is left.
		if err := c.Remove(ctx, name); err == nil {
			m.gone[name] = true
		}
		delete(m.live, name)
	}
	clear(m.busy)
	ls, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cycle %d: %d names after recovery", cycle, len(ls))
}
