package server

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// TestH33bIdleWorkersRetire: a connection's workers grow to as many as
// its requests that run at once (a burst of fsyncs, say), and they
// lived as long as the connection: after a burst of 256 requests held
// in flight at once, 256 goroutines (and their stacks, ~7 KiB each)
// stayed for as long as the client stayed connected, idle. 8 clients
// that once sent 512 fsyncs each held 3,900 goroutines and 29 MB of
// stacks; at --max-clients 1024 with rings of 4096 entries (fio's
// iodepth), that is tens of GB the daemon never gave back. Idle workers
// retire now, and a new burst grows them again.
func TestH33bIdleWorkersRetire(t *testing.T) {
	idle := workerIdle
	workerIdle = 50 * time.Millisecond
	// Put back once the daemon (whose cleanup runs first) has stopped.
	t.Cleanup(func() { workerIdle = idle })
	socket, _, _ := newTestServerEmu(t, Options{})
	c := dialFraming(t, socket)
	defer c.Close()
	const burst = 256
	release := make(chan struct{})
	var held atomic.Int64
	hook := func(q *Request, r *Reply) {
		if q.Op == OpStat {
			held.Add(1)
			<-release
		}
	}
	execHook.Store(&hook)
	defer execHook.Store(nil)
	before := int64(runtime.NumGoroutine())
	for round := range 2 {
		held.Store(0)
		name := "missing"
		copy(c.Data(), name)
		reqs := make([]Request, burst)
		for i := range reqs {
			reqs[i] = Request{Tag: uint64(i), Op: OpStat, Len: uint32(len(name))}
		}
		if err := c.Submit(reqs); err != nil {
			t.Fatal(err)
		}
		// Every request runs at once: one worker each.
		awaitProgress(t, fmt.Sprintf("round %d: requests running at once", round), burst, held.Load)
		for range burst {
			release <- struct{}{}
		}
		reps := make([]Reply, MaxBatch)
		for got := 0; got < burst; {
			n, err := c.Recv(reps)
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
		// Idle, they retire.
		deadline := time.Now().Add(30 * time.Second)
		for int64(runtime.NumGoroutine()) > before+burst/4 {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %d goroutines 30 s after a burst of %d requests ended, %d before it",
					round, runtime.NumGoroutine(), burst, before)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	execHook.Store(nil)
	if _, err := c.Stat(context.Background(), "missing"); err == nil {
		t.Fatal("stat of a missing file succeeded")
	}
}
