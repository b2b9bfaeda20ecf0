package uring

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"
)

// The kernel's io-wq completes an operation it never ran with ECANCELED
// when it cannot start a worker thread for it (or its task exits); zonefold
// never cancels an operation itself, so such a completion is not the
// operation's outcome. Those conditions cannot be forced from a test, so
// these tests fake them with fakeCancels: the operation goes to the kernel
// as a NOP and its completion reads as ECANCELED, as an io-wq cancel does.

// TestKernelCancelIsResubmitted: a write and an fsync the kernel canceled
// (twice, three times) still succeed, the write lands once (the file is
// O_APPEND, so a write that ran twice would show twice), and the data is
// in the file.
func TestKernelCancelIsResubmitted(t *testing.T) {
	r := newRing(t, Options{Entries: 8})
	f := openFile(t, os.O_APPEND)
	fd := FD(int(f.Fd()))
	want := pattern(5000, 9)

	r.fakeCancels.Store(2)
	if n, err := r.WriteAt(fd, want, 0); err != nil || n != len(want) {
		t.Fatalf("WriteAt after 2 kernel cancels = %d, %v; want %d, nil", n, err, len(want))
	}
	r.fakeCancels.Store(3)
	if err := r.Sync(fd, false); err != nil {
		t.Fatalf("Sync after 3 kernel cancels: %v", err)
	}
	if left := r.fakeCancels.Load(); left != 0 {
		t.Fatalf("%d injected cancels left unused", left)
	}
	got, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("file holds %d bytes, want the %d written once", len(got), len(want))
	}
	if st := r.Stats(); st.KernelCancels != 5 {
		t.Fatalf("Stats.KernelCancels = %d, want 5", st.KernelCancels)
	}
}

// TestKernelCancelRetriesAreBounded: an operation the kernel keeps
// canceling fails with ECANCELED after a bounded number of attempts,
// and the ring still works afterwards.
func TestKernelCancelRetriesAreBounded(t *testing.T) {
	r := newRing(t, Options{Entries: 8})
	f := openFile(t, 0)
	fd := FD(int(f.Fd()))
	r.fakeCancels.Store(1 << 20)
	err := r.Sync(fd, false)
	if !errors.Is(err, syscall.ECANCELED) {
		t.Fatalf("Sync the kernel always cancels: %v, want ECANCELED", err)
	}
	if used := 1<<20 - r.fakeCancels.Load(); used != maxKernelCancelRetries+1 {
		t.Fatalf("Sync was tried %d times, want %d", used, maxKernelCancelRetries+1)
	}
	r.fakeCancels.Store(0)
	if err := r.Sync(fd, false); err != nil {
		t.Fatalf("Sync after the cancels stopped: %v", err)
	}
	if r.Err() != nil {
		t.Fatalf("ring failed: %v", r.Err())
	}
}

// TestKernelCancelKeepsRealErrors: a failure that is not a cancel is
// reported at once, not retried (fsync of a pipe is EINVAL).
func TestKernelCancelKeepsRealErrors(t *testing.T) {
	r := newRing(t, Options{Entries: 8})
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	r.fakeCancels.Store(1)
	if err := r.Sync(FD(int(pw.Fd())), false); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("fsync of a pipe after a kernel cancel: %v, want EINVAL", err)
	}
	if st := r.Stats(); st.KernelCancels != 1 {
		t.Fatalf("Stats.KernelCancels = %d, want 1", st.KernelCancels)
	}
}

// TestKernelCancelUnderLoad: many goroutines write and fsync their own
// files while the kernel cancels some of their operations; every one
// succeeds and every file holds its data exactly once.
func TestKernelCancelUnderLoad(t *testing.T) {
	r := newRing(t, Options{Entries: 8})
	const workers, rounds = 16, 20
	files := make([]*os.File, workers)
	for i := range files {
		files[i] = openFile(t, os.O_APPEND)
	}
	// Fewer cancels than the retry bound: even if one operation drew
	// them all, it would still succeed.
	r.fakeCancels.Store(maxKernelCancelRetries)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fd := FD(int(files[i].Fd()))
			for j := range rounds {
				if _, err := r.WriteAt(fd, pattern(512, byte(i+j)), 0); err != nil {
					errs <- fmt.Errorf("worker %d write %d: %w", i, j, err)
					return
				}
				if err := r.Sync(fd, true); err != nil {
					errs <- fmt.Errorf("worker %d fsync %d: %w", i, j, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if left := r.fakeCancels.Load(); left > 0 {
		t.Errorf("%d injected cancels left unused", left)
	}
	for err := range errs {
		t.Error(err)
	}
	for i, f := range files {
		got, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		var want []byte
		for j := range rounds {
			want = append(want, pattern(512, byte(i+j))...)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("file %d holds %d bytes, want %d written once each", i, len(got), len(want))
		}
	}
}

// TestKernelCancelOfACommand: a URING_CMD the kernel canceled is reported
// as canceled (a Zone Append must never be sent twice) unless its
// submitter declared it idempotent; then it goes to the kernel again (here
// a regular file, which refuses URING_CMD with an error of its own).
func TestKernelCancelOfACommand(t *testing.T) {
	r := newRing(t, Options{Entries: 8, Big: true})
	f := openFile(t, 0)
	var cmd [CmdSize]byte
	for _, tc := range []struct {
		name   string
		submit func(File, uint32, *[CmdSize]byte, []byte, Completion) error
		again  bool
	}{
		{"Cmd", r.Cmd, false},
		{"IdempotentCmd", r.IdempotentCmd, true},
	} {
		before := r.Stats()
		r.fakeCancels.Store(1)
		w := NewWaiter()
		if err := tc.submit(FD(int(f.Fd())), 0, &cmd, nil, w); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		err := r.Wait(w).Err("uring_cmd")
		resubmitted := r.Stats().Sub(before).KernelCancels == 1
		if resubmitted != tc.again || errors.Is(err, syscall.ECANCELED) == tc.again {
			t.Fatalf("%s canceled by the kernel: resubmitted %v, result %v", tc.name, resubmitted, err)
		}
	}
}
