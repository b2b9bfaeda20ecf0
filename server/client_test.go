package server

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// A call whose context is already canceled, then Close: the context's
// AfterFunc runs in a goroutine of its own that may still be running
// when the call returns. It must neither touch the connection after
// Close (it panicked on the nil connection, and with -race every round
// was a data race on it) nor leave a cancellation behind that fails the
// next call with a live context.
func TestCanceledCallThenClose(t *testing.T) {
	d := newDaemon(t)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, v := range []struct {
		name string
		dial func(context.Context, string, int) (*Client, error)
	}{{"rings", Dial}, {"socket framing", DialSocketFraming}} {
		t.Run(v.name, func(t *testing.T) {
			for range 50 {
				c, err := v.dial(context.Background(), d.socket, 1<<20)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := c.Stat(canceled, "missing"); err == nil {
					t.Fatal("Stat found a file that does not exist")
				}
				// The next call, with a live context, is not canceled by
				// the last call's context.
				for range 3 {
					if _, err := c.Stat(context.Background(), "missing"); errors.Is(err, context.Canceled) || errors.Is(err, os.ErrDeadlineExceeded) {
						t.Fatalf("a call with a live context: %v", err)
					}
					runtime.Gosched()
				}
				c.Stat(canceled, "missing")
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
				runtime.Gosched()
			}
		})
	}
}

// A client asleep in the futex wait for replies wakes when its context
// is canceled, when its deadline passes and when the daemon goes away,
// each without a poll: the wait has no time slices to end it.
func TestRingWaitWakes(t *testing.T) {
	d := newDaemon(t)
	// A request that never completes: the raw client submits nothing, so
	// Recv waits with nothing outstanding until something else wakes it.
	wait := func(c *Client) error {
		var reps [MaxBatch]Reply
		_, err := c.Recv(reps[:])
		return err
	}
	t.Run("cancel", func(t *testing.T) {
		c := dial(t, d.socket)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		stop := c.watch(ctx)
		err := wait(c)
		stop()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Recv = %v, want context.Canceled", err)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		c := dial(t, d.socket)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		stop := c.watch(ctx)
		err := wait(c)
		stop()
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Recv = %v, want os.ErrDeadlineExceeded", err)
		}
	})
	t.Run("daemon gone", func(t *testing.T) {
		d := startDaemon(t, testConfig(emuDevice(t), filepath.Join(t.TempDir(), "zf.sock")))
		c := dial(t, d.socket)
		time.AfterFunc(50*time.Millisecond, d.cancel) // the cleanup waits for Run
		if err := wait(c); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("Recv = %v, want io.ErrUnexpectedEOF", err)
		}
	})
	t.Run("replies after a quiet spell", func(t *testing.T) {
		// The daemon wakes a sleeping client with the futex.
		c := dial(t, d.socket)
		for range 5 {
			time.Sleep(30 * time.Millisecond) // both sides fall asleep
			if _, err := c.Stat(context.Background(), "missing"); errors.Is(err, io.ErrUnexpectedEOF) || err == nil {
				t.Fatalf("Stat = %v", err)
			}
		}
	})
}

// A daemon that speaks only version 1 (an older zonefold) refuses a
// version 2 hello with EPROTONOSUPPORT and its version; Dial connects
// again with version 1 and works.
func TestDialFallsBackToVersion1(t *testing.T) {
	d := newDaemon(t)
	// A proxy that plays the old daemon's part in the first hello and
	// hands every later connection to the real daemon.
	sock := filepath.Join(t.TempDir(), "old.sock")
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.AcceptUnix()
			if err != nil {
				return
			}
			go oldDaemon(c, d.socket)
		}
	}()
	c, err := Dial(context.Background(), sock, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.ring != nil || c.info.Version != VersionFraming {
		t.Fatalf("connected with version %d, rings %v; want version 1", c.info.Version, c.ring != nil)
	}
	if _, err := c.Stat(context.Background(), "missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat over version 1 = %v", err)
	}
}

// oldDaemon answers a version 2 hello as a version 1 daemon does, and
// relays anything else to the daemon at socket, descriptors included.
func oldDaemon(c *net.UnixConn, socket string) {
	defer c.Close()
	b := make([]byte, 64<<10)
	oob := make([]byte, 256)
	n, _, _, _, err := c.ReadMsgUnix(b, oob)
	if err != nil {
		return
	}
	if h, _, err := ParseHello(b[:n]); err == nil && h.Version == VersionRings {
		rep := make([]byte, HelloReplySize)
		(&HelloReply{Magic: Magic, Version: VersionFraming, Status: StatusVersion}).Encode(rep)
		c.Write(rep)
		return
	}
	up, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: socket, Net: "unixpacket"})
	if err != nil {
		return
	}
	defer up.Close()
	relay := func(from, to *net.UnixConn, first []byte) {
		if first != nil {
			to.Write(first)
		}
		b := make([]byte, 64<<10)
		oob := make([]byte, 256)
		for {
			n, oobn, _, _, err := from.ReadMsgUnix(b, oob)
			if err != nil || n == 0 {
				to.Close()
				return
			}
			if _, _, err := to.WriteMsgUnix(b[:n], oob[:oobn], nil); err != nil {
				return
			}
		}
	}
	go relay(up, c, nil)
	relay(c, up, b[:n])
}
