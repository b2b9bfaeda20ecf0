package server

import (
	"bytes"
	"context"
	"testing"
)

// TestCachedReadsServedByTheReader: a batch of reads the cache holds is
// answered by the connection's reader (readCached), not handed to a
// worker each: 32 of them at once would start up to 32 workers, which
// live until they are idle for workerIdle (10 s). Their bytes are the
// cache's.
//
// The reader only tries the locks a read needs, so a read that meets
// one held (the file's, briefly, by writeback's end or readahead) goes
// to a worker, rightly. Counting goroutines took such a moment for
// the thing tested (CI on stop 47: "30 goroutines more", -race on a
// loaded machine), and goroutines are process-wide; so the test counts
// the reads the reader served (zonefold_server_reads_cached_total), and
// a batch the reader served fewer than most of is tried again, up to 5
// times. Without readCached every batch serves 0.
func TestCachedReadsServedByTheReader(t *testing.T) {
	d := newDaemon(t)
	d.srv.procs = 2 // no pieces of inline work for workers, whatever the CPUs
	bothVersions(t, d.socket, func(t *testing.T, c *Client) {
		ctx := context.Background()
		h, _, err := c.Open(ctx, "cached", OpenCreate)
		if err != nil {
			t.Fatal(err)
		}
		const depth, bs = 32, 4096
		want := make([]byte, depth*bs)
		for i := range want {
			want[i] = byte(i*7 + i/bs)
		}
		if n, err := c.WriteAt(ctx, h, want, 0); err != nil || n != len(want) {
			t.Fatalf("WriteAt = %d, %v", n, err)
		}
		if err := c.Fsync(ctx, h); err != nil {
			t.Fatal(err)
		}
		reqs := make([]Request, depth)
		for i := range reqs {
			// Into the region at other offsets than the file's, so
			// that the bytes read are not the bytes written there.
			reqs[i] = Request{Tag: uint64(i + 1), Op: OpRead, Handle: h, Off: uint64(i * bs), Addr: uint64((depth + i) * bs), Len: bs}
		}
		var served []int64
		for range 5 {
			clear(c.region[depth*bs : 2*depth*bs])
			before := d.srv.stats.readsCached.Load()
			submitReads(t, c, reqs)
			if !bytes.Equal(c.region[depth*bs:2*depth*bs], want) {
				t.Fatal("the reads' bytes differ from what was written")
			}
			served = append(served, d.srv.stats.readsCached.Load()-before)
			if served[len(served)-1] >= depth*3/4 {
				return
			}
		}
		t.Fatalf("the reader served %v of each batch of %d cached reads (the rest went to workers)", served, depth)
	})
}

// submitReads submits reqs, reads, in one batch and waits for their
// replies, each of which must be a whole read.
func submitReads(t *testing.T, c *Client, reqs []Request) {
	t.Helper()
	if err := c.Submit(reqs); err != nil {
		t.Fatal(err)
	}
	reps := make([]Reply, MaxBatch)
	for got := 0; got < len(reqs); {
		n, err := c.Recv(reps)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range reps[:n] {
			if r.Status != StatusOK || r.Val != uint64(reqs[r.Tag-1].Len) {
				t.Fatalf("read: %+v", r)
			}
		}
		got += n
	}
}
