package uring

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// reaperState is the reaper goroutine's scheduling state as a stack dump
// shows it ("IO wait", "syscall", "runnable", ...), "" if none is found.
func reaperState() []string {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	var states []string
	for _, g := range strings.Split(string(buf[:n]), "\n\n") {
		if !strings.Contains(g, "uring.(*Ring).reap(") {
			continue
		}
		head := g[strings.Index(g, "[")+1:]
		states = append(states, head[:strings.IndexAny(head, ",]")])
	}
	return states
}

// TestIdleReaperWaitsInTheNetpoller: a ring with nothing in flight parks
// its reaper in Go's netpoller on the completions' eventfd, not in a
// blocking io_uring_enter (which kept the scheduler's monitor polling every
// 20 µs and handing Ps around: a fifth of the daemon's CPU on cold reads),
// and it still delivers a completion that arrives while it is parked.
func TestIdleReaperWaitsInTheNetpoller(t *testing.T) {
	r, err := New(Options{Entries: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.cqEvents == nil {
		t.Fatal("the kernel refused the completions' eventfd (IORING_REGISTER_EVENTFD, Linux 5.2): the reaper waits in io_uring_enter")
	}
	var states []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if states = reaperState(); len(states) == 1 && states[0] == "IO wait" {
			break
		}
	}
	if len(states) != 1 || states[0] != "IO wait" {
		t.Fatalf("idle reaper's state: %q, want one in \"IO wait\" (the netpoller)", states)
	}
	for range 3 {
		w := NewWaiter()
		buf, write := pipeRead(t, r, w)
		write()
		if res := waitOrHang(t, r, w, "read while the reaper is parked"); res.Res != 5 || string(buf) != "hello" {
			t.Fatalf("read while the reaper is parked: %d (%v), %q", res.Res, res.Err("read"), buf)
		}
	}
	if s := r.Stats(); s.WaitEnters == 0 {
		t.Errorf("WaitEnters = 0 after the reaper waited")
	}
}
