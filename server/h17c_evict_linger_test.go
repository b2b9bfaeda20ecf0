package server

import (
	"net"
	"path/filepath"
	"testing"
	"time"
)

// TestH17cSilentBurstHoldsFewDescriptors: Server.start promises that
// connections still to say hello "never hold more than MaxConns
// descriptors": one more evicts the oldest. Since 567f2ba an evicted
// connection is not closed but waits up to 100 ms for a hello it may
// answer with EUSERS, so a local process that opens silent connections
// in a burst has the daemon hold every one it opened in the last 100 ms:
// here ~400 descriptors (and goroutines) against a cap of 4, 30 ms after
// the daemon accepted the last (before 567f2ba: 4). At a few thousand
// connections a second that is the daemon's descriptor limit (accept
// then pauses, and real clients wait).
func TestH17cSilentBurstHoldsFewDescriptors(t *testing.T) {
	cfg := testConfig(emuDevice(t), filepath.Join(t.TempDir(), "zf.sock"))
	cfg.MaxConns = 4
	d := startDaemon(t, cfg)
	defer awaitShutdown(t, d)
	const burst = 400
	var silent []net.Conn
	start := time.Now()
	for range burst {
		nc, err := net.Dial("unixpacket", d.socket)
		if err != nil {
			t.Fatal(err)
		}
		silent = append(silent, nc)
	}
	// Once the daemon has accepted them all (a backlog may lag).
	for d.srv.stats.accepted.Load() < burst {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("the daemon accepted %d of %d connections", d.srv.stats.accepted.Load(), burst)
		}
		time.Sleep(100 * time.Microsecond)
	}
	took := time.Since(start)
	// Long enough for the daemon to close every evicted connection
	// (the eviction's deadline is now), short of the hello wait.
	time.Sleep(30 * time.Millisecond)
	held := d.srv.stats.active.Load()
	for _, nc := range silent {
		nc.Close()
	}
	t.Logf("%d silent connections in %v; 30 ms later the daemon holds %d (MaxConns %d)", burst, took, held, cfg.MaxConns)
	if limit := int64(3 * cfg.MaxConns); held > limit {
		t.Errorf("30 ms after a burst of %d silent connections the daemon still holds %d connections (descriptors, goroutines); the greeting cap is %d", burst, held, cfg.MaxConns)
	}
}
