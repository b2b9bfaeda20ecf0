package server

// Client.Close must end a call that waits for a
// daemon that does not answer.

import (
	"context"
	"errors"
	"io/fs"
	"testing"
	"time"
)

// TestCloseEndsACallInProgress: a goroutine's Fsync waits for a
// daemon that holds it (execHook); Close from another goroutine must
// return at once and end that call with an error that says the client
// was closed, with both protocol versions.
//
// Before the fix Close took the client's lock first, which the call held
// for as long as it waited: Close waited for the daemon's answer, for
// ever if it never came (a stalled device, a full one that throttles),
// so a program could not abort a call by closing its client, as it can a
// net.Conn's read. And every call on a closed client that places a name
// or data in the region (Open, Stat, Remove, Rename, List, Stats, ReadAt,
// WriteAt) panicked: slice bounds out of range, the region being
// unmapped.
func TestCloseEndsACallInProgress(t *testing.T) {
	d := newDaemon(t)
	held, release := holdOps(t, OpFsync)
	for _, v := range hostileVersions {
		t.Run(v.name, func(t *testing.T) {
			c := v.dial(t, d.socket)
			h, _, err := c.Open(context.Background(), "f", OpenCreate)
			if err != nil {
				t.Fatal(err)
			}
			callErr := make(chan error, 1)
			go func() { callErr <- c.Fsync(context.Background(), h) }()
			<-held
			closed := make(chan error, 1)
			go func() { closed <- c.Close() }()
			select {
			case err := <-closed:
				if err != nil {
					t.Fatalf("Close: %v", err)
				}
			case <-time.After(10 * time.Second):
				release()
				<-closed
				t.Fatal("Close waited for the call in progress, which waited for the daemon")
			}
			if err := <-callErr; !errors.Is(err, fs.ErrClosed) {
				t.Fatalf("the call Close ended: %v, want an error wrapping fs.ErrClosed", err)
			}
			// Every call after Close says so (they panicked on the
			// unmapped region: slice bounds out of range [-65536:]).
			bg := context.Background()
			for what, call := range map[string]func() error{
				"Stat":    func() error { _, err := c.Stat(bg, "f"); return err },
				"Open":    func() error { _, _, err := c.Open(bg, "f", 0); return err },
				"Remove":  func() error { return c.Remove(bg, "f") },
				"Rename":  func() error { return c.Rename(bg, "f", "g") },
				"List":    func() error { _, err := c.List(bg); return err },
				"Stats":   func() error { _, err := c.Stats(bg); return err },
				"ReadAt":  func() error { _, err := c.ReadAt(bg, h, make([]byte, 8), 0); return err },
				"WriteAt": func() error { _, err := c.WriteAt(bg, h, make([]byte, 8), 0); return err },
				"Fsync":   func() error { return c.Fsync(bg, h) },
			} {
				if err := call(); !errors.Is(err, fs.ErrClosed) {
					t.Errorf("%s after Close: %v, want fs.ErrClosed", what, err)
				}
			}
		})
	}
	release()
}
