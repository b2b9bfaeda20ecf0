package server

// A call after a canceled one must wait for the canceled call's late
// replies before it puts its own name or data into the region, which the
// canceled request, not yet run, still owns. Both tests failed when the
// client waited for them only after copying (in roundTrip).

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"sync"
	"testing"
	"time"
)

// holdOp holds the daemon's first request with op (before it runs) until
// the returned release is called; held is closed once it is held.
func holdOp(t *testing.T, op Op) (held chan struct{}, release func()) {
	held, rel := make(chan struct{}), make(chan struct{})
	var first sync.Once
	hook := func(q *Request, _ *Reply) {
		if q.Op != op {
			return
		}
		hold := false
		first.Do(func() { hold = true })
		if hold {
			close(held)
			<-rel
		}
	}
	execHook.Store(&hook)
	var once sync.Once
	release = func() { once.Do(func() { execHook.Store(nil); close(rel) }) }
	t.Cleanup(release)
	return held, release
}

// claimWaits reports, by closing the returned channel, that a call has
// begun to wait for the replies of the calls cut short before it.
func claimWaits(t *testing.T) <-chan struct{} {
	waits := make(chan struct{})
	var once sync.Once
	hook := func() { once.Do(func() { close(waits) }) }
	claimHook.Store(&hook)
	t.Cleanup(func() { claimHook.Store(nil) })
	return waits
}

// untilRegion waits until the next call has started: it waits for the
// late replies (waits is closed), or it put want at p's start without
// waiting for them (the bug). A guard ends the wait if neither happens;
// the verdict never rests on it.
func untilRegion(p, want []byte, waits <-chan struct{}) {
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		select {
		case <-waits:
			return
		default:
		}
		if bytes.Equal(p[:len(want)], want) {
			return
		}
	}
}

// A Remove whose context is canceled while the daemon has not run it yet
// still owns its name in the control area. The next call, a Stat of
// another name of the same length, must wait for the Remove's late reply
// before it copies its name there: else the daemon runs the Remove on
// the Stat's name, and the file the caller only looked at is gone.
func TestCanceledRemoveLeavesTheNextCallsNameAlone(t *testing.T) {
	d := newDaemon(t)
	for _, v := range hostileVersions {
		t.Run(v.name, func(t *testing.T) {
			ctx := context.Background()
			c := v.dial(t, d.socket)
			release := cancelHeldRemove(t, c, "gone", "keep")
			statc := statWaitingForLateReplies(ctx, t, c, "keep")
			release()
			if err := <-statc; err != nil {
				t.Errorf("Stat(keep) after a canceled Remove(gone): %v", err)
			}
			if _, err := c.Stat(ctx, "keep"); errors.Is(err, fs.ErrNotExist) || errors.Is(err, StatusNotExist) {
				t.Fatalf("keep was removed by a canceled Remove of another name: %v", err)
			}
		})
	}
}

// A ReadAt whose context is canceled while the daemon has not run it yet
// still owns its part of the data area. The next call, a WriteAt of
// another file, must wait for the read's late reply before it copies its
// bytes there: else the read lands its bytes over them, and the write,
// sent after, writes the other file's bytes and returns success.
func TestCanceledReadLeavesTheNextWritesDataAlone(t *testing.T) {
	d := newDaemon(t)
	for _, v := range hostileVersions {
		t.Run(v.name, func(t *testing.T) {
			ctx := context.Background()
			c := v.dial(t, d.socket)
			const n = 64 << 10
			ha, _, err := c.Open(ctx, "a", OpenCreate|OpenTrunc)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.WriteAt(ctx, ha, bytes.Repeat([]byte{'A'}, n), 0); err != nil {
				t.Fatal(err)
			}
			hb, _, err := c.Open(ctx, "b", OpenCreate|OpenTrunc)
			if err != nil {
				t.Fatal(err)
			}
			held, release := holdOp(t, OpRead)
			cancelHeldRead(t, c, ha, n, held)
			want := bytes.Repeat([]byte{'B'}, n)
			if err := writeBeforeLateReply(t, c, hb, want, release); err != nil {
				t.Fatalf("WriteAt(b) after a canceled ReadAt(a): %v", err)
			}
			got := make([]byte, n)
			if _, err := c.ReadAt(ctx, hb, got, 0); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("WriteAt(b, 'B'...) returned success after a canceled ReadAt(a); b reads %q...: the read's bytes were written", got[:8])
			}
		})
	}
}

