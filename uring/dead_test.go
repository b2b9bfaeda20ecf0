package uring

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// breakRing makes every later io_uring_enter on r fail for good, as if its
// descriptor had gone bad: the descriptor now names /dev/null (the kernel
// answers EOPNOTSUPP). The ring itself lives on in its mappings, so the
// kernel still completes what it holds, and a reaper waiting on the
// completions' eventfd goes on delivering them. A reaper waiting inside
// the kernel (waitInKernel) keeps waiting there until a completion
// arrives; one that is not dies at its next wait.
// breakRing first gives the reaper the chance to be inside (tests accept
// either outcome, but the first is the one that shows whether anything
// else stops it).
func breakRing(t *testing.T, r *Ring) {
	t.Helper()
	buf := make([]byte, 1<<20)
	waiting := func() bool {
		n := runtime.Stack(buf, true)
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			state := g[strings.Index(g, "[")+1:]
			if strings.Contains(g, "uring.(*Ring).reap(") && !strings.HasPrefix(state, "syscall") && !strings.HasPrefix(state, "IO wait") {
				return false
			}
		}
		return true
	}
	for i := 0; i < 1000 && !waiting(); i++ {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(10 * time.Millisecond)
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if err := unix.Dup3(int(null.Fd()), r.ring.RingFd(), unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
}

// underEachWait runs test on a ring of entries under each of the reaper's
// two ways to wait for completions: the tests of a broken ring run under
// both.
func underEachWait(t *testing.T, entries uint32, test func(*testing.T, Options)) {
	t.Run("eventfd", func(t *testing.T) { test(t, Options{Entries: entries}) })
	t.Run("in-kernel", func(t *testing.T) { test(t, Options{Entries: entries, waitInKernel: true}) })
}

// pipeRead submits a read of 5 bytes from a new pipe: it stays in the
// kernel until the test writes to the pipe.
func pipeRead(t *testing.T, r *Ring, w Completion) (buf []byte, write func()) {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pr.Close(); pw.Close() })
	buf = make([]byte, 5)
	if err := r.Read(FD(int(pr.Fd())), buf, ^uint64(0), w); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	return buf, func() {
		if _, err := pw.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
	}
}

// waitOrHang is Wait that fails the test instead of hanging forever.
func waitOrHang(t *testing.T, r *Ring, w *Waiter, what string) Result {
	t.Helper()
	got := make(chan Result, 1)
	go func() { got <- r.Wait(w) }()
	select {
	case res := <-got:
		return res
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: Wait did not return in 10s: the operation was abandoned", what)
		return Result{}
	}
}

// TestWaitNeverAbandonsAnOperation: when the ring cannot enter the kernel
// any more, Wait for an operation the kernel holds still waits for its
// completion (it returned at once with the flush's error while the read
// was in the kernel, and the waiter went back to the pool to receive the
// late completion in someone else's Wait). The operation the kernel never
// took completes with an error, and later submissions fail.
func TestWaitNeverAbandonsAnOperation(t *testing.T) {
	underEachWait(t, 8, testWaitNeverAbandonsAnOperation)
}

func testWaitNeverAbandonsAnOperation(t *testing.T, opts Options) {
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	w1 := NewWaiter()
	buf, write := pipeRead(t, r, w1) // in the kernel
	r.Plug()
	w2 := NewWaiter()
	if err := r.Nop(w2); err != nil { // prepared, never entered
		t.Fatal(err)
	}
	breakRing(t, r)
	got := make(chan Result, 1)
	go func() { got <- r.Wait(w1) }()
	// Wait's flush fails and kills the ring. The read is in the kernel:
	// Wait returns its bytes once the pipe has them, or ECANCELED if the
	// reaper died meanwhile, never the flush's error.
	for deadline := time.Now().Add(10 * time.Second); r.Err() == nil; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the failed flush did not mark the ring dead")
		}
	}
	write()
	select {
	case res := <-got:
		switch {
		case res.Res == 5 && string(buf) == "hello":
		case errors.Is(res.Err("read"), syscall.ECANCELED) && strings.Contains(r.Err().Error(), "wait for completions"):
			t.Log("the reaper died before the read completed")
		default:
			t.Fatalf("read in the kernel: Wait returned %d (%v), buffer %q; want its 5 bytes", res.Res, res.Err("read"), buf)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return in 10s after its read completed")
	}
	if res := waitOrHang(t, r, w2, "NOP the kernel never took"); !errors.Is(res.Err("nop"), syscall.ECANCELED) {
		t.Fatalf("NOP the kernel never took: %v, want ECANCELED", res.Err("nop"))
	}
	if err := r.Unplug(); !errors.Is(err, ErrDead) {
		t.Fatalf("Unplug of a dead ring: %v, want ErrDead", err)
	}
	if err := r.Nop(NewWaiter()); !errors.Is(err, ErrDead) {
		t.Fatalf("submission to a dead ring: %v, want ErrDead", err)
	}
	if err := r.Close(); !errors.Is(err, ErrDead) {
		t.Fatalf("Close of a dead ring: %v, want ErrDead", err)
	}
}

