package server

import (
	"bytes"
	"context"
	"path/filepath"
	"runtime"
	"testing"
)

// TestColdReadsOfABatchEnterTogether: a batch of reads the cache does
// not hold (a fresh daemon), each a whole folio's worth, is begun by the
// connection's reader (startRead), not handed to a worker each, and
// their device reads enter the kernel in one io_uring_enter (the reader's
// plug): with a worker per miss, eight cold 64k reads started up to
// eight workers and went to the device as the workers got a CPU. Their
// bytes are the file's, in the client's buffers.
func TestColdReadsOfABatchEnterTogether(t *testing.T) {
	cfg := testConfig(emuDevice(t), filepath.Join(t.TempDir(), "zf.sock"))
	cfg.Engine.ReadaheadMax = -1 // nothing read ahead of the batch
	d := startDaemon(t, cfg)
	ctx := context.Background()
	const depth, bs = 8, 64 << 10
	want := make([]byte, (depth+1)*bs)
	for i := range want {
		want[i] = byte(i*13 + i/bs)
	}
	c := dial(t, d.socket)
	h22dWrite(t, c, "cold", want, true)
	for _, v := range []string{"rings", "socket framing"} {
		t.Run(v, func(t *testing.T) {
			// A new daemon: nothing of the file is cached.
			d, c = d.restart(t, cfg, c)
			if v == "socket framing" {
				c.Close()
				c = dialFraming(t, d.socket)
			}
			h, _, err := c.Open(ctx, "cold", 0)
			if err != nil {
				t.Fatal(err)
			}
			// The file's first read makes its cache state (a worker's):
			// the last block, outside the batch.
			last := make([]byte, bs)
			if _, err := c.ReadAt(ctx, h, last, depth*bs); err != nil || !bytes.Equal(last, want[depth*bs:]) {
				t.Fatalf("first read: %v, or its bytes differ", err)
			}
			reqs := make([]Request, depth)
			for i := range reqs {
				j := (i*5 + 3) % depth // not in order: nothing sequential
				reqs[i] = Request{Tag: uint64(i + 1), Op: OpRead, Handle: h, Off: uint64(j * bs), Addr: uint64(j * bs), Len: bs}
			}
			clear(c.region[:depth*bs])
			before := d.srv.e.Stats().Ring
			goroutines := runtime.NumGoroutine()
			submitReads(t, c, reqs)
			after := d.srv.e.Stats().Ring
			if !bytes.Equal(c.region[:depth*bs], want[:depth*bs]) {
				t.Fatal("the cold reads' bytes differ from what was written")
			}
			if n := runtime.NumGoroutine() - goroutines; n >= depth/2 {
				t.Errorf("%d goroutines more for a batch of %d cold reads (workers?)", n, depth)
			}
			sqes, enters := after.SQEs-before.SQEs, after.SubmitEnters-before.SubmitEnters
			t.Logf("%d SQEs in %d entries", sqes, enters)
			if sqes < depth || enters != 1 {
				t.Errorf("the batch's %d cold reads went to the kernel as %d SQEs in %d io_uring_enter calls, want at least %d in 1", depth, sqes, enters, depth)
			}
		})
	}
}
