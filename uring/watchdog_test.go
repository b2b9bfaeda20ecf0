package uring

import (
	"bytes"
	"os"
	"testing"
	"time"
)

// TestWatchdogResubmitsWorkTheKernelSatOn: an operation the kernel holds
// without running it must not wait forever. On 6.18 a buffered read of an
// emu device's file now and then never completed (no CQE; recovery hung
// in TestPowerCutLoop); that cannot be forced, so a read of an empty
// pipe stands in for it: the kernel parks it (armed on poll) and runs it
// only once data comes. The watchdog must cancel it once it is older than
// StuckAfter and submit it again; the read then still gets its bytes,
// once, into the same buffer.
func TestWatchdogResubmitsWorkTheKernelSatOn(t *testing.T) {
	r := newRing(t, Options{Entries: 8, StuckAfter: 40 * time.Millisecond})
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	buf := make([]byte, 5)
	w := NewWaiter()
	if err := r.Read(FD(int(pr.Fd())), buf, ^uint64(0), w); err != nil {
		t.Fatal(err)
	}
	_ = r.Flush()
	deadline := time.Now().Add(10 * time.Second)
	for r.Stats().StuckFound < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("a read parked in the kernel for 10 s was never canceled and resubmitted: %+v", r.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := pw.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	res := r.Wait(w)
	if res.Res != 5 || !bytes.Equal(buf, []byte("hello")) {
		t.Fatalf("the resubmitted read got %d (%q), want 5 (\"hello\")", res.Res, buf)
	}
	if st := r.Stats(); st.KernelCancels < 2 {
		t.Fatalf("Stats.KernelCancels = %d after %d found stuck; want the read submitted again each time", st.KernelCancels, st.StuckFound)
	}
}
