package server

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// TestH38eDeadlineErrorIsContexts: a call whose context's deadline
// passes while the daemon holds its request fails with an error that
// errors.Is context.DeadlineExceeded, as a cancellation's is
// context.Canceled, and still os.ErrDeadlineExceeded (what it said
// before). A WriteAt cut short says it was a write.
//
// Before the fix it was os.ErrDeadlineExceeded only ("zonefold:
// receive: i/o timeout"): a program that checks for its context's
// deadline the usual way (errors.Is(err, context.DeadlineExceeded))
// did not recognise it, and a WriteAt's error did not say which call
// it was.
func TestH38eDeadlineErrorIsContexts(t *testing.T) {
	d := newDaemon(t)
	for _, op := range []Op{OpFsync, OpWrite} {
		held, release := holdOps(t, op)
		for _, v := range hostileVersions {
			t.Run(v.name+"/"+op.String(), func(t *testing.T) {
				c := v.dial(t, d.socket)
				bg := context.Background()
				h, _, err := c.Open(bg, "f", OpenCreate)
				if err != nil {
					t.Fatal(err)
				}
				// The request is held until release: the deadline passes
				// whatever the machine's speed.
				ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
				defer cancel()
				switch op {
				case OpFsync:
					err = c.Fsync(ctx, h)
				case OpWrite:
					var n int
					n, err = c.WriteAt(ctx, h, make([]byte, 8192), 0)
					if n != 0 {
						t.Errorf("WriteAt cut short before any reply says %d bytes written", n)
					}
					if err == nil || !strings.Contains(err.Error(), "write") {
						t.Errorf("WriteAt cut short: %v, want an error that names the write", err)
					}
				}
				<-held
				if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Errorf("%v past its context's deadline: %v; errors.Is context.DeadlineExceeded %v, os.ErrDeadlineExceeded %v; want both",
						op, err, errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded))
				}
			})
		}
		release()
	}
}
