package engine

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"syscall"
	"testing"
	"time"
)

// An fsync whose file has nothing left to make durable costs no device
// flush: every record of the file's data, and every namespace operation
// logged before it (its create, a grow, a rename, deferred creates and
// removes of any file, which an fsync promises to cover: ODeferSync), is
// already covered by a flush that succeeded. Before, every fsync started
// a new flush: fio laying out 1000 files (deferred create, grow, fsync)
// did one per file for fsyncs whose grow had just flushed everything.
// The fsync still writes back what is dirty, reports the write-back
// errors its handle has not seen, settles a failed operation's record,
// and flushes when anything it covers is not yet flushed.

// h40gFlushes is the device flushes the engine has run.
func h40gFlushes(e *Engine) int64 { return e.Stats().Flushes }

// h40gSync syncs f and fails the test unless it ran want device flushes
// (0: none; -1: at least one).
func h40gSync(t *testing.T, e *Engine, f *File, want int64, what string) {
	t.Helper()
	n := h40gFlushes(e)
	if err := f.Sync(); err != nil {
		t.Fatalf("%s: sync: %v", what, err)
	}
	got := h40gFlushes(e) - n
	switch {
	case want < 0 && got == 0:
		t.Fatalf("%s: the sync ran no device flush: what it covers was not flushed yet", what)
	case want >= 0 && got != want:
		t.Fatalf("%s: the sync ran %d device flushes, want %d", what, got, want)
	}
}

// h40gWritten creates name and writes data at its start (not synced).
func h40gWritten(t *testing.T, e *Engine, name string, data []byte) *File {
	t.Helper()
	f := mustCreate(t, e, name)
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	return f
}

// h40gDevice is the emu device an h40g test formats, runs an engine on
// and cuts the power of.
type h40gDevice struct {
	t       *testing.T
	devName string
	cfg     Config
}

// h40gFormat formats a new emu device and opens an engine on it.
func h40gFormat(t *testing.T) (*h40gDevice, *Engine) {
	t.Helper()
	d := &h40gDevice{t: t, devName: emuDevice(t, 16, "1M", ""), cfg: smallConfig()}
	return d, formatOpen(t, d.devName, d.cfg)
}

// cut cuts the device's power under e (the test has closed its
// handles) and returns the engine recovery opens, closed when the test
// ends.
func (d *h40gDevice) cut(e *Engine) *Engine {
	d.t.Helper()
	e = powerCutReopen(d.t, e, d.devName, d.cfg)
	d.t.Cleanup(func() { e.Close() })
	return e
}

// cutKeeps is cut, then fails the test unless name reads want.
func (d *h40gDevice) cutKeeps(e *Engine, name string, want []byte) {
	d.t.Helper()
	e = d.cut(e)
	sameBytes(d.t, name+" after a power cut", readAll(d.t, e, name), want)
}

func TestH40gSecondFsyncWithNothingNewFlushesNothing(t *testing.T) {
	d, e := h40gFormat(t)
	want := bytes.Repeat([]byte("h40g"), 5000)
	f := h40gWritten(t, e, "a", want)
	h40gSync(t, e, f, -1, "the first sync")
	h40gSync(t, e, f, 0, "a second sync with nothing new")
	g, err := e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	h40gSync(t, e, g, 0, "a sync of another handle with nothing new")
	g.Close()
	f.Close()
	d.cutKeeps(e, "a", want)
}

// fio's layout: a deferred create, a grow (durable, so its flush covers
// the create too), then the fsync, which has nothing left to flush.
func TestH40gFsyncAfterGrowOfDeferredCreateFlushesNothing(t *testing.T) {
	d, e := h40gFormat(t)
	f, err := e.OpenFile("t", OCreate|OExcl|ODeferSync)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Grow(4 * BlockSize); err != nil {
		t.Fatal(err)
	}
	h40gSync(t, e, f, 0, "a sync after a durable grow")
	f.Close()
	e = d.cut(e)
	fi, err := e.Stat("t")
	if err != nil || fi.Size != 4*BlockSize {
		t.Fatalf("t after a grow, a sync and a power cut: %+v, %v", fi, err)
	}
}

