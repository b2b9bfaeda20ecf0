package server_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/server"
)

// TestH45bSignalBesideHalfClosedClientThatNeverReads: a real `zonefold
// serve` stopped by SIGTERM or SIGINT beside a socket-framing client
// that sends requests without end, reads no reply, and shuts down its
// sending side once the daemon has stopped reading it (MaxInflight of
// its requests answered and their replies not sent: its socket is full
// of them). The daemon serves another client meanwhile, then exits 0
// with a checkpoint, without waiting out the grace period, the device
// fsck-clean and every fsynced byte (the hostile client's own, fsynced
// before, too) there after a restart.
func TestH45bSignalBesideHalfClosedClientThatNeverReads(t *testing.T) {
	for _, sig := range []os.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			want := bytes.Repeat([]byte("fsynced beside a half-closed client that reads nothing "), 8000)
			b := startBesideNeverReads(t, want, "bad")
			d, good, gh, half, bad, bh := b.d, b.good, b.gh, b.half, b.bad, b.bh
			ctx := context.Background()
			wantBad := bytes.Repeat([]byte("the hostile client's own fsynced bytes "), 2000)
			if _, err := bad.WriteAt(ctx, bh, wantBad, 0); err != nil {
				t.Fatal(err)
			}
			if err := bad.Fsync(ctx, bh); err != nil {
				t.Fatal(err)
			}
			submitted := make(chan int, 1)
			go func() {
				n := 0
				for ; ; n++ {
					if bad.Submit([]server.Request{{Tag: uint64(n + 1), Op: server.OpFstat, Handle: bh}}) != nil {
						break // its shutdown, or the daemon's end
					}
				}
				submitted <- n
			}()
			// Until every slot of its session holds a reply not sent:
			// the daemon's reader waits for one to come free, and its
			// writer for the client to read.
			server.AwaitProgress(t, "replies held for a client that reads none", server.MaxInflight, func() int64 {
				return int64(d.metric("zonefold_server_requests_received_total") - d.metric("zonefold_server_replies_sent_total"))
			})
			if err := unix.Shutdown(server.ClientSocketFD(bad), unix.SHUT_WR); err != nil {
				t.Fatalf("shutdown(SHUT_WR) of the client's socket: %v", err)
			}

			if _, err := good.WriteAt(ctx, gh, want[half:], int64(half)); err != nil {
				t.Fatal(err)
			}
			if err := good.Fsync(ctx, gh); err != nil {
				t.Fatal(err)
			}

			d.stopWith(sig)
			// Its last send waited for room the daemon's end of the
			// socket gives back as it closes.
			t.Logf("the hostile client sent %d requests", <-submitted)
			if strings.Contains(d.stderr.String(), "outlived the grace period") {
				t.Fatalf("shutdown waited out the grace period for a half-closed client that reads nothing:\n%s", d.stderr)
			}
			fsckClean(t, b.dev, "after "+sig.String())

			d, c, h, size := restartAndOpen(t, d, "good")
			got := make([]byte, len(want))
			if k, err := c.ReadAt(ctx, h, got, 0); size != int64(len(want)) || k != len(want) || !bytes.Equal(got, want) {
				t.Fatalf("the good client's fsynced data across %v and a restart: size %d, %d bytes read (%v), equal %v",
					sig, size, k, err, bytes.Equal(got, want))
			}
			h, size, err := c.Open(ctx, "bad", 0)
			if err != nil {
				t.Fatal(err)
			}
			got = make([]byte, len(wantBad))
			if k, err := c.ReadAt(ctx, h, got, 0); size != int64(len(wantBad)) || k != len(wantBad) || !bytes.Equal(got, wantBad) {
				t.Fatalf("the hostile client's fsynced data across %v and a restart: size %d, %d bytes read (%v)", sig, size, k, err)
			}
			d.stop()
		})
	}
}

// besideNeverReads is a real `zonefold serve` (d, on dev) beside which a
// client reads nothing: good has written the first half of want to
// "good" (gh) and fsynced it; bad, with socket framing, has a file open
// (bh) and is the test's to make hostile. Both close as the test ends.
type besideNeverReads struct {
	d         *daemonProc
	dev       string
	good, bad *server.Client
	gh, bh    uint32
	half      int
}

// startBesideNeverReads starts one, bad's file named badName.
func startBesideNeverReads(t *testing.T, want []byte, badName string) *besideNeverReads {
	t.Helper()
	dir := t.TempDir()
	b := &besideNeverReads{dev: fmt.Sprintf("emu:%s?zone_size=16M&zones=64", filepath.Join(dir, "dev")), half: len(want) / 2}
	b.d = startServe(t, b.dev, filepath.Join(dir, "zf.sock"))
	ctx := context.Background()
	b.good = dialServe(t, b.d)
	t.Cleanup(func() { b.good.Close() })
	var err error
	if b.gh, _, err = b.good.Open(ctx, "good", server.OpenCreate); err != nil {
		t.Fatal(err)
	}
	if _, err := b.good.WriteAt(ctx, b.gh, want[:b.half], 0); err != nil {
		t.Fatal(err)
	}
	if err := b.good.Fsync(ctx, b.gh); err != nil {
		t.Fatal(err)
	}
	if b.bad, err = server.DialSocketFraming(ctx, b.d.socket, 1<<20); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.bad.Close() })
	if b.bh, _, err = b.bad.Open(ctx, badName, server.OpenCreate); err != nil {
		t.Fatal(err)
	}
	return b
}
