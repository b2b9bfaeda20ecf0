package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"testing"
	"time"
)

// noProgress is how long a watchdog lets a counter stand still before it
// calls the daemon hung. Generous: the machine is shared and loaded.
const noProgress = 10 * time.Second

// awaitProgress polls value until it reaches target. If value stops
// moving for noProgress, the test fails with every goroutine's stack:
// that is a hang, whatever the machine's speed.
func awaitProgress(t testing.TB, what string, target int64, value func() int64) {
	t.Helper()
	last, since := value(), time.Now()
	for last < target {
		time.Sleep(20 * time.Millisecond)
		if v := value(); v != last {
			last, since = v, time.Now()
			continue
		}
		if time.Since(since) > noProgress {
			var b strings.Builder
			pprof.Lookup("goroutine").WriteTo(&b, 2)
			t.Fatalf("%s: stuck at %d of %d for %v; goroutines:\n%s", what, last, target, noProgress, b.String())
		}
	}
}

// neverReads says hello (socket framing), opens a file and sends n small
// writes, one per message, from a goroutine, and never reads a reply.
func neverReads(t *testing.T, socket string, n int) *Client {
	t.Helper()
	c := dialFraming(t, socket)
	h, _, err := c.Open(context.Background(), "never-reads", OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		req := make([]Request, 1)
		for i := range n {
			req[0] = Request{Tag: uint64(i + 1), Op: OpWrite, Handle: h, Off: uint64(i) * 4096, Addr: 0, Len: 4096}
			if err := c.Submit(req); err != nil {
				return // closed by the test
			}
		}
	}()
	return c
}

