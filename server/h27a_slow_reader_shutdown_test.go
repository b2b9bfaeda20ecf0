package server

// Probe 1 of h27a: shutdown beside a socket-framing (v1) client that
// pipelines writes and fsyncs and reads its replies slowly but steadily,
// one message every few tens of milliseconds: each message is taken
// well within shutdownSendWait, but all of them take longer. Such a
// client must get every reply to every request the daemon took, the
// daemon's count of replies sent must be the count the client received
// (no reply counted as delivered that the client could not read), and
// every write it saw acknowledged must be there after a restart.
//
// A variant stops reading once shutdown began: it is dropped as gone
// (shutdownSendWait), and still the daemon must count as sent only what
// the client can read.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zonefold/zonefold/internal/syncbuf"
)

const (
	h27aBlock = 4096
	h27aSlots = 1024 // 4 KiB blocks of the client's region, each a fixed pattern
)

// h27aPattern fills b (one block) with what block slot of the region
// holds: its slot number, over and over.
func h27aPattern(b []byte, slot int) {
	for i := 0; i < len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], uint64(slot)<<8|0xa5)
	}
}

// h27aSlowClient pipelines writes of consecutive blocks of one file,
// with an fsync after every fourth write, one request per message,
// keeping at most window requests unanswered; with flood set it sends
// until a send would wait (the daemon stopped reading it), then stops.
// Its reader takes one reply message at a time, after a pause of 20-60
// ms for the first slow of them (all of them if slow < 0), and records
// every reply until the connection ends.
type h27aSlowClient struct {
	c      *Client
	h      uint32
	window int
	flood  bool
	taken  func() int64 // the daemon's count of requests taken (flood)

	mu      sync.Mutex
	cond    *sync.Cond
	sent    []Request // by tag-1: requests sent whole
	got     []bool    // by tag-1: a reply was received
	okWrite []bool    // by tag-1: a write acknowledged
	out     int       // sent and not answered
	recvd   int       // replies received
	recvErr error     // what ended the reading
	dup     string    // replies for tags never sent or answered already
}

func (s *h27aSlowClient) submit() {
	for {
		s.mu.Lock()
		for s.out >= s.window && s.recvErr == nil {
			s.cond.Wait()
		}
		if s.recvErr != nil {
			s.mu.Unlock()
			return
		}
		tag := uint64(len(s.sent) + 1)
		q := Request{Tag: tag, Op: OpFsync, Handle: s.h}
		if tag%5 != 0 {
			blk := int(tag - tag/5 - 1) // writes are numbered 0, 1, 2, ...
			q = Request{Tag: tag, Op: OpWrite, Handle: s.h, Off: uint64(blk) * h27aBlock,
				Addr: uint64(blk%h27aSlots) * h27aBlock, Len: h27aBlock}
		}
		s.sent = append(s.sent, q)
		s.got = append(s.got, false)
		s.okWrite = append(s.okWrite, false)
		s.out++
		s.mu.Unlock()
		err := s.send(q)
		if err != nil {
			// The daemon stopped reading us (flood), or shut the
			// connection. A message not sent is not sent at all
			// (SOCK_SEQPACKET).
			s.mu.Lock()
			s.sent = s.sent[:len(s.sent)-1]
			s.out--
			s.mu.Unlock()
			return
		}
	}
}

// send sends q. A flood's send ends the flood once it has waited 300 ms
// three times in a row with the daemon taking no request meanwhile
// (taken): on a loaded machine the daemon can be that slow to read a
// client it has not stopped reading, and the flood, ended by one such
// wait, had every request taken (seen at load 10). Not a test of time:
// only where the flood stops.
func (s *h27aSlowClient) send(q Request) error {
	for stalls := 0; ; {
		var before int64
		if s.flood {
			before = s.taken()
			s.c.uc.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
		}
		err := s.write(q)
		if err == nil || !s.flood || !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
		if stalls++; s.taken() != before {
			stalls = 0
		}
		if stalls == 3 {
			return err
		}
	}
}