func TestH40gFsyncFlushesNewData(t *testing.T) {
	d, e := h40gFormat(t)
	f := mustCreate(t, e, "a")
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte{7}, 3*BlockSize+100)
	if _, err := f.WriteAt(want, 0); err != nil {
		t.Fatal(err)
	}
	h40gSync(t, e, f, -1, "a sync of new data")
	// Data written back before the sync (by writeback on its own) is
	// new data all the same.
	want[5] = 8
	if _, err := f.WriteAt(want[:BlockSize], 0); err != nil {
		t.Fatal(err)
	}
	if err := e.wb.FlushFile(context.Background(), f.f.id); err != nil {
		t.Fatal(err)
	}
	h40gSync(t, e, f, -1, "a sync of data written back before it")
	f.Close()
	d.cutKeeps(e, "a", want)
}

// A deferred create or remove of any file is durable from the next
// fsync, whichever file's (ODeferSync, RemoveDeferred): an fsync with
// nothing new of its own still flushes for them.
func TestH40gFsyncFlushesPendingDeferredOperations(t *testing.T) {
	for _, c := range []string{"own create", "other create", "other remove"} {
		t.Run(c, func(t *testing.T) {
			d, e := h40gFormat(t)
			a := h40gWritten(t, e, "a", []byte("a"))
			mustCreate(t, e, "old").Close()
			h40gSync(t, e, a, -1, "a's first sync")
			h40gSync(t, e, a, 0, "a's second sync")
			b, err := e.OpenFile("b", OCreate|OExcl|ODeferSync)
			if err != nil {
				t.Fatal(err)
			}
			switch c {
			case "own create":
				h40gSync(t, e, b, -1, "the sync of a file whose create is deferred")
			case "other create":
				h40gSync(t, e, a, -1, "a sync while another file's create is deferred")
			case "other remove":
				h40gSync(t, e, a, -1, "a sync while another file's create is deferred")
				if err := e.RemoveDeferred("old"); err != nil {
					t.Fatal(err)
				}
				h40gSync(t, e, a, -1, "a sync while another file's remove is deferred")
			}
			h40gSync(t, e, a, 0, "a's sync once all is flushed")
			h40gSync(t, e, b, 0, "b's sync once all is flushed")
			a.Close()
			b.Close()
			e = d.cut(e)
			if !exists(t, e, "b") {
				t.Fatal("b, created (deferred) before a sync returned, lost to a power cut")
			}
			if c == "other remove" && exists(t, e, "old") {
				t.Fatal("old, removed (deferred) before a sync returned, back after a power cut")
			}
			sameBytes(t, "a after a power cut", readAll(t, e, "a"), []byte("a"))
		})
	}
}

// A write-back that failed: the fsync reports it (once per handle), the
// next writes the data again and flushes, and only then does one with
// nothing new skip the flush. A handle that has not seen the failure
// reports it though the data is durable by then.
func TestH40gFsyncAfterAFailedWritebackReportsOnceThenSkips(t *testing.T) {
	d, e := h40gFormat(t)
	f := mustCreate(t, e, "a")
	h40gSync(t, e, f, 0, "a sync after a durable create")
	g, err := e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte("errseq"), 3000)
	if _, err := f.WriteAt(want, 0); err != nil {
		t.Fatal(err)
	}
	emuOf(t, e).FailWrite(1)
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("sync over a failed write-back: %v, want EIO", err)
	}
	h40gSync(t, e, f, -1, "the sync after the failure")
	h40gSync(t, e, f, 0, "a sync with nothing new after that")
	if err := g.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("sync of a handle that has not seen the failure: %v, want EIO", err)
	}
	h40gSync(t, e, g, 0, "that handle's next sync")
	f.Close()
	g.Close()
	d.cutKeeps(e, "a", want)
}

// A flush that failed covers nothing: the next fsync flushes again,
// though nothing new was written.
func TestH40gFsyncAfterAFailedFlushFlushesAgain(t *testing.T) {
	d, e := h40gFormat(t)
	f := h40gWritten(t, e, "a", []byte("one"))
	h40gSync(t, e, f, -1, "the first sync")
	if _, err := f.WriteAt([]byte("two"), 0); err != nil {
		t.Fatal(err)
	}
	emuOf(t, e).FailFlush(1)
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("sync over a failed flush: %v, want EIO", err)
	}
	h40gSync(t, e, f, -1, "the sync after the failed flush")
	h40gSync(t, e, f, 0, "the next")
	f.Close()
	d.cutKeeps(e, "a", []byte("two"))
}

