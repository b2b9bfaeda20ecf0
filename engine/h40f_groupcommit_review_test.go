package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"
)

// Review of b034be4 (durable operations share flushes): a truncate now
// gives up the collector once its record has landed, before the record's
// flush. A GC pass that runs in that window finds the zones the cut
// emptied; it must reset none of them until a flush that covers the
// truncate's record has succeeded: a crash before that recovers the
// file from the checkpoint, mapped into those zones. If the truncate's
// flush fails, so does the pass's wait for it, and nothing is reset.
func TestH40fGCPassWhileATruncateFlushesResetsNothingBeforeIt(t *testing.T) {
	for _, fail := range []bool{false, true} {
		name := map[bool]string{false: "flush-ok", true: "flush-fails"}[fail]
		t.Run(name, func(t *testing.T) {
			devName, emu, held, e := openHeld(t, true, true) // held before the device flush
			f := mustCreate(t, e, "a")
			want := bytes.Repeat([]byte{9}, 2<<20) // two zones of a's blocks at least
			if _, err := f.WriteAt(want, 0); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			if err := e.checkpoint(); err != nil { // a's extents are in it
				t.Fatal(err)
			}
			resets := e.stats.gcResets.Load()
			held.armed.Store(true)
			errs := make(chan error, 1)
			go func() { errs <- f.Truncate(0) }()
			within(t, held.flushed, "the truncate's flush")
			waiting := make(chan struct{}, 1)
			testHookFlushWait = func() {
				select {
				case waiting <- struct{}{}:
				default:
				}
			}
			defer func() { testHookFlushWait = nil }()
			gcDone := make(chan error, 1)
			go func() {
				e.gc.mu.Lock()
				_, err := e.gc.passLocked(gcUrgent, minGCGain)
				e.gc.mu.Unlock()
				gcDone <- err
			}()
			select {
			case err := <-gcDone:
				t.Logf("the pass ended without waiting for a flush: %v", err)
			case <-waiting:
			}
			if n := e.stats.gcResets.Load() - resets; n != 0 {
				t.Fatalf("a GC pass reset %d zones while the truncate that emptied them was not durable", n)
			}
			if fail {
				emu.FailFlush(1)
			}
			close(held.release)
			terr := within(t, errs, "the truncate")
			if fail != (terr != nil) {
				t.Fatalf("truncate with its flush failing=%v: %v", fail, terr)
			}
			if fail && !errors.Is(terr, syscall.EIO) {
				t.Fatalf("truncate whose flush failed: %v, want EIO", terr)
			}
			gerr := within(t, gcDone, "the GC pass")
			t.Logf("gc pass: %v; zones reset: %d", gerr, e.stats.gcResets.Load()-resets)
			testHookFlushWait = nil
			f.Close()
			if err := emu.PowerCut(); err != nil {
				t.Fatal(err)
			}
			e.crashForTest()
			if err := held.Close(); err != nil {
				t.Fatal(err)
			}
			checkFsck(t, devName)
			e = reopen(t, devName, smallConfig())
			defer e.Close()
			got := readAll(t, e, "a")
			switch {
			case !fail && len(got) != 0:
				t.Fatalf("a truncate to 0 returned, then a power cut: a has %d bytes", len(got))
			case fail && len(got) != 0 && !bytes.Equal(got, want):
				t.Fatalf("a truncate to 0 failed, then a power cut: a has %d bytes, want 0 or its %d synced", len(got), len(want))
			}
		})
	}
}

// A group's flush fails: every operation that waited for it reports the
// error (none is answered nil because another waiter saw the failure
// first), each stays applied, as the error says, and the next durable
// point (SyncNamespace) makes all of them durable: after a power cut
// the namespace is the one every client saw.
func TestH40fFailedGroupFlushFailsEveryOperationInIt(t *testing.T) {
	devName, emu, held, e := openHeld(t, true, true) // held before the device flush
	for _, n := range []string{"x", "r", "g"} {
		f := mustCreate(t, e, n)
		f.Close()
	}
	if err := e.SyncNamespace(); err != nil {
		t.Fatal(err)
	}
	g, err := e.Open("g")
	if err != nil {
		t.Fatal(err)
	}
	ops := []func() error{
		func() error { return e.Rename("x", "y") },
		func() error { return e.Remove("r") },
		func() error { return g.Grow(3 * BlockSize) },
		func() error { // a create of the name the rename gave
			f, err := e.OpenFile("y", OCreate)
			if err == nil {
				err = f.Close()
			}
			return err
		},
	}
	held.armed.Store(true)
	errs := make(chan error, len(ops))
	go func() { errs <- ops[0]() }()
	within(t, held.flushed, "the first operation's flush")
	waiting := make(chan struct{}, len(ops))
	testHookFlushWait = func() { waiting <- struct{}{} }
	defer func() { testHookFlushWait = nil }()
	for i := 1; i < len(ops); i++ {
		go func() { errs <- ops[i]() }()
		within(t, waiting, "an operation to wait for the running flush")
	}
	testHookFlushWait = nil
	emu.FailFlush(1)
	close(held.release)
	for range ops {
		if err := within(t, errs, "the operations"); !errors.Is(err, syscall.EIO) {
			t.Errorf("an operation whose flush failed: %v, want EIO", err)
		}
	}
	if _, err := e.Stat("x"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("x after its rename failed to flush: %v, want it renamed (applied)", err)
	}
	if fi, err := e.Stat("g"); err != nil || fi.Size != 3*BlockSize {
		t.Errorf("g after its grow failed to flush: %+v %v, want it grown (applied)", fi, err)
	}
	if err := e.SyncNamespace(); err != nil {
		t.Fatal(err)
	}
	g.Close()
	if err := emu.PowerCut(); err != nil {
		t.Fatal(err)
	}
	e.crashForTest()
	if err := held.Close(); err != nil {
		t.Fatal(err)
	}
	e = reopen(t, devName, smallConfig())
	defer e.Close()
	names := map[string]int64{}
	for _, fi := range e.List() {
		names[fi.Name] = fi.Size
	}
	if want := map[string]int64{"y": 0, "g": 3 * BlockSize}; fmt.Sprint(names) != fmt.Sprint(want) {
		t.Fatalf("after a failed group flush, SyncNamespace and a power cut: %v, want %v", names, want)
	}
	checkFsck(t, devName)
}
