package server

import (
	"bytes"
	"context"
	"runtime"
	"testing"
)

// TestCachedReadsServedByTheReader: a batch of reads the cache holds is
// answered by the connection's reader (readCached), not handed to a
// worker each: 32 of them at once would start up to 32 workers, which
// live until they are idle for workerIdle (10 s).
// Their bytes are the cache's.
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
		clear(c.region[depth*bs : 2*depth*bs])
		// Workers live until idle for workerIdle: the goroutines
		// that the reads' workers would be.
		before := runtime.NumGoroutine()
		submitReads(t, c, reqs)
		if !bytes.Equal(c.region[depth*bs:2*depth*bs], want) {
			t.Fatal("the reads' bytes differ from what was written")
		}
		if n := runtime.NumGoroutine() - before; n >= 8 {
			t.Fatalf("%d goroutines more for a batch of %d cached reads (workers?)", n, depth)
		}
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
