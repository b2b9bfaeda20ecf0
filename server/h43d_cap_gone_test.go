package server

import (
	"context"
	"testing"
	"time"
)

// TestH43dClientAfterOneThatLeftIsNotRefused: at its cap (--max-clients,
// or --max-shared-memory with room for one region), the daemon refused a
// client that connected just after the only client had closed its
// socket, because the daemon had not yet noticed that one go (or was
// still tearing its session down), and the place and the memory it held
// were released only then. fio's setup connection (fio/engine.c) is
// closed before its jobs connect, precisely so that it holds none of
// the clients or memory the jobs need: `zonefold serve --max-clients 1`
// and one fio job failed 6 of 20 runs with "zonefold connect, error=Too
// many users". A client at the cap now waits, while a session is ending
// (its client hung up, or its teardown runs), for that session to give
// its place back, and is refused only if none is ending.
//
// The test makes the daemon late deterministically: the gone client's
// reader is held in a write (an exec hook) when the client closes its
// socket, so the daemon has not read its end yet; the next client must
// be let in once that session ends, not refused meanwhile.
func TestH43dClientAfterOneThatLeftIsNotRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"max-clients", Options{MaxConns: 1}},
		// One client's region (1 MiB and its rings) fits, two do not.
		{"max-shared-memory", Options{MaxSharedMemory: 1<<20 + 1<<19}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			waiting := make(chan struct{}, 16)
			hook := func() { waiting <- struct{}{} }
			awaitEndHook.Store(&hook)
			t.Cleanup(func() { awaitEndHook.Store(nil) })
			socket, _, srv := newTestServerEmu(t, tc.opts)
			ctx := context.Background()
			a, err := Dial(ctx, socket, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			h, _, err := a.Open(ctx, "a", OpenCreate)
			if err != nil {
				t.Fatal(err)
			}
			held, release := holdOps(t, OpWrite)
			copy(a.Data(), "a write")
			if err := a.Submit([]Request{{Tag: 1, Op: OpWrite, Handle: h, Len: 7}}); err != nil {
				t.Fatal(err)
			}
			<-held
			a.Close() // gone, its write still held in the daemon
			dialed := make(chan error, 1)
			go func() {
				b, err := Dial(ctx, socket, 1<<20)
				if err == nil {
					b.Close()
				}
				dialed <- err
			}()
			select {
			case err := <-dialed:
				release()
				t.Fatalf("a client connecting after the only other one closed its socket: %v (want it let in once the daemon ends that session; refused %d)",
					err, srv.stats.refused.Load())
			case <-waiting:
			}
			release()
			select {
			case err := <-dialed:
				if err != nil {
					t.Fatalf("the session of the client that left ended, and the next client got %v", err)
				}
			case <-time.After(noProgress):
				t.Fatalf("the next client was not let in within %v of the gone one's session ending", noProgress)
			}
		})
	}
}