// TestClientThatNeverReadsRepliesCannotWedgeTheDaemon: a client sends
// MaxInflight requests, one per message, and never reads a reply. The
// daemon must still take in every one of them (replies never block
// request intake), serve other clients meanwhile, drop the session when
// the client goes, and shut down with such a client connected.
//
// Before the fix the daemon's reader sent the replies of the requests it
// ran itself, blocked on the full socket, and stopped reading: intake
// stuck after a few requests (the watchdog fired).
func TestClientThatNeverReadsRepliesCannotWedgeTheDaemon(t *testing.T) {
	cfg := testConfig(emuDevice(t), filepath.Join(t.TempDir(), "zf.sock"))
	cfg.Grace = time.Second
	d := startDaemon(t, cfg)
	stats := &d.srv.stats

	bad := neverReads(t, d.socket, MaxInflight)
	awaitProgress(t, "requests taken in from a client that reads no replies", MaxInflight, stats.requestsIn.Load)

	// Another client is served meanwhile.
	ctx := context.Background()
	good := dial(t, d.socket)
	h, _, err := good.Open(ctx, "good", OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte("served beside a client that reads nothing")
	if _, err := good.WriteAt(ctx, h, want, 0); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if _, err := good.ReadAt(ctx, h, got, 0); err != nil || string(got) != string(want) {
		t.Fatalf("read %q, %v", got, err)
	}

	// Its going ends its session.
	bad.Close()
	awaitProgress(t, "the session's end", 1, func() int64 { return int64(2 - d.connections()) })

	// Shutdown with another such client connected finishes.
	neverReads(t, d.socket, MaxInflight)
	awaitProgress(t, "requests taken in from the second client", 2*MaxInflight, stats.requestsIn.Load)
	awaitShutdown(t, d)
}

// awaitShutdown stops d and waits for Run to return nil, under the
// watchdog.
func awaitShutdown(t *testing.T, d *daemon) {
	t.Helper()
	stopped := make(chan error, 1)
	go func() { stopped <- d.stop(t) }()
	awaitProgress(t, "shutdown", 1, func() int64 {
		select {
		case err := <-stopped:
			if err != nil {
				t.Errorf("Run after shutdown: %v", err)
			}
			return 1
		default:
			return 0
		}
	})
}

// TestClientCaps: clients over the connection cap or the shared-memory
// budget are refused with an error code, and the daemon stays within
// both; room freed by a client that goes is given to the next.
// Before the caps, every one of these clients was accepted.
func TestClientCaps(t *testing.T) {
	cfg := testConfig(emuDevice(t), filepath.Join(t.TempDir(), "zf.sock"))
	// Each connection's region holds its rings too.
	_, _, rings := ringLayout(ringEntries(0))
	cfg.MaxConns = 3
	cfg.MaxSharedMemory = 4<<20 + 3*int64(rings)
	d := startDaemon(t, cfg)
	ctx := context.Background()
	// dialSize dials, and after a refusal waits for that session to
	// end: the client has its answer before the daemon has torn down.
	served := 0
	dialSize := func(size int) (*Client, error) {
		c, err := Dial(ctx, d.socket, size)
		if err == nil {
			served++
			t.Cleanup(func() { c.Close() })
		}
		awaitProgress(t, "refused sessions' end", 1, func() int64 {
			if d.connections() == served {
				return 1
			}
			return 0
		})
		return c, err
	}
	// A refused client counts against the connection cap until the
	// daemon has closed its side, a moment after the client read why:
	// wait for that before the next dial counts on its slot.
	connected := func(n int) {
		t.Helper()
		awaitProgress(t, fmt.Sprintf("%d clients connected", n), 1, func() int64 {
			if d.connections() == n {
				return 1
			}
			return 0
		})
	}

	// Shared memory: 3 MiB fits, 2 MiB more does not, 1 MiB does.
	big, err := dialSize(3 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dialSize(2 << 20); !errors.Is(err, StatusNoMemory) || !strings.Contains(err.Error(), "cannot allocate memory") {
		t.Fatalf("a region over the budget: %v, want ENOMEM", err)
	}
	connected(1)
	if _, err := dialSize(1 << 20); err != nil {
		t.Fatalf("a region within the budget: %v", err)
	}
	if used, want := d.srv.SharedMemory(), 4<<20+2*int64(rings); used != want {
		t.Fatalf("%d bytes of shared memory in use, want %d", used, want)
	}

	// Connections: a third fits (a small region), a fourth does not.
	if _, err := dialSize(2 * ctlBytes); !errors.Is(err, StatusNoMemory) {
		t.Fatalf("over the budget by a little: %v", err)
	}
	big.Close()
	served--
	awaitProgress(t, "the big client's memory given back", 1, func() int64 {
		if d.srv.SharedMemory() == 1<<20+int64(rings) {
			return 1
		}
		return 0
	})
	connected(1)
	if _, err := dialSize(2 << 20); err != nil {
		t.Fatalf("after the big client left: %v", err)
	}
	if _, err := dialSize(2 * ctlBytes); err != nil {
		t.Fatal(err)
	}
	if _, err := dialSize(2 * ctlBytes); !errors.Is(err, StatusTooManyClients) || !strings.Contains(err.Error(), "too many users") {
		t.Fatalf("a client over the connection cap: %v, want EUSERS", err)
	}

	// A flood of connections that never say hello: each is refused or
	// closed, none is served, and the daemon's caps hold throughout.
	var floods []net.Conn
	for range 200 {
		nc, err := net.Dial("unixpacket", d.socket)
		if err != nil {
			t.Fatal(err)
		}
		floods = append(floods, nc)
		if n := d.connections(); n > cfg.MaxConns {
			t.Fatalf("%d connections served, cap %d", n, cfg.MaxConns)
		}
	}
	for _, nc := range floods {
		nc.SetReadDeadline(time.Now().Add(30 * time.Second))
		var b [64]byte
		n, err := nc.Read(b[:])
		if err == nil {
			rep, perr := ParseHelloReply(b[:n])
			if perr != nil || rep.Status != StatusTooManyClients {
				t.Fatalf("a flooding client got %+v, %v", rep, perr)
			}
		} else if !errors.Is(err, io.EOF) {
			t.Fatalf("a flooding client: %v, want a refusal or EOF", err)
		}
		nc.Close()
	}
	if used := d.srv.SharedMemory(); used > cfg.MaxSharedMemory {
		t.Fatalf("%d bytes of shared memory in use, cap %d", used, cfg.MaxSharedMemory)
	}
}
