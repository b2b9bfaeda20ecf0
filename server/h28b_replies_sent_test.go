package server

// h28b item 2: TestH28bErrorRepliesCountedWhenSent:
// zonefold_server_errors_total is error replies sent, by status. Error
// replies the daemon dropped (the client gone, or given up at shutdown:
// sendFailed) were counted too, as they were encoded, before their send.
//
// It holds requests with execHook, so what is in flight when the client
// goes is known, not raced.

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

// h28bHold holds every request of op op in exec until release; held
// counts those held.
func h28bHold(t *testing.T, op Op) (held *atomic.Int64, release func()) {
	held = new(atomic.Int64)
	rel := make(chan struct{})
	hook := func(q *Request, _ *Reply) {
		if q.Op == op {
			held.Add(1)
			<-rel
		}
	}
	execHook.Store(&hook)
	closed := false
	release = func() {
		if !closed {
			closed = true
			close(rel)
		}
	}
	t.Cleanup(func() { release(); execHook.Store(nil) })
	return held, release
}

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
	held, release := h28bHold(t, OpFsync)
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
	awaitProgress(t, "the fsyncs held", int64(len(reqs)), held.Load)
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
