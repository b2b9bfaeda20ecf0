package uring

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
)

// While one goroutine is in the kernel entering SQEs, others that submit
// do not wait for it to come back (they used to queue on the SQ mutex for
// the whole io_uring_enter, 20-50 µs a direct read on a virtio disk): they
// prepare their SQEs and return, and the entry in progress enters all of
// them together when it returns.
func TestEntryInProgressTakesWhatOthersPrepare(t *testing.T) {
	r := newRing(t, Options{Entries: 64})
	in, release := holdFirstEntry(t, r)

	before := r.Stats()
	first := NewWaiter()
	firstDone := make(chan struct{})
	go func() {
		defer close(firstDone)
		if err := r.Nop(first); err != nil {
			t.Error(err)
		}
	}()
	<-in // the first Nop's entry is held in the kernel's doorway

	const n = 10
	var g Group
	done := nopsAside(r, &g, n, true)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("submitters waited for another goroutine's kernel entry")
	}
	if d := r.Stats().Sub(before); d.SubmitEnters != 0 {
		t.Fatalf("entries while the first was held: %+v, want none", d)
	}
	close(release)
	if res := r.Wait(first); res.Res != 0 {
		t.Fatalf("first nop: %d", res.Res)
	}
	if _, err := r.WaitGroup(&g, "nop"); err != nil {
		t.Fatal(err)
	}
	// The first Nop's goroutine counts an entry before it enters, but
	// takes back what the kernel did not take only once it returns.
	<-firstDone
	// The held entry, then one more for everything prepared meanwhile.
	if d := r.Stats().Sub(before); d.SubmitEnters != 2 || d.SQEs != n+1 || d.Completions != n+1 {
		t.Fatalf("after release: %+v, want 2 entries of %d SQEs", d, n+1)
	}
}

// A submitter that finds the submission queue full while another
// goroutine is entering waits for that entry (which frees the queue)
// instead of failing or spinning.
func TestFullQueueWaitsForEntryInProgress(t *testing.T) {
	r := newRing(t, Options{Entries: 8})
	in, release := holdFirstEntry(t, r)

	first := NewWaiter()
	go func() { _ = r.Nop(first) }()
	<-in
	// Fill the SQ (8 entries, the first Nop's published but not taken)
	// and then some: the 8th on finds it full and must wait for the
	// held entry, not fail.
	const n = 12
	var g Group
	done := nopsAside(r, &g, n, false)
	time.Sleep(50 * time.Millisecond)
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	r.Wait(first)
	if _, err := r.WaitGroup(&g, "nop"); err != nil {
		t.Fatal(err)
	}
}

// Goroutines made runnable together (a connection's batch of requests
// handed to its workers) each submit one read and wait. On two CPUs
// they ran one after another, each entering its own SQE as it came —
// one io_uring_enter, one device notification, per request (cold 4k
// reads at iodepth 32 through the daemon: 1.38 SQEs an entry). The
// goroutine that takes the entering role now lets the runnable ones
// run first, and they leave their SQEs to it. With one P (so no timing
// decides it: the runnable goroutines run only when the first yields)
// the batch needs far fewer entries than goroutines.
func TestRunnableSubmittersShareOneEntry(t *testing.T) {
	r := newRing(t, Options{Entries: 64})
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const n = 16
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			w := NewWaiter()
			if err := r.Nop(w); err != nil {
				errs <- err
				return
			}
			if res := r.Wait(w); res.Res != 0 {
				errs <- fmt.Errorf("nop: %d", res.Res)
			}
		}()
	}
	runtime.Gosched() // let them all reach <-start
	before := r.Stats()
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	d := r.Stats().Sub(before)
	if d.SQEs < n || d.SubmitEnters > n/4 {
		t.Fatalf("%d runnable submitters: %d SQEs in %d entries, want at most %d entries", n, d.SQEs, d.SubmitEnters, n/4)
	}
}

// nopsAside submits n Nops to g (counted in g first) on a goroutine of
// its own, then Flushes if flush, and sends the first error (or nil).
func nopsAside(r *Ring, g *Group, n int, flush bool) <-chan error {
	g.Add(n)
	done := make(chan error, 1)
	go func() {
		for range n {
			if err := r.Nop(g); err != nil {
				done <- err
				return
			}
		}
		if flush {
			done <- r.Flush()
			return
		}
		done <- nil
	}()
	return done
}
