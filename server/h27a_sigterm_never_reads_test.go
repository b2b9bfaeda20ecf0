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
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zonefold/zonefold/server"
)

func TestH27aSIGTERMBesideClientThatNeverReads(t *testing.T) {
	dir := t.TempDir()
	dev := fmt.Sprintf("emu:%s?zone_size=16M&zones=64", filepath.Join(dir, "dev"))
	d := startServe(t, dev, filepath.Join(dir, "zf.sock"))
	ctx := context.Background()

	good := dialServe(t, d)
	defer good.Close()
	gh, _, err := good.Open(ctx, "good", server.OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte("fsynced beside a client that reads nothing, then SIGTERM "), 20000)
	half := len(want) / 2
	if _, err := good.WriteAt(ctx, gh, want[:half], 0); err != nil {
		t.Fatal(err)
	}
	if err := good.Fsync(ctx, gh); err != nil {
		t.Fatal(err)
	}

	// The hostile client: 16 KiB writes, one per message, without end,
	// and no reply read. Its sends block once the daemon stops reading
	// it (MaxInflight unanswered, its replies filling the socket).
	bad, err := server.DialSocketFraming(ctx, d.socket, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	bh, _, err := bad.Open(ctx, "pipelined", server.OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
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
	fsckClean(t, dev, "after SIGTERM")

	d, c, h, size := restartAndOpen(t, d, "good")
	if size != int64(len(want)) {
		t.Fatalf("the good client's file after SIGTERM and a restart: %d bytes, want %d", size, len(want))
	}
	got := make([]byte, len(want))
	if n, err := c.ReadAt(ctx, h, got, 0); n != len(want) || !bytes.Equal(got, want) {
		t.Fatalf("the good client's fsynced data changed across SIGTERM (%d bytes read, %v)", n, err)
	}
	d.stop()
	fsckClean(t, dev, "after the second SIGTERM")
}
