package server

import (
	"context"
	"testing"
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
			socket, _, _ := newTestServerEmu(t, tc.opts)
			ctx := context.Background()
			a, err := Dial(ctx, socket, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			copy(a.Data(), "a write")
			release := holdWrite(t, a, "a", 7)
			a.Close() // gone, its write still held in the daemon
			arrivalWaits(t, socket, waiting, "a client connecting after the only other one closed its socket", release)
		})
	}
}
