package server_test

// What the kill -9 tests of the daemon (h25a_kill9, h26b_ckpt_kill9,
// h26b_trunc_kill9) share: the daemon as a child process (this test
// binary in a TestMain mode), started, SIGKILLed, also during the next
// one's recovery, and waited for until its socket answers; and the
// model of what the clients had acknowledged when it died: stamped
// files (internal/stampfile) that writers overwrite and fsync, a
// "victim" that a renamer renames fresh files over while it holds the
// old one open, and small files that churners create, fsync and remove
// (these fill the metadata log, so that checkpoints switch halves).

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/internal/stampfile"
	"github.com/zonefold/zonefold/internal/syncbuf"
	"github.com/zonefold/zonefold/server"
)

const (
	kill9Workers = 4        // stamped files, a writer each
	kill9Blocks  = 96       // blocks of a stamped file
	kill9Block   = 4096     // bytes of a block
	kill9Victim  = 64 << 10 // bytes of "victim"
)

// kill9Device is a fresh emulated device and a socket path for its
// daemon, in the test's temporary directory.
func kill9Device(t *testing.T) (dev, sock string) {
	dir := t.TempDir()
	return fmt.Sprintf("emu:%s?zone_size=1M&zones=24", filepath.Join(dir, "dev")), filepath.Join(dir, "zf.sock")
}

// kill9Proc is a daemon in a child process.
type kill9Proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited
	out  syncbuf.Buffer
}

// startKill9Proc starts cmd with its output in out; it is SIGKILLed when
// the test ends, if still running.
func startKill9Proc(t *testing.T, cmd *exec.Cmd) *kill9Proc {
	p := &kill9Proc{cmd: cmd, done: make(chan struct{})}
	cmd.Stderr = &p.out
	cmd.Stdout = &p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(p.kill)
	return p
}

// startKill9Daemon starts zonefold serve on dev (formatting it if new)
// and returns at once: see ready.
func startKill9Daemon(t *testing.T, dev, sock string) *kill9Proc {
	return startKill9Proc(t, execTestMain("zonefold", "serve", dev, "--socket", sock, "--format", "--cache", "8M"))
}

// serveKill9 starts zonefold serve on dev and waits until it serves.
func serveKill9(t *testing.T, dev, sock string) *kill9Proc {
	t.Helper()
	p := startKill9Daemon(t, dev, sock)
	p.ready(t, sock)
	return p
}

// kill SIGKILLs the process, if it still runs, and waits for its end.
func (p *kill9Proc) kill() {
	select {
	case <-p.done:
	default:
		p.cmd.Process.Kill() // our own child only
		<-p.done
	}
}

