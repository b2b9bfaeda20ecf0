package uring

import "testing"

// TestStatsCountAnEntryBeforeItsCompletion: an operation's SQE and its
// io_uring_enter are in Stats by the time its completion is delivered.
// They were counted only once the entering goroutine had the submission
// lock again after the system call, while the kernel may complete the
// operation (a read the page cache holds) and the reaper deliver it
// first: the daemon answered a client's batch of reads before the ring
// counted their entry, and a snapshot taken on the answer (server's
// TestColdReadsOfABatchEnterTogether, under CI's load) read "0 SQEs in 0
// entries". The test holds the entering goroutine just after the kernel
// took the SQE, and waits for the completion meanwhile.
func TestStatsCountAnEntryBeforeItsCompletion(t *testing.T) {
	r, err := New(Options{Entries: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	in, release := holdFirst(t, r, &enteredHook)
	before := r.Stats()
	w := NewWaiter()
	subErr := make(chan error, 1)
	go func() { subErr <- r.Nop(w) }() // enters it itself, then is held
	<-in
	res := <-w.ch // delivered by the reaper while the entry is held
	got := r.Stats().Sub(before)
	close(release)
	if err := <-subErr; err != nil || res.Res != 0 {
		t.Fatalf("nop: submit %v, result %d", err, res.Res)
	}
	if got.Completions != 1 || got.SQEs != 1 || got.SubmitEnters != 1 {
		t.Errorf("on the completion's delivery Stats counted %d SQEs in %d entries and %d completions, want 1 in 1 and 1",
			got.SQEs, got.SubmitEnters, got.Completions)
	}
	if after := r.Stats().Sub(before); after.SQEs != 1 || after.SubmitEnters != 1 {
		t.Errorf("after the entry Stats counted %d SQEs in %d entries, want 1 in 1", after.SQEs, after.SubmitEnters)
	}
}
