package server

// h38e: the batch level of the Go client (Submit, Recv, Data) against
// Close, and against a second goroutine, as a third-party program
// misuses it.

import (
	"context"
	"errors"
	"io/fs"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestH38eBatchLevelAfterClose: Submit, Recv and Data on a closed
// client say it is closed, with both protocol versions; a Recv that
// waits in another goroutine when Close comes ends with fs.ErrClosed.
//
// Before the fix Close unmapped the region while Submit and Recv, which
// took no lock, still used it: Submit or Recv after Close killed the
// whole process with rings ("unexpected fault address", fatal error:
// fault; not a panic a program can recover), and panicked with a nil
// pointer with socket framing (Close had set the connection to nil);
// Data panicked with "slice bounds out of range [:-65536]". A Recv that
// waited when Close came could touch the ring after the unmap.
func TestH38eBatchLevelAfterClose(t *testing.T) {
	d := newDaemon(t)
	for _, v := range hostileVersions {
		t.Run(v.name, func(t *testing.T) {
			for _, what := range []string{"Submit", "Recv", "Data"} {
				c := v.dial(t, d.socket)
				if _, err := c.Stat(context.Background(), "missing"); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("Stat: %v", err)
				}
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
				func() {
					defer func() {
						if r := recover(); r != nil {
							t.Errorf("%s after Close panicked: %v", what, r)
						}
					}()
					var err error
					switch what {
					case "Submit":
						err = c.Submit([]Request{{Tag: 1, Op: OpFsync}})
					case "Recv":
						var reps [MaxBatch]Reply
						_, err = c.Recv(reps[:])
					case "Data":
						if b := c.Data(); b != nil {
							t.Errorf("Data after Close: %d bytes of an unmapped region, want nil", len(b))
						}
						return
					}
					if !errors.Is(err, fs.ErrClosed) {
						t.Errorf("%s after Close: %v, want an error wrapping fs.ErrClosed", what, err)
					}
				}()
			}

			// A Recv waiting for replies that will never come (nothing
			// was submitted) when another goroutine closes the client.
			for range 20 {
				c := v.dial(t, d.socket)
				got := make(chan error, 1)
				go func() {
					var reps [MaxBatch]Reply
					_, err := c.Recv(reps[:])
					got <- err
				}()
				awaitGoroutineIn(t, "(*Client).Recv(")
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
				if err := <-got; !errors.Is(err, fs.ErrClosed) {
					t.Fatalf("a Recv that Close ended: %v, want an error wrapping fs.ErrClosed", err)
				}
			}
		})
	}
}

// TestH38eBatchLevelRefusesASecondGoroutine: the batch level is for one
// goroutine at a time. A Submit (or a synchronous call) while another
// goroutine waits in Recv must be refused with an error that says so,
// not run: two goroutines in Submit publish into the same ring entries
// (a request lost, its Recv waiting for ever), and a synchronous call
// would take the other goroutine's replies for its own.
//
// Before the fix the Submit went through (and raced with the Recv on
// the ring's indices), and Recv returned the reply of the other
// goroutine's request.
func TestH38eBatchLevelRefusesASecondGoroutine(t *testing.T) {
	d := newDaemon(t)
	for _, v := range hostileVersions {
		t.Run(v.name, func(t *testing.T) {
			c := v.dial(t, d.socket)
			got := make(chan error, 1)
			go func() {
				var reps [MaxBatch]Reply
				n, err := c.Recv(reps[:])
				if err == nil {
					t.Errorf("Recv returned %d replies (tag %d) of requests another goroutine submitted while it waited", n, reps[0].Tag)
				}
				got <- err
			}()
			awaitGoroutineIn(t, "(*Client).Recv(")
			err := c.Submit([]Request{{Tag: 7, Op: OpFsync}})
			if err == nil || !strings.Contains(err.Error(), "one goroutine at a time") {
				t.Errorf("Submit while another goroutine is in Recv: %v, want a refusal", err)
			}
			if _, err := c.Stat(context.Background(), "missing"); err == nil || !strings.Contains(err.Error(), "one goroutine at a time") {
				t.Errorf("Stat while another goroutine is in Recv: %v, want a refusal", err)
			}
			c.Close()
			if err := <-got; !errors.Is(err, fs.ErrClosed) {
				t.Errorf("the Recv Close ended: %v, want fs.ErrClosed", err)
			}
		})
	}
}

// awaitGoroutineIn waits until some goroutine's stack holds fn: a
// goroutine has entered it. An eventual condition, bounded generously.
func awaitGoroutineIn(t *testing.T, fn string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		n := runtime.Stack(buf, true)
		if strings.Contains(string(buf[:n]), fn) {
			return
		}
	}
	t.Fatalf("no goroutine entered %s within 20 s", fn)
}
