package server_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zonefold/zonefold/server"
)

const (
	sigtermChunk      = 64 << 10
	sigtermChunks     = 48
	sigtermBlk        = 4096
	sigtermFsyncEvery = 24
)

// sigtermFill fills p (one chunk) with blocks stamped client, chunk, seq.
func sigtermFill(p []byte, client, chunk int, seq uint32) {
	for b := 0; b < len(p); b += sigtermBlk {
		blk := p[b : b+sigtermBlk]
		for i := range blk {
			blk[i] = byte(seq) ^ byte(i) ^ byte(client*31+chunk)
		}
		binary.LittleEndian.PutUint32(blk[0:], uint32(client))
		binary.LittleEndian.PutUint32(blk[4:], uint32(chunk))
		binary.LittleEndian.PutUint32(blk[8:], seq)
	}
}

// sigtermWriter is one client's model: per chunk, the seq its last
// acknowledged fsync covers, and the seqs written (acknowledged or not)
// since.
type sigtermWriter struct {
	durable  [sigtermChunks]uint32
	since    [sigtermChunks][]uint32
	lastAck  [sigtermChunks]uint32 // last write answered OK
	fsyncs   int
	inflight string
}

func sigtermRunWriter(ctx context.Context, c *server.Client, id int, w *sigtermWriter, stop <-chan struct{}) {
	h, _, err := c.Open(ctx, fmt.Sprintf("w%d", id), server.OpenCreate)
	if err != nil {
		w.inflight = "open: " + err.Error()
		return
	}
	buf := make([]byte, sigtermChunk)
	seq := uint32(0)
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		seq++
		ch := int(seq*7+uint32(id)) % sigtermChunks
		sigtermFill(buf, id, ch, seq)
		w.since[ch] = append(w.since[ch], seq)
		if _, err := c.WriteAt(ctx, h, buf, int64(ch)*sigtermChunk); err != nil {
			w.inflight = fmt.Sprintf("write seq %d: %v", seq, err)
			return
		}
		w.lastAck[ch] = seq
		if n%sigtermFsyncEvery == sigtermFsyncEvery-1 {
			if err := c.Fsync(ctx, h); err != nil {
				w.inflight = fmt.Sprintf("fsync after seq %d: %v", seq, err)
				return
			}
			w.fsyncs++
			for i := range w.since {
				if l := len(w.since[i]); l > 0 {
					w.durable[i] = w.since[i][l-1]
					w.since[i] = w.since[i][:0]
				}
			}
		}
	}
}

// sigtermTruncState is what a truncate client's file should hold.
type sigtermTruncState struct {
	exists bool
	size   int64
	seq    uint32 // pattern of bytes [0, keep)
	keep   int64  // bytes of the pattern; zeros from keep to size
}

func sigtermTruncPattern(n int64, seq uint32) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(seq*13) ^ byte(i>>3) | 1
	}
	return p
}

func sigtermRunTrunc(ctx context.Context, c *server.Client, name string, acked *sigtermTruncState, maybe *[]sigtermTruncState, rounds *int, stop <-chan struct{}) {
	do := func(target sigtermTruncState, op func() error) bool {
		*maybe = append((*maybe)[:0], target)
		if err := op(); err != nil {
			return false
		}
		*acked = target
		*maybe = (*maybe)[:0]
		return true
	}
	for seq := uint32(1); ; seq++ {
		select {
		case <-stop:
			return
		default:
		}
		var h uint32
		const full = 512 << 10
		cut := int64(4097 + (seq*4099)%(200<<10))
		// Create, write, fsync: one durable state at the fsync.
		*maybe = append((*maybe)[:0], sigtermTruncState{exists: true, size: 0})
		hh, _, err := c.Open(ctx, name, server.OpenCreate|server.OpenTrunc)
		if err != nil {
			return
		}
		h = hh
		*maybe = append(*maybe, sigtermTruncState{exists: true, size: full, seq: seq, keep: full})
		if _, err := c.WriteAt(ctx, h, sigtermTruncPattern(full, seq), 0); err != nil {
			return
		}
		if !do(sigtermTruncState{exists: true, size: full, seq: seq, keep: full}, func() error { return c.Fsync(ctx, h) }) {
			return
		}
		if !do(sigtermTruncState{exists: true, size: cut, seq: seq, keep: cut}, func() error { return c.Truncate(ctx, h, cut) }) {
			return
		}
		if !do(sigtermTruncState{exists: true, size: 300 << 10, seq: seq, keep: cut}, func() error { return c.Truncate(ctx, h, 300<<10) }) {
			return
		}
		c.CloseFile(ctx, h)
		if !do(sigtermTruncState{}, func() error { return c.Remove(ctx, name) }) {
			return
		}
		*rounds++
	}
}

// TestSigtermDuringConcurrentWritesKeepsEveryFsync: a daemon stopped
// with SIGTERM while several clients write and fsync (and one truncates
// and removes) must exit 0 with a checkpoint within its grace periods,
// and a new daemon must serve every byte an fsync (or a truncate, or a
// remove) acknowledged before the signal, and for an exit 0 every write
// it answered.
func TestSigtermDuringConcurrentWritesKeepsEveryFsync(t *testing.T) {
	for round := range 4 {
		t.Run(fmt.Sprint(round), func(t *testing.T) { sigtermRound(t, round) })
	}
}

