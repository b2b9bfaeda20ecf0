package server

import (
	"context"
	"testing"
	"time"
)

// TestH15DeadClientsSessionEndsWhileItsSmallWritesAreThrottled: docs/protocol.md
// says a client that closes its socket or dies ends its session: its
// requests still running are canceled, the daemon waits for them, closes
// its handles and unmaps its region. A client (fio's 4k writes at
// iodepth 128) writes to a device that fails every append until its
// writes stop being answered (throttled behind dirty data no writeback
// can clean), then closes its socket. Its session must end within
// seconds, as it does when the writes are 256 KiB (run by workers, whose
// throttle wait the connection's end cancels). On main small writes are
// copied by the connection's reader, which is what would see the end of
// stream: blocked in the throttle, it never reads the socket, the
// session is never canceled, and the dead client keeps its region, its
// handles and its connection slot for as long as the device fails.
//
// Since the throttle gives up once writeback keeps failing
// (cache.stuckFailures), throttled writes are answered, with EIO, after
// their wait: the first round with an error reply is the one the
// throttle held. The client then stops reaping, queues more rounds (for
// the reader to copy, one throttle wait each) and closes its socket
// while they wait. Before, unless a round went 5 s unanswered (under
// load it does), the client went on to 32 MiB of reaped rounds (every
// one past the dirty limit throttled, about a second each) only to
// close an idle connection: it tested less and took 75 s instead of 6.
func TestH15DeadClientsSessionEndsWhileItsSmallWritesAreThrottled(t *testing.T) {
	socket, emu, srv := newTestServerEmu(t, Options{Grace: time.Second})
	c, err := Dial(context.Background(), socket, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	h, _, err := c.Open(context.Background(), "a", OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	emu.FailWrites(true)
	// 4 KiB writes, 128 at a time, never reaped, up to 32 MiB
	bs := uint64(4096)
	reqs := make([]Request, 128)
	for i := range reqs {
		reqs[i] = Request{Tag: uint64(i), Op: OpWrite, Handle: h, Off: uint64(i) * bs, Addr: uint64(i) * bs, Len: uint32(bs)}
	}
	reps := make([]Reply, 256)
	off := uint64(0)
	submit := func() {
		t.Helper()
		for i := range reqs {
			reqs[i].Off = off
			off += bs
		}
		if err := c.Submit(reqs); err != nil {
			t.Fatal(err)
		}
	}
	got, refused := 0, 0
	for round := 0; round < 64 && refused == 0; round++ {
		submit()
		n := 0
		deadline := time.Now().Add(5 * time.Second)
		for n < len(reqs) && time.Now().Before(deadline) {
			c.uc.SetReadDeadline(deadline)
			k, err := c.Recv(reps)
			if err != nil {
				break
			}
			for _, r := range reps[:k] {
				if r.Status != StatusOK {
					refused++
				}
			}
			n += k
		}
		got += n
		if n < len(reqs) {
			t.Logf("round %d: %d of %d replies after 5 s (total %d, %d MiB written)", round, n, len(reqs), got, off>>20)
			break
		}
		if refused > 0 {
			t.Logf("round %d: %d of %d writes refused after their throttle wait (%d MiB written)", round, refused, len(reqs), off>>20)
		}
	}
	if refused == 0 && got == 64*len(reqs) {
		t.Fatalf("32 MiB of 4 KiB writes on a device that fails every append were all answered OK: the throttle never held them")
	}
	// Writes for the reader to copy, each behind a throttle wait, unreaped,
	// as many as the client's rings hold (256 outstanding).
	for sent := int(off / bs); sent-got+len(reqs) <= 2*len(reqs); sent += len(reqs) {
		submit()
	}
	t.Logf("connections before close: %d", srv.Connections())
	c.Close()
	for i := 0; i < 20 && srv.Connections() > 0; i++ {
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("connections 5 s after the client closed: %d", srv.Connections())
	if srv.Connections() > 0 {
		t.Errorf("the session of a client that closed its socket 5 s ago is still open (%d connections): its small writes, throttled in the connection's reader, were never canceled", srv.Connections())
	}
}
