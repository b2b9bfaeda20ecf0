package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"
)

// TestH15WriteOnFailingDeviceAnswersInsteadOfHanging: once the device
// fails every append, a client that keeps writing (fio against a dying
// disk) must get an answer to each write — OK while the cache takes it,
// then an error (EIO, as another client's write gets at once) — not wait
// for as long as the device fails. On main the write that finds the
// cache over its dirty limit waits in the throttle for dirty data no
// writeback can ever clean, and the throttled writer and the background
// flusher kick each other in a loop meanwhile (the test logs the CPU the
// daemon burns while the write waits).
func TestH15WriteOnFailingDeviceAnswersInsteadOfHanging(t *testing.T) {
	socket, emu := NewTestDaemonEmu(t)
	c := dial(t, socket)
	ctx := context.Background()
	h, _, err := c.Open(ctx, "a", OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	emu.FailWrites(true)
	t.Cleanup(func() { emu.FailWrites(false) })
	buf := bytes.Repeat([]byte{7}, 1<<20)
	const wait = 15 * time.Second
	for i := 0; i < 48; i++ {
		var before syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &before)
		wctx, cancel := context.WithTimeout(ctx, wait)
		start := time.Now()
		rates := make(chan string, 1)
		go func() {
			// Sample another client's view of the engine while the
			// write runs: failed GC passes and append errors per second.
			o, err := Dial(ctx, socket, 1<<20)
			if err != nil {
				rates <- err.Error()
				return
			}
			defer o.Close()
			time.Sleep(3 * time.Second)
			s0, err0 := o.Stats(ctx)
			time.Sleep(5 * time.Second)
			s1, err1 := o.Stats(ctx)
			if err0 != nil || err1 != nil {
				rates <- fmt.Sprint(err0, err1)
				return
			}
			rates <- fmt.Sprintf("%d failed GC passes/s, %d failed appends/s",
				(s1.GCFailed-s0.GCFailed)/5, (s1.AppendErrs-s0.AppendErrs)/5)
		}()
		_, err := c.WriteAt(wctx, h, buf, int64(i)<<20)
		cancel()
		if err != nil && time.Since(start) >= wait {
			var after syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &after)
			cpu := time.Duration(after.Utime.Nano()+after.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()) * time.Nanosecond
			t.Fatalf("write %d (1 MiB at %d MiB) unanswered after %v while the device fails every append: %v (meanwhile: process CPU %v, %s)",
				i, i, wait, err, cpu.Round(time.Millisecond), <-rates)
		}
		if err != nil {
			if !errors.Is(err, syscall.EIO) {
				t.Logf("write %d: %v", i, err)
			}
			return // an answer: what is wanted
		}
	}
}
