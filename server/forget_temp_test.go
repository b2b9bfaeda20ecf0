package server

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestForgetTempKeepsACreateThatRanBetween: a connection removes its
// temporary X and creates X again (exclusive), both in one batch, and
// the daemon runs them side by side. If the create lands between the
// remove and its forgetTemp, the list must keep the new file's entry,
// or X outlives the connection (found by review: forgetTemp dropped the
// entry by name).
func TestForgetTempKeepsACreateThatRanBetween(t *testing.T) {
	d := newDaemon(t)
	a := dial(t, d.socket)
	bg := context.Background()
	x := TempPrefix + "x"
	h, _, err := a.Open(bg, x, OpenCreate|OpenExcl|OpenDeferSync)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.CloseFile(bg, h); err != nil {
		t.Fatal(err)
	}
	first, err := d.srv.e.Stat(x)
	if err != nil {
		t.Fatal(err)
	}
	// The create a second worker runs for a request pipelined beside the
	// remove, landing after the remove and before its forgetTemp: the
	// hook runs it on the same connection, so no schedule decides it.
	createdCh := make(chan Reply, 1)
	var once sync.Once
	hook := func(c *conn, name string) {
		if name != x {
			return
		}
		once.Do(func() {
			var r Reply
			c.open(&Request{Op: OpOpen, Tag: 2, Flags: OpenCreate | OpenExcl | OpenDeferSync, Len: uint32(len(x))}, &r)
			createdCh <- r
		})
	}
	testHookForgetTemp.Store(&hook)
	t.Cleanup(func() { testHookForgetTemp.Store(nil) })

	copy(a.Data(), x)
	if err := a.Remove(bg, x); err != nil {
		t.Fatal(err)
	}
	var created Reply
	select {
	case created = <-createdCh:
	default:
		t.Fatal("the remove's forgetTemp did not run")
	}
	if created.Status != StatusOK {
		t.Fatalf("the create between the remove and its forgetTemp: %+v", created)
	}
	second, err := d.srv.e.Stat(x)
	if err != nil || second.ID == first.ID {
		t.Fatalf("stat %s after remove and create: %+v, %v (first file %d)", x, second, err, first.ID)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	// The connection's end removes its temporaries.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := d.srv.e.Stat(x); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("20 s after its connection ended, %s (file %d), the temporary it created, is still there", x, second.ID)
		}
	}
}