// write sends q as one message straight on the connection's socket, not
// by Client.Submit: the batch level is for one goroutine at a time, and
// the reader waits in Recv meanwhile. Submit refused (errBatchBusy)
// whenever the two overlapped, which ended the submitter (and, a Recv
// refused, the reader) at once: at load 17 under -race "window 480"
// stalled at 0 replies in 3 of 3 runs. A socket-framing Submit of one
// request is this write.
func (s *h27aSlowClient) write(q Request) error {
	var b [RequestSize]byte
	q.Encode(b[:])
	_, err := s.c.uc.Write(b[:])
	return err
}

func (s *h27aSlowClient) read(seed uint64, slow int) {
	rng := rand.New(rand.NewPCG(seed, 1))
	reps := make([]Reply, MaxBatch)
	for i := 0; ; i++ {
		if slow < 0 || i < slow {
			time.Sleep(time.Duration(20+rng.IntN(41)) * time.Millisecond)
		}
		n, err := s.c.Recv(reps)
		s.mu.Lock()
		if err != nil {
			s.recvErr = err
			s.cond.Broadcast()
			s.mu.Unlock()
			return
		}
		for _, r := range reps[:n] {
			i := int(r.Tag) - 1
			if i < 0 || i >= len(s.sent) || s.got[i] {
				s.dup += fmt.Sprintf(" %d", r.Tag)
				continue
			}
			s.got[i] = true
			s.okWrite[i] = s.sent[i].Op == OpWrite && r.Status == StatusOK
			s.recvd++
			s.out--
		}
		s.cond.Broadcast()
		s.mu.Unlock()
	}
}

func (s *h27aSlowClient) received() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recvd
}

