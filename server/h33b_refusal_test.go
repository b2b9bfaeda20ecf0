package server

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zonefold/zonefold/internal/syncbuf"
)

// TestH33bRefusalsAreNoProtocolErrors: a client refused because the
// daemon's shared-memory budget has no room for its region was told so
// (ENOMEM), and that is all: it broke no protocol. Before, the daemon
// also counted it in zonefold_server_protocol_errors_total ("connections
// closed for breaking the protocol") and logged "closing connection: bad
// hello", so an alert on protocol errors fired for a daemon at its cap.
func TestH33bRefusalsAreNoProtocolErrors(t *testing.T) {
	socket, _, srv := newTestServerEmu(t, Options{MaxSharedMemory: 1 << 20})
	for _, dial := range []func(context.Context, string, int) (*Client, error){Dial, DialSocketFraming} {
		c, err := dial(context.Background(), socket, 2<<20)
		if err == nil {
			c.Close()
		}
		if !errors.Is(err, StatusNoMemory) {
			t.Fatalf("a region over the budget: %v, want ENOMEM", err)
		}
	}
	if n := srv.stats.refused.Load(); n != 2 {
		t.Errorf("%d refusals counted, want 2", n)
	}
	awaitProgress(t, "the refused sessions ended", 1, func() int64 {
		if srv.Connections() == 0 {
			return 1
		}
		return 0
	})
	if n := srv.stats.protocolErrors.Load(); n != 0 {
		t.Errorf("%d protocol errors counted for clients refused for the budget", n)
	}
}

// TestH33bClientsThatLeaveBeforeHelloAreNoProtocolErrors: a peer that
// connects and closes without a word (or is killed as it dials) broke no
// protocol, and a local process doing so in a loop made the daemon
// write a warning per connection ("closing connection: bad hello",
// "read hello: EOF") and count each in
// zonefold_server_protocol_errors_total. They are logged at debug
// level now and counted nowhere.
func TestH33bClientsThatLeaveBeforeHelloAreNoProtocolErrors(t *testing.T) {
	var log syncbuf.Buffer
	socket, _, srv := newTestServerEmu(t, Options{Log: slog.New(slog.NewTextHandler(&log, nil))})
	const n = 50
	connectAndClose(t, socket, n)
	awaitProgress(t, "the silent connections ended", 1, func() int64 {
		if srv.stats.accepted.Load() == n && srv.Connections() == 0 {
			return 1
		}
		return 0
	})
	if v := srv.stats.protocolErrors.Load(); v != 0 {
		t.Errorf("%d protocol errors counted for %d connections closed before their hello", v, n)
	}
	if s := log.String(); strings.Contains(s, "level=WARN") {
		t.Errorf("warnings for connections closed before their hello:\n%s", s)
	}
	// A hello that breaks the protocol still counts and is logged.
	c, err := net.Dial("unixpacket", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("not a hello at all")); err != nil {
		t.Fatal(err)
	}
	awaitProgress(t, "a bad hello counted", 1, srv.stats.protocolErrors.Load)
	if !strings.Contains(log.String(), "bad hello") {
		t.Errorf("no warning for a bad hello:\n%s", log.String())
	}
}

// TestH33bShutdownBesideSilentConnectionsWarnsNothing: connections that
// had not said hello when the daemon began to shut down were each
// logged as a warning ("closing connection: bad hello", "read hello:
// i/o timeout" or "daemon shutting down") and counted as protocol
// errors, though the daemon ended them. They end quietly now.
func TestH33bShutdownBesideSilentConnectionsWarnsNothing(t *testing.T) {
	var log syncbuf.Buffer
	cfg := testConfig(emuDevice(t), filepath.Join(t.TempDir(), "zf.sock"))
	cfg.Log = slog.New(slog.NewTextHandler(&log, nil))
	d := startDaemon(t, cfg)
	const n = 20
	for range n {
		c, err := net.Dial("unixpacket", d.socket)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	awaitProgress(t, "the silent connections accepted", n, d.srv.stats.accepted.Load)
	if err := d.stop(t); err != nil {
		t.Fatal(err)
	}
	if v := d.srv.stats.protocolErrors.Load(); v != 0 {
		t.Errorf("%d protocol errors counted for %d silent connections the shutdown ended", v, n)
	}
	if s := log.String(); strings.Contains(s, "bad hello") {
		t.Errorf("warnings for silent connections the shutdown ended:\n%s", s)
	}
}

// TestH33bRefusalFloodLogsLittle: a local process connecting over and
// over to a daemon at its connection cap made it write a warning per
// refused connection ("refusing a client: too many connections"), as
// fast as the process could connect. Refusals are counted one by one,
// and logged at most about once a second, saying how many there were.
func TestH33bRefusalFloodLogsLittle(t *testing.T) {
	var log syncbuf.Buffer
	socket, _, srv := newTestServerEmu(t, Options{MaxConns: 1, Log: slog.New(slog.NewTextHandler(&log, nil))})
	c, err := Dial(context.Background(), socket, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 200
	connectAndClose(t, socket, n)
	awaitProgress(t, "the refusals counted", n, srv.stats.refused.Load)
	if lines := strings.Count(log.String(), "refusing a client"); lines > n/10 {
		t.Errorf("%d warnings for %d refused connections:\n%s", lines, n, log.String())
	}
}

// connectAndClose connects to socket n times, closing each connection
// without a word.
func connectAndClose(t *testing.T, socket string, n int) {
	t.Helper()
	for range n {
		c, err := net.Dial("unixpacket", socket)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
}
