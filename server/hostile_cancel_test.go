package server

// A Client call cut short by its context leaves its
// requests with the daemon; the client must not trip over them.

import (
	"bytes"
	"context"
	"errors"
	"sync"
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
// replies of the requests a canceled call left, before it sends the
// next batch.
func TestCallAfterACanceledCallSucceeds(t *testing.T) {
	d := newDaemon(t)
	for _, v := range hostileVersions {
		t.Run(v.name, func(t *testing.T) {
			ctx := context.Background()
			c := v.dial(t, d.socket)
			const n = 256 << 10
			ha, _, err := c.Open(ctx, "a-"+v.name, OpenCreate)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.WriteAt(ctx, ha, bytes.Repeat([]byte{'A'}, n), 0); err != nil {
				t.Fatal(err)
			}
			hb, _, err := c.Open(ctx, "b-"+v.name, OpenCreate)
			if err != nil {
				t.Fatal(err)
			}
			held, rel := make(chan struct{}), make(chan struct{})
			hook := func(q *Request, _ *Reply) {
				if q.Op == OpRead && q.Handle == ha {
					close(held)
					<-rel
				}
			}
			execHook.Store(&hook)
			var once sync.Once
			release := func() { once.Do(func() { execHook.Store(nil); close(rel) }) }
			defer release()
			rctx, cancel := context.WithCancel(ctx)
			errc := make(chan error, 1)
			go func() {
				_, err := c.ReadAt(rctx, ha, make([]byte, n), 0)
				errc <- err
			}()
			<-held
			cancel()
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Fatalf("canceled ReadAt: %v, want context.Canceled", err)
			}
			// The daemon finishes the read and answers it.
			before := d.srv.stats.repliesOut.Load()
			release()
			for d.srv.stats.repliesOut.Load() == before {
				time.Sleep(time.Millisecond)
			}
			want := bytes.Repeat([]byte{'B'}, n)
			for i := range 3 {
				if _, err := c.WriteAt(ctx, hb, want, 0); err != nil {
					t.Fatalf("call %d after a canceled call, with a live context: WriteAt: %v", i+1, err)
				}
				got := make([]byte, n)
				if _, err := c.ReadAt(ctx, hb, got, 0); err != nil {
					t.Fatalf("call %d after a canceled call, with a live context: ReadAt: %v", i+1, err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("after a canceled call, file b reads %q..., want %q...", got[:8], want[:8])
				}
			}
		})
	}
}

// hostileVersions dials a client of each protocol version.
var hostileVersions = []struct {
	name string
	dial func(testing.TB, string) *Client
}{{"rings", dial}, {"socket framing", dialFraming}}
