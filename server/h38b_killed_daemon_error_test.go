package server_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/zonefold/zonefold/server"
)

// TestH38bCallAfterDaemonKilledSaysItClosed: a call on a client whose
// daemon was killed (kill -9, or a crash; a supervisor restarts it)
// failed with the send's errno, "wake the daemon: broken pipe" (rings,
// when the daemon's reader had gone to sleep) or "send: write unixpacket
// ...: broken pipe" (socket framing), where a daemon that stopped
// cleanly gave "daemon closed the connection: unexpected EOF". zonefold
// put said "wake the daemon: broken pipe" after its daemon was killed
// mid-copy. Every way the daemon's end shows now says so, and wraps
// io.ErrUnexpectedEOF, so that a client can tell a daemon that went
// from a failed request.
func TestH38bCallAfterDaemonKilledSaysItClosed(t *testing.T) {
	dev, sock := kill9Device(t)
	p := serveKill9(t, dev, sock)
	ctx := context.Background()
	ring, err := server.Dial(ctx, sock, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer ring.Close()
	framing, err := server.DialSocketFraming(ctx, sock, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer framing.Close()
	for _, c := range []*server.Client{ring, framing} {
		if _, err := c.Stats(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The ring's next call rings the doorbell once the daemon's reader
	// sleeps, which it does soon after the last request (a minute is a
	// bound against waiting for ever, not a measure).
	for limit := time.Now().Add(time.Minute); !server.RingDaemonSleeps(ring); time.Sleep(time.Millisecond) {
		if time.Now().After(limit) {
			t.Fatal("the daemon's reader did not sleep within a minute of its last request")
		}
	}
	p.kill()
	for name, c := range map[string]*server.Client{"rings": ring, "socket framing": framing} {
		_, err := c.Stats(ctx)
		if !errors.Is(err, io.ErrUnexpectedEOF) || !strings.Contains(err.Error(), "daemon closed the connection") {
			t.Errorf("%s: a call after the daemon was killed: %v; want \"daemon closed the connection\" wrapping io.ErrUnexpectedEOF", name, err)
		}
	}
}
