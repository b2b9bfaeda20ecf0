package server_test

// h26b: kill -9 of the daemon inside a checkpoint's own device writes.
// The daemon here is the test binary in a mode (ZONEFOLD_TEST_MAIN=
// h26b-ckptkill) that serves the engine as zonefold serve does, on the
// emulated device behind a wrapper that counts the device operations
// of the n-th metadata half switch after it starts serving (from the
// reset of the other half's first zone: the resets, the old half's
// finish, each write of the checkpoint record, the flush) and SIGKILLs
// its own process just before the k-th. The clients of h25a
// (kill9_helpers_test.go: fsyncing stamped writers, renames over an
// open file, removes of open files, churn that fills the log) run
// meanwhile. After the kill: fsck clean;
// the real daemon (zonefold serve) recovers every acknowledged byte,
// name and remove; it then runs at least two more checkpoints (the
// second switches halves back) under the same clients, is killed, and
// fsck and the check hold again.
//
// The emulated device keeps its zone table in memory and writes it at
// each flush: a killed daemon's device is as of its last flush, so a
// kill inside a checkpoint leaves the half switch before its reset or
// after it (the reset flushes), with none of the record, or whole. The
// engine's h26b_ckptcut_test cuts (and tears) at every write instead.
//
// Mutants tried: fsync a no-op fails at once (acknowledged bytes gone);
// so does recovery taking the older of the two checkpoints (the kill
// at op 1: w0 gone).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/server"
	"github.com/zonefold/zonefold/uring"
	"github.com/zonefold/zonefold/zns"
)

// h26bKillDev SIGKILLs its process just before the at-th device
// operation of the nth metadata half switch once armed.
type h26bKillDev struct {
	*zns.Emu
	armed       atomic.Bool
	meta        [2]int
	group       int
	nth, at     int64
	switches, n atomic.Int64
	into        atomic.Int64 // the half the nth switch goes into
}

func (d *h26bKillDev) isMeta(z int) bool {
	return z >= d.meta[0] && z < d.meta[0]+d.group || z >= d.meta[1] && z < d.meta[1]+d.group
}

func (d *h26bKillDev) tick(start bool, what string, z int) {
	if !d.armed.Load() {
		return
	}
	if start && d.switches.Add(1) == d.nth {
		d.n.Store(0)
		if z == d.meta[1] {
			d.into.Store(1)
		}
	}
	if d.switches.Load() != d.nth {
		return
	}
	k := d.n.Add(1)
	fmt.Printf("h26b op %d: %s %d\n", k, what, z)
	if k == d.at {
		fmt.Printf("h26b: SIGKILL before %s %d, op %d of metadata half switch %d (into half %d)\n", what, z, d.at, d.nth, d.into.Load())
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // never returns
	}
}

func (d *h26bKillDev) ResetZone(z int) error {
	// A switch resets the other half from its first zone.
	d.tick(z == d.meta[0] || z == d.meta[1], "reset zone", z)
	return d.Emu.ResetZone(z)
}

func (d *h26bKillDev) FinishZone(z int) error {
	d.tick(false, "finish zone", z)
	return d.Emu.FinishZone(z)
}

func (d *h26bKillDev) Write(z int, off int64, bufs [][]byte, c uring.Completion) error {
	if d.isMeta(z) {
		d.tick(false, "write to metadata zone", z)
	}
	return d.Emu.Write(z, off, bufs, c)
}

func (d *h26bKillDev) Flush() error {
	d.tick(false, "flush", -1)
	return d.Emu.Flush()
}

func (d *h26bKillDev) FlushCut(cut func()) error {
	d.tick(false, "flush", -1)
	return d.Emu.FlushCut(cut)
}

// h26bCkptKillDaemon is the daemon mode: args are device, socket, nth
// switch, at-th operation.
func h26bCkptKillDaemon(args []string) int {
	nth, _ := strconv.ParseInt(args[2], 10, 64)
	at, _ := strconv.ParseInt(args[3], 10, 64)
	d, err := zns.Open(args[0], zns.Options{})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	dev := &h26bKillDev{Emu: d.(*zns.Emu), nth: nth, at: at}
	e, err := engine.OpenDevice(dev, engine.Config{CacheBytes: 8 << 20})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	sb := e.Superblock()
	dev.meta, dev.group = sb.MetaZones, sb.MetaGroup
	dev.armed.Store(true)
	l, err := server.Listen(args[1])
	if err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println("serving")
	if err := server.New(e, server.Options{}).Serve(context.Background(), l.UnixListener); err != nil {
		fmt.Println(err)
		return 1
	}
	return 0
}

func TestH26bKill9InsideCheckpoint(t *testing.T) {
	dev, sock := kill9Device(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(26, 2))
	m := newKill9Model()
	p := serveKill9(t, dev, sock)
	m.create(t, sock)
	p.kill()
	// run serves the clients until the daemon dies or stop is closed.
	run := func(p *kill9Proc, cycle int, stop <-chan struct{}) {
		cl := m.startClients(sock, rng, cycle, 2)
		select {
		case <-p.done:
		case <-stop:
		case <-time.After(30 * time.Second):
			t.Errorf("cycle %d: the daemon was not killed in 30 s\n%s", cycle, p.out.String())
		}
		p.kill()
		cl.stop()
	}
	cycle := 0
	for at := int64(1); at <= 5; at++ {
		// The first switch after recovery's checkpoint: a later one
		// (this was 1 or 2 at random) is the same case after one more
		// whole switch, which the real daemon's two below repeat.
		const nth = 1
		q := startKill9Proc(t, execTestMain("h26b-ckptkill", dev, sock, strconv.FormatInt(nth, 10), strconv.FormatInt(at, 10)))
		q.ready(t, sock)
		run(q, cycle, nil)
		if ws, ok := q.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("cycle %d: the daemon ended %v, not killed\n%s", cycle, q.cmd.ProcessState, q.out.String())
		}
		// The switch's operations up to the kill, and the kill.
		if out := q.out.String(); strings.Contains(out, "h26b") {
			t.Logf("%s", strings.TrimSpace(out[strings.Index(out, "h26b"):]))
		}
		fsckClean(t, dev, fmt.Sprintf("after a kill at op %d of switch %d", at, nth))
		// The real daemon recovers, checks, checkpoints twice more,
		// and is killed.
		p := serveKill9(t, dev, sock)
		m.check(t, sock, cycle)
		cycle++
		stop := make(chan struct{})
		go func() {
			defer close(stop)
			sc, err := server.Dial(ctx, sock, 1<<20)
			if err != nil {
				return
			}
			defer sc.Close()
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if st, err := sc.Stats(ctx); err != nil || st.Checkpoints >= 3 { // recovery's and two switches
					return
				}
			}
			t.Errorf("no two checkpoints in 20 s")
		}()
		run(p, cycle, stop)
		fsckClean(t, dev, fmt.Sprintf("after the next daemon's checkpoints (kill at op %d of switch %d before)", at, nth))
		p = serveKill9(t, dev, sock)
		m.check(t, sock, cycle)
		p.kill()
		cycle++
		if t.Failed() {
			return
		}
	}
}
