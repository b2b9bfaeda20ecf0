package server_test

// h28b item 1: a daemon killed with SIGKILL while replies it sent are
// still queued for a client, and requests of the client's lie unread in
// its socket. The kernel closes the daemon's socket with those requests
// unread, which resets the client's, and a SOCK_SEQPACKET socket reports
// the reset (ECONNRESET) before the messages queued for it: a client
// that stops at the reset loses replies the daemon sent, fsyncs'
// acknowledgements among them. The client must deliver every reply
// queued before it reports the connection closed (io.ErrUnexpectedEOF).
//
// What was sent is known without timing: the daemon is stopped
// (SIGSTOP, every thread seen stopped) only once the client's socket
// holds every reply of the pipelined batch (SIOCINQ; with rings, the
// completion ring has them all), so it reads nothing sent after; the
// reset is seen pending (POLLERR) before the client reads, so the test
// cannot pass without one.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/server"
)

func TestH28bKill9ClientGetsQueuedReplies(t *testing.T) {
	for _, v := range []struct {
		name string
		dial func(context.Context, string, int) (*server.Client, error)
	}{{"socket framing", server.DialSocketFraming}, {"rings", server.Dial}} {
		t.Run(v.name, func(t *testing.T) {
			dev, sock := kill9Device(t)
			p := serveKill9(t, dev, sock)
			ctx := context.Background()
			c, err := v.dial(ctx, sock, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			framing := v.name == "socket framing"
			h, _, err := c.Open(ctx, "acked", server.OpenCreate)
			if err != nil {
				t.Fatal(err)
			}

			// One pipelined batch: two 4 KiB writes, then an fsync,
			// eight times over; no reply read yet.
			var reqs []server.Request
			for i := range 24 {
				q := server.Request{Tag: uint64(i + 1), Op: server.OpWrite, Handle: h,
					Off: uint64(i) * 4096, Addr: uint64(i) * 4096, Len: 4096}
				if i%3 == 2 {
					q = server.Request{Tag: uint64(i + 1), Op: server.OpFsync, Handle: h}
				}
				reqs = append(reqs, q)
			}
			if err := c.Submit(reqs); err != nil {
				t.Fatal(err)
			}
			fd := server.ClientSocketFD(c)
			server.AwaitProgress(t, "replies queued for the client", int64(len(reqs)), func() int64 {
				if !framing {
					return int64(server.RingRepliesPublished(c))
				}
				n, err := unix.IoctlGetInt(fd, unix.SIOCINQ)
				if err != nil {
					t.Fatalf("SIOCINQ: %v", err)
				}
				return int64(n / server.ReplySize)
			})

			// The daemon reads nothing more: then a request, which
			// stays unread in its socket, then SIGKILL.
			stopProcess(t, p)
			if err := c.Submit([]server.Request{{Tag: 1000, Op: server.OpFsync, Handle: h}}); err != nil {
				t.Fatal(err)
			}
			p.kill()
			if framing {
				pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
				if _, err := unix.Poll(pfd, 0); err != nil || pfd[0].Revents&unix.POLLERR == 0 {
					t.Fatalf("no reset pending on the client's socket after the kill (revents %#x, %v): the test shows nothing", pfd[0].Revents, err)
				}
			}

			got := map[uint64]server.Reply{}
			reps := make([]server.Reply, server.MaxBatch)
			var end error
			for end == nil {
				var n int
				n, end = c.Recv(reps)
				for _, r := range reps[:n] {
					got[r.Tag] = r
				}
			}
			if !errors.Is(end, io.ErrUnexpectedEOF) {
				t.Errorf("the end of the connection: %v, want io.ErrUnexpectedEOF", end)
			}
			for _, q := range reqs {
				r, ok := got[q.Tag]
				switch {
				case !ok:
					t.Errorf("%v (tag %d): its reply was queued for the client when the daemon died, and the client lost it", q.Op, q.Tag)
				case r.Status != server.StatusOK || (q.Op == server.OpWrite && r.Val != uint64(q.Len)):
					t.Errorf("%v (tag %d): %v, %d bytes", q.Op, q.Tag, r.Status, r.Val)
				}
			}
			if r, ok := got[1000]; ok {
				t.Errorf("a reply (%v) to a request sent to a stopped daemon", r.Status)
			}
			t.Logf("%d replies, then %v", len(got), end)
		})
	}
}

// stopProcess stops p with SIGSTOP and waits until every thread of it
// is stopped: from then on it reads nothing.
func stopProcess(t *testing.T, p *kill9Proc) {
	t.Helper()
	pid := p.cmd.Process.Pid
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	server.AwaitProgress(t, "every thread of the daemon stopped", 1, func() int64 {
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		if err != nil || len(tasks) == 0 {
			t.Fatalf("the daemon's threads: %v", err)
		}
		for _, f := range tasks {
			b, err := os.ReadFile(f)
			if err != nil {
				return 0 // a thread that has just exited
			}
			// The state follows the command's ")".
			if i := strings.LastIndexByte(string(b), ')'); i < 0 || !strings.HasPrefix(string(b[i:]), ") T") {
				return 0
			}
		}
		return 1
	})
}
