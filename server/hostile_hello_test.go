package server

// A shutdown that begins while a client's hello is
// being answered must not hang.

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// TestShutdownDuringHelloDoesNotHang: SIGTERM (here the daemon's
// context) arrives between the daemon's reading a hello and its clearing
// the hello's read deadline; the client then sends nothing. The daemon
// must still shut down within its grace periods.
//
// Before the fix the deadline shutdown set to wake the reader
// (stopReading) was cleared by hello (SetReadDeadline(time.Time{})), so a
// socket-framing session's reader blocked in Read with no deadline and
// nothing could wake it: abort does not set the read deadline again
// (stopOnce), and Serve waited for the session for ever after closing
// the engine under it. The daemon never exited while that client stayed
// connected, idle.
func TestShutdownDuringHelloDoesNotHang(t *testing.T) {
	cfg := testConfig(emuDevice(t), filepath.Join(t.TempDir(), "zf.sock"))
	cfg.Grace = 200 * time.Millisecond
	d := startDaemon(t, cfg)
	hook := func(c *conn) {
		d.cancel() // shutdown begins: Serve stops accepting, stops reading c
		for !c.stopping.Load() {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(10 * time.Millisecond) // and stopReading has set the deadline
	}
	helloHook.Store(&hook)
	t.Cleanup(func() { helloHook.Store(nil) })
	dialed := make(chan *Client, 1)
	go func() {
		c, err := DialSocketFraming(context.Background(), d.socket, 1<<20)
		if err != nil {
			dialed <- nil
			return
		}
		dialed <- c
	}()
	select {
	case err := <-d.done:
		d.cancel = nil
		if err != nil {
			t.Fatal(err)
		}
		if c := <-dialed; c != nil {
			c.Close()
		}
	case <-time.After(10 * time.Second):
		// Let the daemon go, then fail.
		if c := <-dialed; c != nil {
			c.Close()
		}
		<-d.done
		d.cancel = nil
		t.Fatalf("the daemon did not shut down within 10 s (grace %v) with an idle client whose hello came as shutdown began; it did once the client closed", cfg.Grace)
	}
}
