package server

// A Client call cut short by its context leaves its
// requests with the daemon; the client must not trip over them.

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestCallAfterACanceledCallSucceeds: a ReadAt whose context is
// canceled while the daemon still runs the read returns at once; the
// read goes on and is answered later. The client's next calls, with live
// contexts, must succeed and read back what they wrote.
//
// Before the fix the late reply came first to the next call, which
// failed with "reply with unexpected tag" and left its own replies in
// the ring or the socket for the call after it, which failed the same
// way, and so on: one canceled call broke every later call on the
// connection. Worse, the abandoned read still owned its part of the
// region: the daemon wrote the read's bytes there when it ran, into the
// data a later WriteAt had put there to send (a write of the wrong bytes
// to another file) or a later ReadAt was about to copy out (another
// file's bytes returned as this one's). The client now waits for the
// replies of the requests a canceled call left before it puts anything
// in the region. The case where the late reply comes only after the
// next call has started failed when it waited only before sending (the
// write sent the read's bytes).
func TestCallAfterACanceledCallSucceeds(t *testing.T) {
	d := newDaemon(t)
	for _, v := range hostileVersions {
		for _, late := range []bool{false, true} {
			name := v.name + "/late reply before the next call"
			if late {
				name = v.name + "/late reply after the next call started"
			}
			t.Run(name, func(t *testing.T) { callAfterACanceledCall(t, d, v.dial, name, late) })
		}
	}
}

// callAfterACanceledCall is TestCallAfterACanceledCallSucceeds with one
// version and one order of the read's late reply and the next call.
func callAfterACanceledCall(t *testing.T, d *daemon, dialV func(testing.TB, string) *Client, name string, late bool) {
	ctx := context.Background()
	c := dialV(t, d.socket)
	const n = 256 << 10
	ha, _, err := c.Open(ctx, "a-"+name, OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteAt(ctx, ha, bytes.Repeat([]byte{'A'}, n), 0); err != nil {
		t.Fatal(err)
	}
	hb, _, err := c.Open(ctx, "b-"+name, OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	held, release := holdOp(t, OpRead)
	cancelHeldRead(t, c, ha, n, held)
	want := bytes.Repeat([]byte{'B'}, n)
	if late {
		// The next call starts before the daemon has run the read:
		// it must wait for the read's reply before it puts its data
		// where the read lands.
		if err := writeBeforeLateReply(t, c, hb, want, release); err != nil {
			t.Fatalf("WriteAt started before the canceled read's late reply: %v", err)
		}
	} else {
		// The daemon finishes the read and answers it.
		before := d.srv.stats.repliesOut.Load()
		release()
		for d.srv.stats.repliesOut.Load() == before {
			time.Sleep(time.Millisecond)
		}
	}
	for i := range 3 {
		if i > 0 || !late {
			if _, err := c.WriteAt(ctx, hb, want, 0); err != nil {
				t.Fatalf("call %d after a canceled call, with a live context: WriteAt: %v", i+1, err)
			}
		}
		got := make([]byte, n)
		if _, err := c.ReadAt(ctx, hb, got, 0); err != nil {
			t.Fatalf("call %d after a canceled call, with a live context: ReadAt: %v", i+1, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("after a canceled call, file b reads %q..., want %q...", got[:8], want[:8])
		}
	}
}

// hostileVersions dials a client of each protocol version.
var hostileVersions = []struct {
	name string
	dial func(testing.TB, string) *Client
}{{"rings", dial}, {"socket framing", dialFraming}}
