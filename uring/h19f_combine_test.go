package uring

import (
	"bytes"
	"errors"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// holdFirstEntry makes r's first kernel entry (under the entering role,
// sqMu released) wait in the doorway: in is closed once it waits, and it
// goes on when release is closed.
func holdFirstEntry(t *testing.T, r *Ring) (in, release chan struct{}) {
	return holdFirst(t, r, &enterHook)
}

// holdFirst sets hook (enterHook or reapHook) so that its first call for
// r closes in and waits for release; the test's end unsets it.
func holdFirst(t *testing.T, r *Ring, hook *atomic.Pointer[func(*Ring)]) (in, release chan struct{}) {
	in, release = make(chan struct{}), make(chan struct{})
	held := false
	f := func(hr *Ring) {
		if hr != r || held {
			return
		}
		held = true
		close(in)
		<-release
	}
	hook.Store(&f)
	t.Cleanup(func() { hook.Store(nil) })
	return in, release
}

// submit checks closed under sqMu, then (SQ full) enterWaitLocked, which
// now drops sqMu for the kernel entry. Close can set closed in that window;
// the submission must then fail with ErrClosed, as "operations submitted
// after Close fail with ErrClosed". With 01e8d34 it is accepted after
// Close's last flush. Which way it then goes depends on who wins the race
// after the held entry returns: if the submitter arms first, Close waits
// in inflight.Wait forever (the plug holds the SQE); if the reaper
// delivers the flushed NOPs first, the submitter's inflight.Add races
// Close's inflight.Wait at zero (race report, and "sync: WaitGroup is
// reused before previous Wait has returned" panics in Close, taking the
// test binary down), or Close unmaps the ring with the SQE never entered
// and its waiter hangs. All three were seen with -count=3.
func TestH19fSubmitRacingCloseThroughFullQueue(t *testing.T) {
	r, err := New(Options{Entries: 8})
	if err != nil {
		t.Fatal(err)
	}
	in, release := holdFirstEntry(t, r)

	r.Plug()
	var g Group
	g.Add(8)
	for range 8 { // fill the SQ under the plug
		if err := r.Nop(&g); err != nil {
			t.Fatal(err)
		}
	}
	w := NewWaiter()
	subErr := make(chan error, 1)
	go func() { subErr <- r.Nop(w) }() // SQ full: becomes the enterer, held
	<-in

	closeErr := make(chan error, 1)
	go func() { closeErr <- r.Close() }()
	for { // until Close has marked the ring closed and dropped sqMu
		r.sqMu.Lock()
		c := r.closed
		r.sqMu.Unlock()
		if c {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(release)

	err = <-subErr
	// Only an accepted Nop (the bug) has a completion to wait for: one
	// refused with ErrClosed never reaches w.
	accepted := err == nil
	if !errors.Is(err, ErrClosed) {
		t.Errorf("Nop submitted while Close ran (SQ full, entry dropped sqMu): err %v, want ErrClosed", err)
	}
	select {
	case err := <-closeErr:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
		if accepted {
			select {
			case res := <-w.ch:
				t.Logf("racing Nop completed: %d", res.Res)
			case <-time.After(20 * time.Second):
				t.Errorf("Close returned, ring unmapped, the accepted Nop never completed: its waiter hangs")
			}
		}
	case <-time.After(30 * time.Second):
		t.Errorf("Close hung: an SQE was prepared after Close's last flush and the plug holds it")
		_ = r.Unplug() // let Close finish (the ring is still mapped: Close is in inflight.Wait)
		if err := <-closeErr; err != nil {
			t.Errorf("Close: %v", err)
		}
		if accepted {
			<-w.ch
		}
	}
	g.wg.Wait()
}

// The package doc: "while any plug is held, prepared SQEs stay in the
// submission queue and are entered into the kernel together when the
// last plug is released, when the queue fills, or when someone waits".
// With 01e8d34 an entry in progress (another goroutine's unplugged
// submission) enters, when it comes back, whatever was prepared under a
// plug taken meanwhile: nobody released the plug, filled the queue or
// waited, yet the plugged batch is split off into the kernel.
func TestH19fEntryInProgressHonoursPlug(t *testing.T) {
	r := newRing(t, Options{Entries: 64})
	in, release := holdFirstEntry(t, r)

	first := NewWaiter()
	firstDone := make(chan error, 1)
	go func() { firstDone <- r.Nop(first) }()
	<-in
	before := r.Stats()

	r.Plug()
	const n = 4
	var g Group
	g.Add(n)
	for range n {
		if err := r.Nop(&g); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	<-first.ch // not r.Wait: that flushes, as any waiter may
	d := r.Stats().Sub(before)
	if err := r.Unplug(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.WaitGroup(&g, "nop"); err != nil {
		t.Fatal(err)
	}
	if d.SQEs != 1 {
		t.Errorf("still plugged, nobody waited: %d SQEs entered (%d entries), want 1 (the unplugged Nop's): the plugged batch went in early",
			d.SQEs, d.SubmitEnters)
	}
}

// The goroutine that finds no entry in progress enters, and then keeps
// entering for as long as others prepare SQEs during each of its
// entries: its own submission (already in the kernel, even completed)
// does not return. Under sustained load from other goroutines its
// latency is unbounded (here 100 entries for one Nop; nothing limits it).
//
// The load: every kernel entry of r, whoever makes it, has another
// goroutine submit a Nop while the entry is in the doorway, 99 in all.
// Counted are the entries made on the goroutine of the measured Nop
// before that Nop returns. The others' Nops must still all be entered
// by someone (the role handed on) without anyone flushing or waiting
// through the ring: they submitted and returned, their SQEs left to the
// entry in progress.
func TestH19fEnterRoleIsBounded(t *testing.T) {
	r := newRing(t, Options{Entries: 64})
	const rounds = 100
	var entries, mine atomic.Int32
	me := goid()
	var g Group
	var hook func(*Ring)
	hook = func(hr *Ring) {
		if hr != r {
			return
		}
		if goid() == me {
			mine.Add(1)
		}
		if entries.Add(1) >= rounds {
			return
		}
		// Someone else submits while this entry is in the kernel: its
		// enterLocked finds entering set and returns at once.
		done := make(chan error)
		go func() { done <- r.Nop(&g) }()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	g.Add(rounds - 1)
	enterHook.Store(&hook)
	t.Cleanup(func() { enterHook.Store(nil) })

	w := NewWaiter()
	if err := r.Nop(w); err != nil {
		t.Fatal(err)
	}
	made := mine.Load()
	select {
	case res := <-w.ch: // not r.Wait: that flushes
		if res.Res != 0 {
			t.Errorf("nop: %d", res.Res)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the measured Nop never completed (after %d entries)", entries.Load())
	}
	others := make(chan struct{})
	go func() { g.wg.Wait(); close(others) }()
	select {
	case <-others:
	case <-time.After(10 * time.Second):
		t.Fatalf("after %d entries, the others' Nops were never all entered: nobody took over the entering role", entries.Load())
	}
	enterHook.Store(nil)
	if n := entries.Load(); n < rounds {
		t.Errorf("%d entries, want %d: the load ran short", n, rounds)
	}
	if made > 2 {
		t.Errorf("one Nop's submit made %d kernel entries on behalf of others before returning; want it bounded (<= 2)", made)
	}
}

// goid is the current goroutine's id, from its stack trace header
// ("goroutine 18 [running]:").
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		b = b[:i]
	}
	id, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		panic("goid: " + err.Error())
	}
	return id
}