// A failed operation's record that a flush made durable (here the one
// its own failed checkpoint ran) is settled before any fsync is
// acknowledged, one that flushes nothing too: else recovery replays the
// remove the caller was told failed, over the fsync.
func TestH40gSkippedFlushStillSettlesAFailedOperation(t *testing.T) {
	d, e := h40gFormat(t)
	want := bytes.Repeat([]byte{'A'}, 2*BlockSize)
	x := h40gWritten(t, e, "x", want)
	h40gSync(t, e, x, -1, "the first sync")
	armMetaFaults(t, metaWriteLand, metaWriteFail)
	if err := e.Remove("x"); !errors.Is(err, ErrMetaLog) {
		t.Fatalf("remove: %v; want ErrMetaLog", err)
	}
	testHookMetaWrite = nil
	if err := x.Sync(); err != nil {
		t.Fatalf("sync after the failed remove: %v", err)
	}
	x.Close()
	e = d.cut(e)
	if !exists(t, e, "x") {
		t.Fatal("x, whose remove failed before a sync was acknowledged, lost to a power cut")
	}
	sameBytes(t, "x after a power cut", readAll(t, e, "x"), want)
}

// A rename is durable when it returns, and the renamed file's fsync
// with nothing new flushes nothing; a power cut keeps both.
func TestH40gFsyncAfterARenameFlushesNothing(t *testing.T) {
	d, e := h40gFormat(t)
	f, err := e.OpenFile(".tmp", OCreate|OExcl|ODeferSync)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte("renamed")
	if _, err := f.WriteAt(want, 0); err != nil {
		t.Fatal(err)
	}
	h40gSync(t, e, f, -1, "the sync of the written file")
	if err := e.Rename(".tmp", "r"); err != nil {
		t.Fatal(err)
	}
	h40gSync(t, e, f, 0, "a sync after the rename")
	f.Close()
	e = d.cut(e)
	if _, err := e.Stat(".tmp"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf(".tmp after its rename and a power cut: %v", err)
	}
	sameBytes(t, "r after a power cut", readAll(t, e, "r"), want)
}

// An fsync that finds the file's data under a writeback it did not start
// (the background flusher's) waits for it and covers it: the record's
// flush ticket is the file's before that writeback ends. The record's
// completion is held on the completer until the fsync has had time to
// reach its wait (if it has not, the test checks less, never fails).
func TestH40gFsyncCoversAWritebackInFlight(t *testing.T) {
	d, e := h40gFormat(t)
	f := h40gWritten(t, e, "a", []byte("old"))
	h40gSync(t, e, f, -1, "the first sync")
	want := bytes.Repeat([]byte("inflight"), 1000)
	if _, err := f.WriteAt(want, 0); err != nil {
		t.Fatal(err)
	}
	held, release := make(chan struct{}), make(chan struct{})
	id := f.f.id
	testHookMapRecord = func(e *Engine, op *recordOp, mapped bool) {
		if !mapped && op.f != nil && op.f.id == id && op.gc == nil {
			testHookMapRecord = nil
			close(held)
			<-release
		}
	}
	t.Cleanup(func() { testHookMapRecord = nil })
	wbErr := make(chan error, 1)
	go func() { wbErr <- e.wb.FlushFile(context.Background(), id) }()
	within(t, held, "the writeback's record to complete")
	n := h40gFlushes(e)
	syncErr := make(chan error, 1)
	go func() { syncErr <- f.Sync() }()
	select {
	case err := <-syncErr:
		t.Fatalf("the sync returned (%v) while the file's writeback was in flight", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if err := within(t, wbErr, "the writeback"); err != nil {
		t.Fatal(err)
	}
	if err := within(t, syncErr, "the sync"); err != nil {
		t.Fatal(err)
	}
	if h40gFlushes(e) == n {
		t.Fatal("the sync of data written back in flight ran no device flush")
	}
	f.Close()
	d.cutKeeps(e, "a", want)
}