// TestCloseStopsTheReaperOfADeadRing: a ring that died submitting, its
// reaper still waiting in the kernel with nothing left to complete,
// closes: the reaper stops without a submission (Close needed to submit a
// NOP to stop it, and returned with the reaper still running).
func TestCloseStopsTheReaperOfADeadRing(t *testing.T) {
	underEachWait(t, 8, testCloseStopsTheReaperOfADeadRing)
}

func testCloseStopsTheReaperOfADeadRing(t *testing.T, opts Options) {
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	r.Plug()
	w := NewWaiter()
	if err := r.Nop(w); err != nil {
		t.Fatal(err)
	}
	breakRing(t, r)
	if err := r.Unplug(); !errors.Is(err, ErrDead) {
		t.Fatalf("Unplug: %v, want ErrDead", err)
	}
	if res := waitOrHang(t, r, w, "NOP the kernel never took"); !errors.Is(res.Err("nop"), syscall.ECANCELED) {
		t.Fatalf("NOP the kernel never took: %v, want ECANCELED", res.Err("nop"))
	}
	closed := make(chan error, 1)
	go func() { closed <- r.Close() }()
	select {
	case err := <-closed:
		if !errors.Is(err, ErrDead) {
			t.Fatalf("Close: %v, want ErrDead", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return in 10s")
	}
	select {
	case <-r.reaperDone:
	default:
		t.Fatal("Close returned with the reaper still running")
	}
}

// TestDeadReaperFailsEveryOperation: a reaper whose wait for completions
// fails for good fails every operation in flight, including one the kernel
// still holds, and the ring refuses new ones (its waiters hung forever).
func TestDeadReaperFailsEveryOperation(t *testing.T) {
	underEachWait(t, 8, testDeadReaperFailsEveryOperation)
}

func testDeadReaperFailsEveryOperation(t *testing.T, opts Options) {
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	w1, w2 := NewWaiter(), NewWaiter()
	_, write1 := pipeRead(t, r, w1)
	pipeRead(t, r, w2) // never written: stays in the kernel
	var g Group
	g.Add(1)
	_, _ = pipeRead(t, r, &g)
	breakRing(t, r)
	if r.cqEvents != nil {
		// A broken ring does not stop a reaper waiting on the
		// eventfd: fail its wait itself.
		r.cqEvents.Close()
	}
	write1() // the reaper delivers it (if alive), then its next wait fails
	if res := waitOrHang(t, r, w1, "completed read"); res.Res != 5 && !errors.Is(res.Err("read"), syscall.ECANCELED) {
		t.Fatalf("completed read: %d (%v), want 5 or ECANCELED", res.Res, res.Err("read"))
	}
	if res := waitOrHang(t, r, w2, "read held by the kernel"); !errors.Is(res.Err("read"), syscall.ECANCELED) {
		t.Fatalf("read held by the kernel when the reaper died: %v, want ECANCELED", res.Err("read"))
	}
	done := make(chan error, 1)
	go func() { _, err := r.WaitGroup(&g, "read"); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, syscall.ECANCELED) {
			t.Fatalf("group read held by the kernel: %v, want ECANCELED", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitGroup did not return in 10s")
	}
	if err := r.Nop(NewWaiter()); !errors.Is(err, ErrDead) {
		t.Fatalf("submission after the reaper died: %v, want ErrDead", err)
	}
	if !errors.Is(r.Err(), ErrDead) {
		t.Fatalf("Err() = %v, want ErrDead", r.Err())
	}
	if err := r.Close(); !errors.Is(err, ErrDead) {
		t.Fatalf("Close: %v, want ErrDead", err)
	}
}
