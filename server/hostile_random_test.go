package server

// Random well-framed requests whose fields sit at and
// around every limit.

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/zonefold/zonefold/engine"
)

// hostilePick returns one of vs.
func hostilePick[T any](rng *rand.Rand, vs ...T) T { return vs[rng.IntN(len(vs))] }

// hostileRandomRequest is a request whose fields are chosen at and around
// their limits, and mostly valid otherwise, so that many get past the
// parser.
func hostileRandomRequest(rng *rand.Rand, region uint64, tag uint64) Request {
	q := Request{Tag: tag}
	q.Op = Op(hostilePick(rng, 0, 1, 2, 2, 2, 3, 4, 4, 5, 5, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 255))
	if rng.IntN(4) == 0 {
		q.Flags = uint8(rng.IntN(8))
	}
	q.Handle = hostilePick(rng, 0, 1, 1, 2, 3, 63, 64, 65, MaxHandles, MaxHandles+1, ^uint32(0))
	q.Off = hostilePick(rng, 0, 0, 1, 4095, 4096, 5000, 1<<20, engine.MaxFileSize-1, engine.MaxFileSize,
		engine.MaxFileSize+1, 1<<63, ^uint64(0))
	names := region - 256
	switch q.Op {
	case OpOpen, OpRemove, OpStat, OpRename:
		// A few names, at the end of the region.
		q.Addr = names + uint64(rng.IntN(3))
		q.Len = hostilePick[uint32](rng, 1, 1, 2, 0, 255, 256)
		if q.Op == OpRename {
			q.Len2 = hostilePick[uint32](rng, 1, 2, 0)
		}
	default:
		q.Addr = hostilePick(rng, 0, 0, 4096, region-4096, region-1, region, region+1, ^uint64(0)-10)
		q.Len = hostilePick[uint32](rng, 0, 1, 4096, 4097, 64<<10, 64<<10+1, 256<<10, MaxIO, MaxIO+1, ^uint32(0))
	}
	if rng.IntN(20) == 0 {
		q.Len2 = 1
	}
	return q
}

// TestRandomRequestsEachGetOneReply: clients of both versions send
// batches of random requests (every opcode, edge handles, offsets,
// ranges and flags); every request must get exactly one reply with its
// tag, no session may hang or lose its connection for a well-framed
// request, and the daemon must serve a plain client afterwards and shut
// down cleanly.
func TestRandomRequestsEachGetOneReply(t *testing.T) {
	cfg := testConfig(emuDevice(t), filepath.Join(t.TempDir(), "zf.sock"))
	d := startDaemon(t, cfg)
	for _, v := range hostileVersions {
		t.Run(v.name, func(t *testing.T) {
			c := v.dial(t, d.socket)
			region := uint64(len(c.region))
			copy(c.region[region-256:], "abc")
			rng := rand.New(rand.NewPCG(43, uint64(len(v.name))))
			var tag uint64
			var reps [MaxBatch]Reply
			statuses := map[Status]int{}
			deadline := time.Now().Add(30 * time.Second)
			for batch := 0; batch < 600; batch++ {
				n := 1 + rng.IntN(32)
				reqs := make([]Request, n)
				want := map[uint64]bool{}
				for i := range reqs {
					tag++
					reqs[i] = hostileRandomRequest(rng, region, tag)
					want[tag] = true
				}
				if err := c.Submit(reqs); err != nil {
					t.Fatalf("batch %d: submit: %v", batch, err)
				}
				ctx, cancel := context.WithDeadline(context.Background(), deadline)
				stop := c.watch(ctx)
				for len(want) > 0 {
					k, err := c.Recv(reps[:])
					if err != nil {
						stop()
						cancel()
						t.Fatalf("batch %d (%v): %d replies missing: %v", batch, reqs, len(want), err)
					}
					for _, r := range reps[:k] {
						if !want[r.Tag] {
							stop()
							cancel()
							t.Fatalf("batch %d: reply with tag %d, unexpected or twice", batch, r.Tag)
						}
						delete(want, r.Tag)
						statuses[r.Status]++
					}
				}
				stop()
				cancel()
			}
			t.Logf("statuses: %v", statuses)
		})
	}
	c := dial(t, d.socket)
	h, _, err := c.Open(context.Background(), "after", OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteAt(context.Background(), h, []byte("served"), 0); err != nil {
		t.Fatal(err)
	}
	if err := d.stop(t); err != nil {
		t.Fatalf("shutdown after random requests: %v", err)
	}
}
