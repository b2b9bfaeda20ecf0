package engine

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
)

// TestTruncateGCWhileZerosNumberedNotSubmitted: a GC pass that relocates
// the file after the zeros' record took its number but before that record
// is submitted must not make the new size durable without the zeros. It
// carried the new size and flushed it (the zeros not on the device yet),
// and a crash then (modelled by copying the device as of GC's flush)
// brought the file back cut to 5000 over the tail block's old bytes,
// which a grow showed. The pass now leaves the file for later; a pass
// after the truncate collects the zone.
func TestTruncateGCWhileZerosNumberedNotSubmitted(t *testing.T) {
	devName, cfg, e, f := fileWithoutGC(t)
	defer func() { e.Close() }()
	small := bytes.Repeat([]byte("truncate"), 10000/8)
	for range 20 {
		if _, err := f.WriteAt(small, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	big := bytes.Repeat([]byte("filler!!"), (2<<20)/8)
	if _, err := f.WriteAt(big, 16384); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	before := readAll(t, e, "a")
	path := strings.TrimPrefix(devName[:strings.Index(devName, "?")], "emu:")
	copyName := strings.Replace(devName, path, path+"2", 1)
	armed, ran := false, false
	var victim *zone
	testHookTruncateTail = func(*Engine) { armed = true }
	testHookNumbered = func(e *Engine, ff *file) {
		if !armed || ran || ff != f.f {
			return
		}
		ran = true
		e.gc.mu.Lock()
		victim = fileZone(t, e, f)
		if !victim.state.CompareAndSwap(zoneFull, zoneGC) {
			e.gc.mu.Unlock()
			t.Errorf("the file's zone is not full: state %d", victim.state.Load())
			return
		}
		ok, err := e.gc.collect(victim)
		e.gc.mu.Unlock()
		if err != nil {
			t.Errorf("collect: %v", err)
			return
		}
		t.Logf("collect in the window: %v", ok)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Error(err)
			return
		}
		if err := os.WriteFile(path+"2", b, 0o600); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { testHookTruncateTail, testHookNumbered = nil, nil })
	if err := f.Truncate(5000); err != nil {
		t.Fatal(err)
	}
	testHookTruncateTail, testHookNumbered = nil, nil
	if !ran {
		t.Fatal("hook never ran")
	}
	if victim.state.Load() == zoneFull {
		// Left for later: once the truncate is done a pass takes it.
		e.gc.mu.Lock()
		victim.state.Store(zoneGC)
		ok, err := e.gc.collect(victim)
		e.gc.mu.Unlock()
		if err != nil || !ok {
			t.Fatalf("collect after the truncate: %v %v", ok, err)
		}
	}
	e2 := reopen(t, copyName, cfg)
	defer e2.Close()
	got := readAll(t, e2, "a")
	if len(got) != 5000 {
		sameBytes(t, "crash during the truncate (before it)", got, before)
		return
	}
	g, err := e2.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Truncate(8192); err != nil {
		t.Fatal(err)
	}
	want := append(small[:5000:5000], make([]byte, 8192-5000)...)
	sameBytes(t, "crash during the truncate (after it), then grow", readAll(t, e2, "a"), want)
}

// TestTruncateFlushEIOGCDuringUndo: a truncate whose flush failed puts
// the file back (undoCut) in records numbered after the zeros'. A GC
// pass in between, whose record carries the old size and whose flush
// makes the zeros durable without undoCut's records, would bring the
// file back with the old size over the zeroed block and holes past it:
// GC leaves the file alone until the undo is durable.
func TestTruncateFlushEIOGCDuringUndo(t *testing.T) {
	devName, cfg, e, f := fileWithoutGC(t)
	defer func() { e.Close() }()
	small := bytes.Repeat([]byte("truncate"), 10000/8)
	for range 20 {
		if _, err := f.WriteAt(small, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	big := bytes.Repeat([]byte("filler!!"), (2<<20)/8)
	if _, err := f.WriteAt(big, 16384); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	before := readAll(t, e, "a")
	path := strings.TrimPrefix(devName[:strings.Index(devName, "?")], "emu:")
	copyName := strings.Replace(devName, path, path+"2", 1)
	ran := false
	testHookNumbered = func(e *Engine, ff *file) {
		ff.mu.RLock()
		undoing := ff.tailSeq == tailUndoing
		ff.mu.RUnlock()
		if ran || ff != f.f || !undoing {
			return
		}
		ran = true
		e.gc.mu.Lock()
		victim := fileZone(t, e, f)
		if !victim.state.CompareAndSwap(zoneFull, zoneGC) {
			e.gc.mu.Unlock()
			t.Errorf("the file's zone is not full: state %d", victim.state.Load())
			return
		}
		ok, err := e.gc.collect(victim)
		e.gc.mu.Unlock()
		if err != nil {
			t.Errorf("collect: %v", err)
			return
		}
		t.Logf("collect during the undo: %v", ok)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Error(err)
			return
		}
		if err := os.WriteFile(path+"2", b, 0o600); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { testHookNumbered = nil })
	emuOf(t, e).FailFlush(1)
	if err := f.Truncate(5000); !errors.Is(err, syscall.EIO) {
		t.Fatalf("truncate: %v", err)
	}
	testHookNumbered = nil
	if !ran {
		t.Fatal("hook never ran")
	}
	sameBytes(t, "after the failed truncate", readAll(t, e, "a"), before)
	e2 := reopen(t, copyName, cfg)
	defer e2.Close()
	got := readAll(t, e2, "a")
	if len(got) != 5000 {
		sameBytes(t, "crash during the failed truncate's undo (before it)", got, before)
		return
	}
	g, err := e2.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Truncate(8192); err != nil {
		t.Fatal(err)
	}
	want := append(small[:5000:5000], make([]byte, 8192-5000)...)
	sameBytes(t, "crash during the failed truncate's undo (after it), then grow", readAll(t, e2, "a"), want)
}