func sigtermRound(t *testing.T, round int) {
	dir := t.TempDir()
	device := fmt.Sprintf("emu:%s?zone_size=4M&zones=64", filepath.Join(dir, "dev"))
	socket := filepath.Join(dir, "zf.sock")
	d := startServeCache(t, device, socket, "64M")
	ctx := context.Background()
	const writers, truncs = 5, 2
	stop := make(chan struct{})
	var wg sync.WaitGroup
	ws := make([]*sigtermWriter, writers)
	clients := []*server.Client{}
	for i := range writers {
		c, err := server.Dial(ctx, socket, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		ws[i] = &sigtermWriter{}
		wg.Go(func() { sigtermRunWriter(ctx, c, i, ws[i], stop) })
	}
	acked := make([]sigtermTruncState, truncs)
	maybe := make([][]sigtermTruncState, truncs)
	rounds := make([]int, truncs)
	for i := range truncs {
		c, err := server.Dial(ctx, socket, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		wg.Go(func() { sigtermRunTrunc(ctx, c, fmt.Sprintf("t%d", i), &acked[i], &maybe[i], &rounds[i], stop) })
	}
	time.Sleep(time.Duration(700+400*round) * time.Millisecond)
	start := time.Now()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var exitErr error
	select {
	case exitErr = <-d.exited:
	case <-time.After(2 * time.Minute):
		close(stop)
		t.Fatalf("daemon did not exit 2 min after SIGTERM\n%s", d.stderr)
	}
	took := time.Since(start)
	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(time.Minute):
		t.Fatalf("clients still running a minute after the daemon exited")
	}
	close(stop)
	for _, c := range clients {
		c.Close()
	}
	log := d.stderr.String()
	t.Logf("exit %v after %v; writers: %v", exitErr, took, func() (s []string) {
		for _, w := range ws {
			s = append(s, fmt.Sprintf("%d fsyncs (%s)", w.fsyncs, w.inflight))
		}
		return
	}())
	t.Logf("trunc rounds %v", rounds)
	clean := exitErr == nil
	if !clean || !strings.Contains(log, "engine flushed and checkpointed") {
		t.Errorf("SIGTERM: exit %v, took %v; log:\n%s", exitErr, took, log)
	}
	fsckClean(t, device, "after SIGTERM")
	d = startServeCache(t, device, socket, "64M")
	c, err := server.Dial(ctx, socket, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := make([]byte, sigtermChunk)
	for id, w := range ws {
		h, size, err := c.Open(ctx, fmt.Sprintf("w%d", id), 0)
		if err != nil {
			if w.fsyncs > 0 {
				t.Fatalf("w%d after %d fsyncs: %v", id, w.fsyncs, err)
			}
			continue
		}
		for ch := range sigtermChunks {
			clear(got)
			off := int64(ch) * sigtermChunk
			if off < size {
				if _, err := c.ReadAt(ctx, h, got, off); err != nil && !errors.Is(err, io.EOF) {
					t.Fatalf("w%d chunk %d: %v", id, ch, err)
				}
			}
			allowed := map[uint32]bool{w.durable[ch]: true}
			for _, s := range w.since[ch] {
				allowed[s] = true
			}
			for b := 0; b < sigtermChunk; b += sigtermBlk {
				blk := got[b : b+sigtermBlk]
				var seq uint32
				if !bytes.Equal(blk, make([]byte, sigtermBlk)) {
					seq = binary.LittleEndian.Uint32(blk[8:])
					want := make([]byte, sigtermChunk)
					sigtermFill(want, id, ch, seq)
					if !bytes.Equal(blk, want[b:b+sigtermBlk]) {
						t.Fatalf("w%d chunk %d block %d: bytes nobody wrote (stamp seq %d)", id, ch, b/sigtermBlk, seq)
					}
				}
				if !allowed[seq] {
					t.Fatalf("w%d chunk %d block %d: seq %d after restart; fsync acknowledged seq %d, later writes %v", id, ch, b/sigtermBlk, seq, w.durable[ch], w.since[ch])
				}
				if clean && w.lastAck[ch] != 0 && seq < w.lastAck[ch] {
					t.Errorf("w%d chunk %d block %d: seq %d after a clean exit; write of seq %d was answered OK", id, ch, b/sigtermBlk, seq, w.lastAck[ch])
				}
			}
		}
	}
	for i := range truncs {
		name := fmt.Sprintf("t%d", i)
		cands := append([]sigtermTruncState{acked[i]}, maybe[i]...)
		st, err := c.Stat(ctx, name)
		var desc []string
		ok := false
		for _, w := range cands {
			desc = append(desc, fmt.Sprintf("%+v", w))
			if !w.exists {
				if err != nil {
					ok = true
				}
				continue
			}
			if err != nil || int64(st.Size) != w.size {
				continue
			}
			h, _, err := c.Open(ctx, name, 0)
			if err != nil {
				t.Fatal(err)
			}
			p := make([]byte, w.size)
			if w.size > 0 {
				if _, err := c.ReadAt(ctx, h, p, 0); err != nil && !errors.Is(err, io.EOF) {
					t.Fatal(err)
				}
			}
			c.CloseFile(ctx, h)
			want := make([]byte, w.size)
			copy(want, sigtermTruncPattern(w.keep, w.seq))
			if bytes.Equal(p, want) {
				ok = true
				break
			}
		}
		if !ok {
			t.Errorf("%s after restart: stat %+v err %v; expected one of %v", name, st, err, desc)
		}
	}
	d.stop()
}
