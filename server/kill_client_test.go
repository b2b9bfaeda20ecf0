package server_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/zonefold/zonefold/server"
)

// mixedClient opens "shared" and "leak-probe", fills its whole queue
// (MaxInflight requests: 4 KiB writes the reader copies itself, 256 KiB
// writes, reads and fsyncs that go to workers) on "shared" past its first
// MiB, says so, and waits to be killed with them in flight. version is
// "rings" or "framing".
func mixedClient(socket, version string) int {
	ctx := context.Background()
	dial := server.Dial
	if version == "framing" {
		dial = server.DialSocketFraming
	}
	c, err := dial(ctx, socket, 64<<20)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	h, _, err := c.Open(ctx, "shared", server.OpenCreate)
	if err == nil {
		_, _, err = c.Open(ctx, "leak-probe", server.OpenCreate)
	}
	if err != nil {
		fmt.Println(err)
		return 1
	}
	var reqs []server.Request
	n := c.Limits().MaxInflight
	for i := range n {
		q := server.Request{Tag: uint64(i), Op: server.OpWrite, Handle: h, Off: 1<<20 + uint64(i)*(64<<10),
			Addr: uint64(i%128) * (256 << 10), Len: 4 << 10}
		switch i % 4 {
		case 1:
			q.Len = 256 << 10
		case 2:
			q.Op = server.OpRead
			q.Len = 64 << 10
		case 3:
			q = server.Request{Tag: uint64(i), Op: server.OpFsync, Handle: h}
		}
		if reqs = append(reqs, q); len(reqs) == server.MaxBatch || i == n-1 {
			if err := c.Submit(reqs); err != nil {
				fmt.Println(err)
				return 1
			}
			reqs = reqs[:0]
		}
	}
	fmt.Println("sent")
	time.Sleep(time.Minute)
	return 0
}

// TestKilledClientsLeakNothing: clients of both protocol versions are
// killed (SIGKILL) with a full queue of writes, reads and fsyncs in
// flight on a file another client is reading and writing meanwhile.
// That client must not notice; each killed client's session must end
// and give back everything it held (its connection, its shared memory,
// its handles: a remove that fails while any handle has the file open
// succeeds, its goroutines); the daemon must still stop cleanly, and
// what the other client fsynced must be there after a restart.
func TestKilledClientsLeakNothing(t *testing.T) {
	d := newServe(t)
	ctx := context.Background()
	good := dialServe(t, d)
	h, _, err := good.Open(ctx, "shared", server.OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	mine := bytes.Repeat([]byte("the other client's first MiB "), (1<<20)/29+1)[:1<<20]
	if _, err := good.WriteAt(ctx, h, mine, 0); err != nil {
		t.Fatal(err)
	}
	shm := d.metricValue(t, "zonefold_server_shared_memory_bytes")
	goroutines := d.metricValue(t, "go_goroutines")
	got := make([]byte, 64<<10)
	for i := range 6 {
		version := []string{"rings", "framing"}[i%2]
		cmd := startSentClient(t, "mixed-client", d.socket, version)
		// The other client works on the same file meanwhile.
		off := int64(i) * int64(len(got))
		if _, err := good.WriteAt(ctx, h, mine[off:off+int64(len(got))], off); err != nil {
			t.Fatalf("beside a %s client with a full queue: %v", version, err)
		}
		if err := good.Fsync(ctx, h); err != nil {
			t.Fatalf("beside a %s client with a full queue: %v", version, err)
		}
		cmd.Process.Kill()
		cmd.Wait()
		if _, err := good.ReadAt(ctx, h, got, off); err != nil || !bytes.Equal(got, mine[off:off+int64(len(got))]) {
			t.Fatalf("read after a %s client was killed: %v", version, err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for d.metricValue(t, "zonefold_server_connections") != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("killed clients' sessions did not end: %v connections\n%s",
				d.metricValue(t, "zonefold_server_connections"), d.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if v := d.metricValue(t, "zonefold_server_shared_memory_bytes"); v != shm {
		t.Fatalf("%v bytes of shared memory after the killed clients' sessions ended, %v before them", v, shm)
	}
	// Each session ends its workers before it counts as ended; a few
	// goroutines more are the metrics server's own connections.
	if v := d.metricValue(t, "go_goroutines"); v > goroutines+5 {
		t.Fatalf("%v goroutines after the killed clients' sessions ended, %v before them", v, goroutines)
	}
	if err := removeUnused(ctx, good, "leak-probe"); err != nil {
		t.Fatalf("remove leak-probe, which only killed clients had open: %v (a handle of theirs is still open)", err)
	}
	good.Close()
	d.stop()
	_, c, h, size := restartAndOpen(t, d, "shared")
	if size < int64(len(mine)) {
		t.Fatalf("shared after the restart: %d bytes", size)
	}
	all := make([]byte, len(mine))
	if _, err := c.ReadAt(ctx, h, all, 0); err != nil || !bytes.Equal(all, mine) {
		t.Fatalf("the other client's fsynced MiB after the restart differs (%v)", err)
	}
	if !strings.Contains(d.stderr.String(), "engine flushed and checkpointed") {
		t.Fatalf("no checkpoint at the stop:\n%s", d.stderr)
	}
}

// removeUnused removes name with the RemoveUnused flag: EBUSY while any
// client has it open.
func removeUnused(ctx context.Context, c *server.Client, name string) error {
	copy(c.Data(), name)
	if err := c.Submit([]server.Request{{Tag: 1, Op: server.OpRemove, Flags: server.RemoveUnused, Len: uint32(len(name))}}); err != nil {
		return err
	}
	reps := make([]server.Reply, server.MaxBatch)
	n, err := c.Recv(reps)
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("%d replies to one remove", n)
	}
	return reps[0].Status.Err()
}
