package server_test

// Probe 2 of h27a: TestH26aShutdownBesidePipeliningClientsThatNeverRead
// shuts an in-process server down by canceling Run's context. Here the
// daemon is a real `zonefold serve` process stopped by a real SIGTERM,
// beside a socket-framing client that pipelines writes and never reads
// a reply, and a client that writes and fsyncs: the daemon must exit 0
// with a checkpoint without waiting out the grace period, the device
// must be fsck-clean, and the fsynced data there after a restart.

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/zonefold/zonefold/server"
)

func TestH27aSIGTERMBesideClientThatNeverReads(t *testing.T) {
	want := bytes.Repeat([]byte("fsynced beside a client that reads nothing, then SIGTERM "), 20000)
	// The hostile client: 16 KiB writes, one per message, without end,
	// and no reply read. Its sends block once the daemon stops reading
	// it (MaxInflight unanswered, its replies filling the socket).
	b := startBesideNeverReads(t, want, "pipelined")
	d, good, gh, half, bad, bh := b.d, b.good, b.gh, b.half, b.bad, b.bh
	ctx := context.Background()
	submitted := make(chan int, 1)
	go func() {
		n := 0
		for ; ; n++ {
			q := server.Request{Tag: uint64(n + 1), Op: server.OpWrite, Handle: bh, Off: uint64(n%256) << 14, Len: 16 << 10}
			if bad.Submit([]server.Request{q}) != nil {
				break // the daemon closed the connection
			}
		}
		submitted <- n
	}()
	// Until the daemon stops taking its requests.
	const received = "zonefold_server_requests_received_total"
	for last := -1.0; ; {
		time.Sleep(300 * time.Millisecond)
		now := d.metric(received)
		if now == last && now > server.MaxInflight {
			t.Logf("%v requests received", now)
			break
		}
		last = now
	}

	// The daemon still serves the good client, which writes the rest
	// and fsyncs again.
	if _, err := good.WriteAt(ctx, gh, want[half:], int64(half)); err != nil {
		t.Fatal(err)
	}
	if err := good.Fsync(ctx, gh); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	d.stop() // SIGTERM; exit status 0 and a checkpoint, within a generous watchdog
	t.Logf("SIGTERM to exit: %v; the hostile client sent %d requests", time.Since(start), <-submitted)
	if strings.Contains(d.stderr.String(), "outlived the grace period") {
		t.Fatalf("shutdown waited out the grace period for a client that reads nothing:\n%s", d.stderr)
	}
	fsckClean(t, b.dev, "after SIGTERM")

	d, c, h, size := restartAndOpen(t, d, "good")
	if size != int64(len(want)) {
		t.Fatalf("the good client's file after SIGTERM and a restart: %d bytes, want %d", size, len(want))
	}
	got := make([]byte, len(want))
	if n, err := c.ReadAt(ctx, h, got, 0); n != len(want) || !bytes.Equal(got, want) {
		t.Fatalf("the good client's fsynced data changed across SIGTERM (%d bytes read, %v)", n, err)
	}
	d.stop()
	fsckClean(t, b.dev, "after the second SIGTERM")
}
