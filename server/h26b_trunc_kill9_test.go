package server_test

// h26b: truncate + fsync under kill -9 of the real daemon. Clients
// truncate their files down and up (shrink to inside a block, extend
// with holes, truncate to 0, truncate then write past the old size) and
// fsync after every step, while a churning client fills the metadata log
// so that checkpoints switch halves; the daemon gets SIGKILL at random
// times (and again during the next daemon's recovery, as in h25a). After
// each restart: fsck clean, every file exactly as its last acknowledged
// step left it (size and every byte: what a shrink cut off never comes
// back, holes read zeros), or as one of the states the step in flight at
// the kill passes through; a truncate that returned is never undone.
//
// Mutants tried: a truncate that logs nothing (engine: File.truncate
// returning before it changes anything) fails at once (sizes wrong); a
// no-op fsync fails at once (acknowledged bytes gone after the kill).

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/zonefold/zonefold/server"
)

const (
	h26bWorkers = 3
	h26bMaxSize = 192 << 10
	h26bBlock   = 4096
)

type h26bTruncModel struct {
	mu    sync.Mutex
	acked [h26bWorkers][]byte   // as of the last acknowledged step
	cands [h26bWorkers][][]byte // states the step in flight may leave
	steps int                   // acknowledged
}

// h26bTruncated is s truncated (or extended with zeros) to size.
func h26bTruncated(s []byte, size int) []byte {
	out := make([]byte, size)
	copy(out, s)
	return out
}

func h26bWritten(s []byte, p []byte, off int) []byte {
	out := h26bTruncated(s, max(len(s), off+len(p)))
	copy(out[off:], p)
	return out
}

// h26bTruncWorker runs steps on its file, each ended by an fsync.
func h26bTruncWorker(ctx context.Context, c *server.Client, m *h26bTruncModel, i int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, uint64(i)))
	bg := context.Background()
	h, _, err := c.Open(bg, fmt.Sprintf("t%d", i), 0)
	if err != nil {
		return
	}
	data := func(n int) []byte {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(1 + rng.IntN(255))
		}
		return b
	}
	for ctx.Err() == nil {
		m.mu.Lock()
		s0 := m.acked[i]
		m.mu.Unlock()
		type op struct {
			trunc bool
			size  int
			off   int
			p     []byte
		}
		var ops []op
		switch k := rng.IntN(6); {
		case k == 0 && len(s0) > 0: // shrink, often to inside a block
			ops = []op{{trunc: true, size: rng.IntN(len(s0))}}
		case k == 1: // extend with a hole
			ops = []op{{trunc: true, size: min(h26bMaxSize, len(s0)+1+rng.IntN(64<<10))}}
		case k == 2: // to 0
			ops = []op{{trunc: true, size: 0}}
		case k == 3 && len(s0) > 0: // shrink, then write past the old size
			size := rng.IntN(len(s0))
			off := len(s0) + rng.IntN(16<<10)
			if off >= h26bMaxSize-1 {
				off = size + 1
			}
			n := 1 + rng.IntN(min(24<<10, h26bMaxSize-off))
			ops = []op{{trunc: true, size: size}, {off: off, p: data(n)}}
		default: // a write anywhere, then (sometimes) a shrink inside it
			off := rng.IntN(h26bMaxSize - 1)
			n := 1 + rng.IntN(min(32<<10, h26bMaxSize-off))
			ops = []op{{off: off, p: data(n)}}
			if rng.IntN(2) == 0 {
				ops = append(ops, op{trunc: true, size: off + rng.IntN(n)})
			}
		}
		states := [][]byte{s0}
		for _, o := range ops {
			s := states[len(states)-1]
			if o.trunc {
				states = append(states, h26bTruncated(s, o.size))
			} else {
				states = append(states, h26bWritten(s, o.p, o.off))
			}
		}
		m.mu.Lock()
		m.cands[i] = states
		m.mu.Unlock()
		for j, o := range ops {
			if o.trunc {
				if err := c.Truncate(bg, h, int64(o.size)); err != nil {
					return
				}
				// Durable when it returns: the states before it are
				// gone for good.
				m.mu.Lock()
				m.cands[i] = states[j+1:]
				m.mu.Unlock()
			} else if _, err := c.WriteAt(bg, h, o.p, int64(o.off)); err != nil {
				return
			}
		}
		if err := c.Fsync(bg, h); err != nil {
			return
		}
		m.mu.Lock()
		m.acked[i], m.cands[i] = states[len(states)-1], nil
		m.steps++
		m.mu.Unlock()
	}
}

