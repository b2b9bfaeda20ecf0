package uring

import (
	"testing"
	"time"
)

// A completion the kernel could not post because the completion queue
// was full goes to the kernel's overflow list, and every completion after
// it too, until someone enters the kernel to flush them; no eventfd
// signal tells of them. The queue is full when the reaper is slow to
// advance its head while the slots' completions arrive: the slots' count
// keeps their own completions within the queue, but the ring's wake-up
// read (at Close) and the watchdog's cancels take a CQE beyond them. A
// reaper that parked on the eventfd with the overflow flag set never
// delivered them: Close hung now and then in TestPlugOverflowSubmits-
// WhenQueueFills (the wake-up read's CQE sat in the overflow list). Here
// the reaper is held with a full queue not yet advanced, one more NOP
// completes into the overflow list, and the reaper, released, must
// deliver it.
func TestOverflowedCompletionIsDelivered(t *testing.T) {
	underEachWait(t, 8, testOverflowedCompletionIsDelivered)
}

func testOverflowedCompletionIsDelivered(t *testing.T, opts Options) {
	// No watchdog: its cancel's entry would flush the overflow 5 s on.
	opts.StuckAfter = time.Hour
	r := newRing(t, opts)
	in, release := holdFirst(t, r, &reapHook)

	var g Group
	n := r.Slots() // as many as the completion queue holds
	g.Add(n)
	r.Plug()
	for range n {
		if err := r.Nop(&g); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Unplug(); err != nil {
		t.Fatal(err)
	}
	<-in // the reaper delivered some and has not advanced the head
	for deadline := time.Now().Add(10 * time.Second); r.ring.CQReady() < uint32(n); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			close(release)
			t.Fatalf("the completion queue holds %d completions, want it full (%d)", r.ring.CQReady(), n)
		}
	}
	w := NewWaiter() // a slot the reaper's first delivery freed
	if err := r.Nop(w); err != nil {
		close(release)
		t.Fatal(err)
	}
	if err := r.Flush(); err != nil {
		close(release)
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !r.ring.CQHasOverflow(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			close(release)
			t.Fatal("the NOP's completion did not overflow the full queue")
		}
	}
	close(release)
	if res := waitOrHang(t, r, w, "NOP whose completion overflowed"); res.Res != 0 {
		t.Fatalf("NOP whose completion overflowed: %d", res.Res)
	}
	if _, err := r.WaitGroup(&g, "nop"); err != nil {
		t.Fatal(err)
	}
}