// ready waits until the daemon answers on sock; it fails the test if
// the daemon exits first or takes over a minute.
func (p *kill9Proc) ready(t *testing.T, sock string) {
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

// interrupt stops the daemon with SIGINT and waits for its end.
func (p *kill9Proc) interrupt() {
	p.cmd.Process.Signal(os.Interrupt)
	<-p.done
}

// killDuringRecovery starts n daemons on dev one after another and
// SIGKILLs each within 25 ms, most of them during their recovery. It
// returns how many were killed before they served.
func killDuringRecovery(t *testing.T, dev, sock string, rng *rand.Rand, n int) (early int) {
	for range n {
		q := startKill9Daemon(t, dev, sock)
		time.Sleep(time.Duration(rng.IntN(25)) * time.Millisecond)
		q.kill()
		if !strings.Contains(q.out.String(), "serving ") {
			early++
		}
	}
	return early
}

// kill9Stats is the daemon's statistics, if it answers.
func kill9Stats(sock string) (engine.Stats, bool) {
	ctx := context.Background()
	c, err := server.Dial(ctx, sock, 1<<20)
	if err != nil {
		return engine.Stats{}, false
	}
	defer c.Close()
	st, err := c.Stats(ctx)
	return st, err == nil
}

// kill9Clients are client goroutines, stopped together.
type kill9Clients struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newKill9Clients() *kill9Clients {
	cl := &kill9Clients{}
	cl.ctx, cl.cancel = context.WithCancel(context.Background())
	return cl
}

// Go runs f with a client of its own of the daemon on sock until the
// clients stop (or f gives up: its daemon died). Without a daemon there
// it does nothing.
func (cl *kill9Clients) Go(sock string, f func(ctx context.Context, c *server.Client)) {
	cl.wg.Go(func() {
		c, err := server.Dial(context.Background(), sock, 4<<20)
		if err != nil {
			return
		}
		defer c.Close()
		f(cl.ctx, c)
	})
}

// stop tells the clients to stop and waits for them.
func (cl *kill9Clients) stop() {
	cl.cancel()
	cl.wg.Wait()
}

// kill9Model is what the daemons acknowledged to the stamp writers, the
// renamer and the churners.
type kill9Model struct {
	mu     sync.Mutex
	files  [kill9Workers]*stampfile.File
	since  [kill9Workers][]int
	victim byte            // acknowledged content of "victim"
	vpend  byte            // a rename over victim in flight (0: none)
	gone   map[string]bool // removes acknowledged
	live   map[string]bool // creates (with fsynced data) acknowledged, not removed
	busy   map[string]bool // a churn operation in flight
}

func newKill9Model() *kill9Model {
	return &kill9Model{gone: map[string]bool{}, live: map[string]bool{}, busy: map[string]bool{}}
}

// create writes the stamped files and the victim through the daemon on
// sock, fsynced.
func (m *kill9Model) create(t *testing.T, sock string) {
	t.Helper()
	c := dialSocket(t, sock)
	defer c.Close()
	for i := range kill9Workers {
		f := stampfile.New(fmt.Sprintf("w%d", i), i, kill9Blocks, kill9Block)
		buf := make([]byte, kill9Blocks*kill9Block)
		f.Initial(buf)
		writeFile(t, c, f.Name, 0, buf, true)
		m.files[i] = f
	}
	m.victim = 1
	writeFile(t, c, "victim", 0, bytes.Repeat([]byte{1}, kill9Victim), true)
}

// startClients starts a stamp writer per file (each seeded from rng, in
// file order), the renamer and churners churners against the daemon on
// sock.
func (m *kill9Model) startClients(sock string, rng *rand.Rand, cycle, churners int) *kill9Clients {
	cl := newKill9Clients()
	for i := range kill9Workers {
		wseed := rng.Uint64()
		cl.Go(sock, func(ctx context.Context, c *server.Client) { m.writer(ctx, c, i, wseed) })
	}
	cl.Go(sock, func(ctx context.Context, c *server.Client) { m.renamer(ctx, c, cycle) })
	for id := range churners {
		cl.Go(sock, func(ctx context.Context, c *server.Client) { m.churn(ctx, c, id, cycle) })
	}
	return cl
}

// writer overwrites runs of blocks of stamped file i, fsyncing after
// two of three writes.
func (m *kill9Model) writer(ctx context.Context, c *server.Client, i int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, uint64(i)))
	bg := context.Background()
	f := m.files[i]
	h, _, err := c.Open(bg, f.Name, 0)
	if err != nil {
		return
	}
	for ctx.Err() == nil {
		n := 1 + rng.IntN(16)
		b := rng.IntN(kill9Blocks - n + 1)
		m.mu.Lock()
		var k uint64
		k, m.since[i] = f.Begin(b, n, m.since[i])
		m.mu.Unlock()
		buf := make([]byte, n*kill9Block)
		f.Fill(buf, b, n, k)
		if _, err := c.WriteAt(bg, h, buf, int64(b*kill9Block)); err != nil {
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

// renamer renames fresh files over "victim" while it holds the old
// victim open and writes and fsyncs it unnamed, and removes open files.
func (m *kill9Model) renamer(ctx context.Context, c *server.Client, cycle int) {
	bg := context.Background()
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
		if _, err := c.WriteAt(bg, h, bytes.Repeat([]byte{v}, kill9Victim), 0); err != nil {
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
		if _, err := c.WriteAt(bg, old, bytes.Repeat([]byte{0xee}, kill9Victim), 0); err != nil {
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

// churn creates small files (written with their own name, fsynced,
// closed) and removes its oldest ones, keeping at most 9.
func (m *kill9Model) churn(ctx context.Context, c *server.Client, id, cycle int) {
	bg := context.Background()
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

// check compares what the daemon on sock (after a kill, with no client
// running) holds with what was acknowledged: every stamped block, the
// victim, the churned names. It takes what it found as acknowledged for
// the next cycle.
func (m *kill9Model) check(t *testing.T, sock string, cycle int) {
	t.Helper()
	ctx := context.Background()
	c := dialSocket(t, sock)
	defer c.Close()
	for _, f := range m.files {
		got := readWhole(t, c, f.Name)
		if len(got) != kill9Blocks*kill9Block {
			t.Fatalf("cycle %d: %s has %d bytes, want %d", cycle, f.Name, len(got), kill9Blocks*kill9Block)
		}
		for b := range kill9Blocks {
			if err := f.Check(b, got[b*kill9Block:(b+1)*kill9Block]); err != nil {
				t.Errorf("cycle %d: %v", cycle, err)
			}
		}
	}
	for i := range m.since {
		m.since[i] = nil
	}
	got := readWhole(t, c, "victim")
	if len(got) != kill9Victim {
		t.Fatalf("cycle %d: victim has %d bytes", cycle, len(got))
	}
	v := got[0]
	if (v != m.victim && (m.vpend == 0 || v != m.vpend)) || !bytes.Equal(got, bytes.Repeat([]byte{v}, kill9Victim)) {
		t.Errorf("cycle %d: victim holds %#x.. (whole: %v), acknowledged %#x, in flight %#x", cycle, v,
			bytes.Equal(got, bytes.Repeat([]byte{v}, kill9Victim)), m.victim, m.vpend)
	}
	m.victim, m.vpend = v, 0
	m.checkNames(t, c, cycle)
	ls, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cycle %d: %d names after recovery", cycle, len(ls))
}

// checkNames checks the churned names through c: no acknowledged remove
// undone, every acknowledged create there with its data; a name in
// flight at the kill may be either way, and is removed.
func (m *kill9Model) checkNames(t *testing.T, c *server.Client, cycle int) {
	t.Helper()
	ctx := context.Background()
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
}