// h26bMatches reports whether got is what one of the states left: its
// size is one of theirs, and every block is that block of one of them
// (an unsynced write lands in whole blocks, some of them; zeros past a
// state's end).
func h26bMatches(got []byte, states [][]byte) bool {
	sized := false
	for _, s := range states {
		sized = sized || len(s) == len(got)
	}
	if !sized {
		return false
	}
	for b := 0; b < len(got); b += h26bBlock {
		blk := got[b:min(len(got), b+h26bBlock)]
		ok := false
		for _, s := range states {
			want := make([]byte, len(blk))
			if b < len(s) {
				copy(want, s[b:])
			}
			if bytes.Equal(want, blk) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

func h26bTruncCheck(t *testing.T, sock string, m *h26bTruncModel, churn *kill9Model, cycle int) {
	t.Helper()
	c := dialSocket(t, sock)
	defer c.Close()
	for i := range h26bWorkers {
		got := readWhole(t, c, fmt.Sprintf("t%d", i))
		states := [][]byte{m.acked[i]}
		if m.cands[i] != nil {
			states = m.cands[i]
		}
		if !h26bMatches(got, states) {
			first := -1
			for j := range min(len(got), len(m.acked[i])) {
				if got[j] != m.acked[i][j] {
					first = j
					break
				}
			}
			sizes := []int{}
			for _, s := range states {
				sizes = append(sizes, len(s))
			}
			t.Errorf("cycle %d: t%d has %d bytes, matching none of the states it may be in (sizes %v); first difference from the acknowledged state at %d",
				cycle, i, len(got), sizes, first)
		}
		m.acked[i], m.cands[i] = got, nil
	}
	churn.checkNames(t, c, cycle)
}

// TestH26bTruncateKill9 runs the truncating clients (and a churning
// one) over kill -9 cycles of the daemon.
func TestH26bTruncateKill9(t *testing.T) {
	for _, seed := range h25aSeeds(1, 2) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { h26bTruncRun(t, seed, 5) })
	}
}

func h26bTruncRun(t *testing.T, seed uint64, cycles int) {
	rng := rand.New(rand.NewPCG(seed, 26))
	dev, sock := kill9Device(t)
	ctx := context.Background()
	m := &h26bTruncModel{}
	churn := newKill9Model()
	p := serveKill9(t, dev, sock)
	c := dialSocket(t, sock)
	for i := range h26bWorkers {
		m.acked[i] = bytes.Repeat([]byte{byte(0x10 + i)}, 40<<10+i*1000)
		h := writeFile(t, c, fmt.Sprintf("t%d", i), 0, m.acked[i], true)
		c.CloseFile(ctx, h)
	}
	c.Close()
	var ckpts int64
	for cycle := range cycles {
		cl := newKill9Clients()
		for i := range h26bWorkers {
			wseed := rng.Uint64()
			cl.Go(sock, func(ctx context.Context, c *server.Client) { h26bTruncWorker(ctx, c, m, i, wseed) })
		}
		cl.Go(sock, func(ctx context.Context, c *server.Client) { churn.churn(ctx, c, 0, cycle) })
		time.Sleep(time.Duration(200+rng.IntN(800)) * time.Millisecond)
		if st, ok := kill9Stats(sock); ok {
			ckpts += st.Checkpoints
		}
		p.kill()
		cl.stop()
		killDuringRecovery(t, dev, sock, rng, rng.IntN(3))
		fsckClean(t, dev, fmt.Sprintf("after cycle %d", cycle))
		p = serveKill9(t, dev, sock)
		h26bTruncCheck(t, sock, m, churn, cycle)
		if t.Failed() {
			return
		}
	}
	t.Logf("seed %d: %d steps acknowledged, %d checkpoints in the killed daemons' lives", seed, m.steps, ckpts)
	p.interrupt()
	fsckClean(t, dev, "after a clean stop")
}