// cancelHeldRead starts a ReadAt of n bytes of h and cancels its context
// once the daemon holds the read (held): the ReadAt returns
// context.Canceled and leaves the read with the daemon.
func cancelHeldRead(t *testing.T, c *Client, h uint32, n int, held <-chan struct{}) {
	t.Helper()
	rctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.ReadAt(rctx, h, make([]byte, n), 0)
		errc <- err
	}()
	<-held
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled ReadAt: %v, want context.Canceled", err)
	}
}

// writeBeforeLateReply starts a WriteAt of p to h and, once it has
// started (untilRegion), lets the held request go (release); it returns
// the write's error.
func writeBeforeLateReply(t *testing.T, c *Client, h uint32, p []byte, release func()) error {
	waits := claimWaits(t)
	wrote := make(chan error, 1)
	go func() {
		_, err := c.WriteAt(context.Background(), h, p, 0)
		wrote <- err
	}()
	untilRegion(c.Data(), p, waits)
	release()
	return <-wrote
}

// A call waiting for a canceled call's late replies before it claims the
// region waits within its own context: canceled there, it returns
// context.Canceled without having put its name in the region, and the
// call after it, once the late reply came, works.
func TestCallWaitingForLateRepliesHonoursItsContext(t *testing.T) {
	d := newDaemon(t)
	for _, v := range hostileVersions {
		t.Run(v.name, func(t *testing.T) {
			ctx := context.Background()
			c := v.dial(t, d.socket)
			release := cancelHeldRemove(t, c, "gone", "keep")
			sctx, scancel := context.WithCancel(ctx)
			statc := statWaitingForLateReplies(sctx, t, c, "keep")
			scancel()
			if err := <-statc; !errors.Is(err, context.Canceled) {
				t.Fatalf("Stat canceled while it waited for a late reply: %v, want context.Canceled", err)
			}
			_, ctl := c.ctl()
			if !bytes.Equal(ctl[:4], []byte("gone")) {
				t.Fatalf("the control area holds %q, want the pending Remove's name", ctl[:4])
			}
			release()
			if _, err := c.Stat(ctx, "keep"); err != nil {
				t.Fatalf("Stat(keep) after the late reply: %v", err)
			}
		})
	}
}

// cancelHeldRemove creates the files names, then starts a Remove of
// the first and cancels its context once the daemon holds it: the Remove
// returns context.Canceled and leaves its request with the daemon, which
// runs it once release is called.
// statWaitingForLateReplies starts a Stat of name on c and returns once
// the Stat waits for a canceled call's late replies (its name not yet in
// the control area); its result comes on the channel.
func statWaitingForLateReplies(ctx context.Context, t *testing.T, c *Client, name string) <-chan error {
	t.Helper()
	waits := claimWaits(t)
	statc := make(chan error, 1)
	go func() {
		_, err := c.Stat(ctx, name)
		statc <- err
	}()
	_, ctl := c.ctl()
	untilRegion(ctl, []byte(name), waits)
	return statc
}

func cancelHeldRemove(t *testing.T, c *Client, names ...string) (release func()) {
	t.Helper()
	ctx := context.Background()
	for _, name := range names {
		h, _, err := c.Open(ctx, name, OpenCreate)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.CloseFile(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	held, release := holdOp(t, OpRemove)
	rctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- c.Remove(rctx, names[0]) }()
	<-held
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled Remove: %v, want context.Canceled", err)
	}
	return release
}
