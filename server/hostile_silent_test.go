package server

// Connections that never say hello must not keep real clients out.

import (
	"context"
	"net"
	"path/filepath"
	"testing"
)

// TestSilentConnectionsDoNotStarveClients: a local process opens as many
// connections as the daemon serves (MaxConns) and never sends a hello.
// A real client that connects next must be served: a connection that
// has not said hello is not yet a client, and with every slot held by
// silent ones each real client was refused EUSERS for the 10 s of the
// hello timeout, and again as soon as the squatter reconnected (1024 idle
// sockets kept every client of the default daemon out).
func TestSilentConnectionsDoNotStarveClients(t *testing.T) {
	cfg := testConfig(emuDevice(t), filepath.Join(t.TempDir(), "zf.sock"))
	cfg.MaxConns = 4
	d := startDaemon(t, cfg)
	defer awaitShutdown(t, d)
	var silent []net.Conn
	defer func() {
		for _, nc := range silent {
			nc.Close()
		}
	}()
	for range 2 * cfg.MaxConns {
		nc, err := net.Dial("unixpacket", d.socket)
		if err != nil {
			t.Fatal(err)
		}
		silent = append(silent, nc)
	}
	// The daemon accepts in order: the silent connections are all its
	// own before the client's.
	ctx := context.Background()
	for i := range cfg.MaxConns {
		c, err := Dial(ctx, d.socket, 1<<20)
		if err != nil {
			t.Fatalf("client %d of %d beside %d silent connections: %v", i+1, cfg.MaxConns, len(silent), err)
		}
		defer c.Close()
		if _, err := c.List(ctx); err != nil {
			t.Fatalf("client %d: %v", i+1, err)
		}
	}
	// The clients hold every slot: one more is refused.
	if c, err := Dial(ctx, d.socket, 1<<20); err == nil {
		c.Close()
		t.Fatalf("a client past MaxConns %d was served", cfg.MaxConns)
	}
}
