package server

// h28b items 2 and 3: what the daemon counts and answers when replies
// cannot all go out.
//
// TestH28bErrorRepliesCountedWhenSent: zonefold_server_errors_total is
// error replies sent, by status. Error replies the daemon dropped (the
// client gone, or given up at shutdown: sendFailed) were counted too,
// as they were encoded, before their send.
//
// TestH28bShutdownAnswersRequestsGivenNoSlot: a socket-framing batch
// read as shutdown began, with every slot in flight, was counted
// received and the rest of it neither run nor answered: its calls ended
// with the connection's end, not a status. They are answered ESHUTDOWN
// (not run), once slots come free as the replies before them are sent.
//
// Both hold requests with execHook, so what is in flight when the client
// goes or shutdown begins is known, not raced.

import (
	"context"
	"errors"
	"io"
	"testing"
)

// errorReplies is the sum of the server's error replies by status.
func (s *Server) errorReplies() int64 {
	var n int64
	for i := range s.stats.errors {
		n += s.stats.errors[i].Load()
	}
	return n
}

func TestH28bErrorRepliesCountedWhenSent(t *testing.T) {
	d := newDaemon(t)
	held, release := holdOps(t, OpFsync)
	c := dialFraming(t, d.socket)
	ctx := context.Background()

	// An error reply sent is counted (once the send has returned,
	// which may be after the client has it).
	if _, err := c.Stat(ctx, "missing"); !errors.Is(err, StatusNotExist) {
		t.Fatalf("stat of a missing file: %v", err)
	}
	awaitProgress(t, "the ENOENT reply counted", 1, d.srv.errorReplies)

	// Eight requests that fail (EBADF: no such handle), answered only
	// once the client has gone: their replies cannot be sent.
	reqs := make([]Request, 8)
	for i := range reqs {
		reqs[i] = Request{Tag: uint64(100 + i), Op: OpFsync, Handle: 77}
	}
	if err := c.Submit(reqs); err != nil {
		t.Fatal(err)
	}
	for range reqs {
		<-held
	}
	c.Close()
	release()
	awaitProgress(t, "the session's end", 1, func() int64 {
		if d.srv.stats.active.Load() == 0 {
			return 1
		}
		return 0
	})
	if n, bad := d.srv.errorReplies(), d.srv.stats.errors[StatusBadHandle].Load(); n != 1 || bad != 0 {
		t.Fatalf("errors_total %d (EBADF %d) after one error reply sent and %d dropped with the client gone; want 1 (EBADF 0)",
			n, bad, len(reqs))
	}
}

func TestH28bShutdownAnswersRequestsGivenNoSlot(t *testing.T) {
	d := newDaemon(t)
	held, release := holdOps(t, OpFsync)
	c := dialFraming(t, d.socket)
	base := d.srv.stats.requestsIn.Load()

	// Every slot in flight: MaxInflight fsyncs, held.
	for b := range MaxInflight / MaxBatch {
		reqs := make([]Request, MaxBatch)
		for i := range reqs {
			reqs[i] = Request{Tag: uint64(b*MaxBatch + i + 1), Op: OpFsync}
		}
		if err := c.Submit(reqs); err != nil {
			t.Fatal(err)
		}
	}
	for range MaxInflight {
		<-held // each hook signals, then waits for release
	}
	// A batch more, read (counted) but given no slot.
	extra := []Request{{Tag: 1001, Op: OpNop}, {Tag: 1002, Op: OpFsync}, {Tag: 1003, Op: OpNop}}
	if err := c.Submit(extra); err != nil {
		t.Fatal(err)
	}
	awaitProgress(t, "the extra batch read", MaxInflight+int64(len(extra)), func() int64 {
		return d.srv.stats.requestsIn.Load() - base
	})

	// Shutdown begins; once the connection has stopped reading, the
	// held fsyncs finish and are answered.
	stopped := make(chan error, 1)
	go func() { stopped <- d.stop(t) }()
	awaitProgress(t, "the connection stopping", 1, func() int64 {
		d.srv.mu.Lock()
		defer d.srv.mu.Unlock()
		for sc := range d.srv.conns {
			if !sc.stopping.Load() {
				return 0
			}
		}
		return 1
	})
	release()

	got := map[uint64]Status{}
	reps := make([]Reply, MaxBatch)
	var end error
	for end == nil {
		var n int
		n, end = c.Recv(reps)
		for _, r := range reps[:n] {
			if _, dup := got[r.Tag]; dup {
				t.Errorf("tag %d answered twice", r.Tag)
			}
			got[r.Tag] = r.Status
		}
	}
	if !errors.Is(end, io.ErrUnexpectedEOF) {
		t.Errorf("the connection's end: %v", end)
	}
	for tag := uint64(1); tag <= MaxInflight; tag++ {
		if _, ok := got[tag]; !ok {
			t.Errorf("held fsync %d: no reply", tag)
		}
	}
	for _, q := range extra {
		if st, ok := got[q.Tag]; !ok || st != StatusShutdown {
			t.Errorf("%v (tag %d), read as shutdown began with no slot free: answered %v (%v), want %v",
				q.Op, q.Tag, ok, st, StatusShutdown)
		}
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Run after shutdown: %v", err)
	}
}