// TestH27aShutdownBesideSlowSteadyReader: the variants are
//
//   - window W: the client keeps W requests unanswered and reads one
//     message every 20-60 ms all along, through the shutdown;
//   - full socket, then steady: the client sends without reading until
//     the daemon stops taking its requests (its replies fill the socket
//     and the writer waits), then shutdown begins and the client reads
//     one message every 20-60 ms (the first 100 of them, then at once):
//     the writer waits for room again and again, each time well within
//     shutdownSendWait;
//   - full socket, never reads: as above, but the client reads nothing
//     until shutdown is over: it is given up as gone after
//     shutdownSendWait, and then reads what is queued for it.
//
// In every variant the client must receive every reply the daemon
// counts as sent, and, unless given up, a reply to every request the
// daemon took; shutdown must not wait out the grace period; every write
// the client saw acknowledged must read back after a restart, and no
// block may be torn.
func TestH27aShutdownBesideSlowSteadyReader(t *testing.T) {
	for _, v := range []struct {
		name    string
		window  int
		dropped bool // reads nothing until shutdown is over
	}{
		{"window 40", 40, false},
		{"window 480", 480, false},
		{"full socket, then steady", 0, false},
		{"full socket, never reads", 0, true},
	} {
		t.Run(v.name, func(t *testing.T) {
			logs := &syncbuf.Buffer{}
			cfg := testConfig(emuDevice(t), filepath.Join(t.TempDir(), "zf.sock"))
			cfg.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			cfg.Grace = time.Minute
			d := startDaemon(t, cfg)
			ctx := context.Background()

			c, err := DialSocketFraming(ctx, d.socket, 4<<20+ctlBytes)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			h, _, err := c.Open(ctx, "slow", OpenCreate|OpenTrunc)
			if err != nil {
				t.Fatal(err)
			}
			for k := range h27aSlots {
				h27aPattern(c.Data()[k*h27aBlock:(k+1)*h27aBlock], k)
			}
			in0, out0 := d.srv.stats.requestsIn.Load(), d.srv.stats.repliesOut.Load()

			s := &h27aSlowClient{c: c, h: h, window: v.window, taken: d.srv.stats.requestsIn.Load}
			s.cond = sync.NewCond(&s.mu)
			var wg sync.WaitGroup
			start := time.Now()
			if v.window > 0 {
				wg.Go(s.submit)
				wg.Go(func() { s.read(uint64(v.window), -1) })
				// Steady state: the pipeline has turned over.
				awaitProgress(t, "replies to the slow client", int64(v.window), func() int64 { return int64(s.received()) })
				start = time.Now()
				awaitShutdown(t, d)
			} else {
				s.window, s.flood = 1<<30, true
				s.submit()
				s.mu.Lock()
				sent := len(s.sent)
				s.mu.Unlock()
				if taken := d.srv.stats.requestsIn.Load() - in0; taken >= int64(sent) {
					t.Fatalf("the daemon took all %d requests the client sent; want it to have stopped reading", sent)
				}
				// Every request taken has run: only replies wait.
				awaitProgress(t, "the flood's requests' run", 1, d.srv.requestsRan)
				if !v.dropped {
					wg.Go(func() { s.read(1, 100) })
				}
				start = time.Now()
				awaitShutdown(t, d)
				if v.dropped {
					wg.Go(func() { s.read(1, 0) })
				}
			}
			t.Logf("shutdown took %v", time.Since(start))
			wg.Wait()

			in, out := d.srv.stats.requestsIn.Load()-in0, d.srv.stats.repliesOut.Load()-out0
			s.mu.Lock()
			t.Logf("sent %d requests; the daemon took %d and counts %d replies sent; the client received %d, then: %v",
				len(s.sent), in, out, s.recvd, s.recvErr)
			if s.dup != "" {
				t.Errorf("replies for tags never sent or answered twice:%s", s.dup)
			}
			if int64(s.recvd) != out {
				t.Errorf("the daemon counts %d replies sent to the client; it received %d (then %v)", out, s.recvd, s.recvErr)
			}
			// A client that reads gets a reply to every request the
			// daemon received but one: the reader may have read a
			// message (of one request) as shutdown began while it
			// waited for a free slot, and that one is not served
			// (readLoop).
			if miss := in - int64(s.recvd); !v.dropped && (miss < 0 || miss > 1) {
				t.Errorf("the daemon received %d requests of a client that reads its replies; it received %d replies (then %v)",
					in, s.recvd, s.recvErr)
			}
			if !errors.Is(s.recvErr, io.ErrUnexpectedEOF) {
				t.Errorf("the slow client's reading ended with %v; want the daemon closing the connection", s.recvErr)
			}
			sent, okWrite := s.sent, s.okWrite
			s.mu.Unlock()
			if strings.Contains(logs.String(), "outlived the grace period") {
				t.Errorf("shutdown waited out the grace period")
			}
			if gone := strings.Contains(logs.String(), "server: send replies"); gone != v.dropped {
				t.Errorf("the client was given up as gone: %v; want %v\n%s", gone, v.dropped, logs)
			}

			// Every write the client saw acknowledged is there; the
			// others are there whole or not at all.
			cfg.Format = false
			d = startDaemon(t, cfg)
			r := dial(t, d.socket)
			rh, size, err := r.Open(ctx, "slow", 0)
			if err != nil {
				t.Fatal(err)
			}
			want, zero, got := make([]byte, h27aBlock), make([]byte, h27aBlock), make([]byte, h27aBlock)
			acked := 0
			for i, q := range sent {
				if q.Op != OpWrite {
					continue
				}
				blk := int(q.Off / h27aBlock)
				h27aPattern(want, blk%h27aSlots)
				if int64(q.Off) >= size {
					if okWrite[i] {
						t.Fatalf("block %d was acknowledged; the file is %d bytes after the restart", blk, size)
					}
					continue
				}
				if _, err := r.ReadAt(ctx, rh, got, int64(q.Off)); err != nil {
					t.Fatalf("read block %d: %v", blk, err)
				}
				switch {
				case bytes.Equal(got, want):
					if okWrite[i] {
						acked++
					}
				case okWrite[i]:
					t.Fatalf("block %d was acknowledged; after the restart it starts % x", blk, got[:16])
				case !bytes.Equal(got, zero):
					t.Fatalf("block %d (not acknowledged) is torn after the restart: starts % x", blk, got[:16])
				}
			}
			t.Logf("%d acknowledged writes read back", acked)
		})
	}
}
