package engine

import (
	"bytes"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/zonefold/zonefold/zns"
)

// heldFlush is a device whose next Flush, once armed, is held back after
// the device has flushed: a flush that is still running though what it
// covers is already decided, as a device's cache flush is while the host
// waits for its completion.
type heldFlush struct {
	zns.Device
	armed   atomic.Bool
	before  bool          // hold it before it flushes the device instead
	flushed chan struct{} // a held flush has flushed the device
	release chan struct{} // lets it return
	calls   atomic.Int64  // device flushes asked for
}

// openHeldFlush formats a small emu device and opens an engine on it
// through a heldFlush (holding before the device flush if before); it
// returns the device's name, for reopening it after a power cut.
func openHeldFlush(t *testing.T, before bool) (string, *zns.Emu, *heldFlush, *Engine) {
	t.Helper()
	return openHeld(t, before, false)
}

// openHeld is openHeldFlush; with cut, the engine's device is a heldCut
// (a zns.CutFlusher) over the heldFlush.
func openHeld(t *testing.T, before, cut bool) (string, *zns.Emu, *heldFlush, *Engine) {
	t.Helper()
	devName := emuDevice(t, 16, "1M", "")
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Format(dev, FormatOptions{}); err != nil {
		t.Fatal(err)
	}
	held := &heldFlush{Device: dev, before: before, flushed: make(chan struct{}), release: make(chan struct{})}
	var engineDev zns.Device = held
	if cut {
		engineDev = &heldCut{heldFlush: held, emu: dev.(*zns.Emu)}
	}
	e, err := OpenDevice(engineDev, smallConfig())
	if err != nil {
		t.Fatal(err)
	}
	return devName, dev.(*zns.Emu), held, e
}

func (d *heldFlush) Flush() error {
	d.calls.Add(1)
	hold := d.armed.CompareAndSwap(true, false)
	if hold && d.before {
		d.flushed <- struct{}{}
		<-d.release
	}
	err := d.Device.Flush()
	if hold && !d.before {
		d.flushed <- struct{}{}
		<-d.release
	}
	return err
}

// heldCut is a heldFlush that is a zns.CutFlusher, as the emu is: a held
// flush is held before the emu's FlushCut (before: it has not taken its
// cut) or after it returned (its cut taken, the device flushed).
type heldCut struct {
	*heldFlush
	emu *zns.Emu
}

func (d *heldCut) FlushCut(cut func()) error {
	d.calls.Add(1)
	hold := d.armed.CompareAndSwap(true, false)
	if hold && d.before {
		d.flushed <- struct{}{}
		<-d.release
	}
	err := d.emu.FlushCut(cut)
	if hold && !d.before {
		d.flushed <- struct{}{}
		<-d.release
	}
	return err
}

// within fails the test if ch yields nothing for a long time: a hang.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("no progress for 30 s waiting for %s", what)
		panic("unreachable")
	}
}

// TestGroupFlushWaitsForAFlushStartedAfterTheData: syncs that arrive
// while a device flush runs share one flush, the next one: the running
// flush started before their data was written and does not cover it.
// Four files are written and synced while a flush is held after it has
// flushed the device; each sync must wait for (and share) the flush after
// it. A power cut as soon as the syncs return must lose none of the four.
// Joining the running flush instead returns the syncs early and loses
// them all (checked by making flushFor take the running flush).
func TestGroupFlushWaitsForAFlushStartedAfterTheData(t *testing.T) {
	testSyncsDuringAHeldFlush(t, false, false)
}

// TestGroupFlushAfterTheCutWaitsForTheNextFlush: on a device that tells
// when its flush takes its cut (zns.CutFlusher, the emu), syncs whose
// data was written after the running flush's cut wait for (and share)
// the next flush, and a power cut as soon as they return loses none of
// them: the same as without the cut.
func TestGroupFlushAfterTheCutWaitsForTheNextFlush(t *testing.T) {
	testSyncsDuringAHeldFlush(t, false, true)
}

// TestGroupFlushBeforeTheCutServesLaterSyncs: on a zns.CutFlusher, syncs
// whose data was written while the running flush had not yet taken its
// cut (held before the emu's FlushCut, which drains the writes in flight
// and copies the zone table) are served by that flush: one device flush
// for all five syncs, and a power cut as soon as they return loses none
// of them. Before flushGroup took the cut into account, each of them
// waited for the running flush to end and then for another one (2
// flushes, 3 of the 4 joined).
func TestGroupFlushBeforeTheCutServesLaterSyncs(t *testing.T) {
	testSyncsDuringAHeldFlush(t, true, true)
}

// testSyncsDuringAHeldFlush holds file 0's sync in its device flush,
// before the device flushes (before) or after, on a zns.CutFlusher (cut)
// or not; writes and syncs n more files meanwhile, releases the flush,
// cuts the power as soon as the syncs return and checks that none lost
// its data, and how many device flushes served them.
func testSyncsDuringAHeldFlush(t *testing.T, before, cut bool) {
	devName, emu, held, e := openHeld(t, before, cut)
	var err error
	const n = 4
	files := make([]*File, n+1)
	for i := range files {
		if files[i], err = e.Create(fmt.Sprintf("f%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	data := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, 3*BlockSize+100) }

	// File 0's sync runs a flush and is held in it, the device flushed.
	if _, err := files[0].WriteAt(data(0), 0); err != nil {
		t.Fatal(err)
	}
	held.armed.Store(true)
	errs := make(chan error, n+1)
	go func() { errs <- files[0].Sync() }()
	within(t, held.flushed, "the first sync's flush")
	stats0 := e.Stats()

	// Files 1..n are written now, and synced: each finds the flush
	// running and waits.
	waiting := make(chan struct{}, n)
	testHookFlushWait = func() { waiting <- struct{}{} }
	defer func() { testHookFlushWait = nil }()
	for i := 1; i <= n; i++ {
		if _, err := files[i].WriteAt(data(i), 0); err != nil {
			t.Fatal(err)
		}
		go func() { errs <- files[i].Sync() }()
		within(t, waiting, fmt.Sprintf("sync %d to wait for the running flush", i))
	}
	testHookFlushWait = nil
	close(held.release)
	for range n + 1 {
		if err := within(t, errs, "the syncs"); err != nil {
			t.Fatal(err)
		}
	}
	// Before anything else can flush: the power goes.
	if err := emu.PowerCut(); err != nil {
		t.Fatal(err)
	}
	d := e.Stats().Sub(stats0)
	e.crashForTest()
	if err := held.Close(); err != nil {
		t.Fatal(err)
	}
	// The held flush is counted as it ends, after stats0 was taken.
	if before && cut {
		if d.Flushes != 1 || d.FlushesJoined != n {
			t.Errorf("%d syncs arriving before a running flush's cut: %d flushes ended since, %d callers joined another's: want the held one alone, joined by all", n, d.Flushes, d.FlushesJoined)
		}
	} else if d.Flushes != 2 || d.FlushesJoined != n-1 {
		t.Errorf("%d syncs arriving during a flush: %d flushes ended since, %d callers joined another's: want the held one and one shared by all", n, d.Flushes, d.FlushesJoined)
	}
	e = reopen(t, devName, smallConfig())
	defer e.Close()
	for i := range files {
		if got := readAll(t, e, fmt.Sprintf("f%d", i)); !bytes.Equal(got, data(i)) {
			t.Errorf("file f%d: %d bytes after the power cut, want its %d synced bytes: a sync returned before a flush covered its data", i, len(got), len(data(i)))
		}
	}
}

// TestGroupFlushFailureReachesItsCallers: a failed device flush is every
// waiting caller's error; a later sync runs a new flush and succeeds.
func TestGroupFlushFailureReachesItsCallers(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	e := formatOpen(t, devName, smallConfig())
	defer e.Close()
	f, err := e.Create("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	emuOf(t, e).FailFlush(1)
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("sync over a failed flush = %v, want EIO", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("sync after the failure: %v", err)
	}
}

// TestSyncNamespaceWaitsForTheFlushInFlight: a directory sync
// (SyncNamespace) after a deferred create, while another caller's flush
// that covers the create is still running, waits for that flush to end
// instead of returning at once. Before group flushes it returned nil at
// once (the other caller had counted the deferred create off before its
// flush), and a power cut then lost the file.
func TestSyncNamespaceWaitsForTheFlushInFlight(t *testing.T) {
	devName, emu, held, e := openHeldFlush(t, true)
	a, err := e.Create("a")
	if err != nil {
		t.Fatal(err)
	}
	x, err := e.OpenFile("x", OCreate|OExcl|ODeferSync)
	if err != nil {
		t.Fatal(err)
	}
	x.Close()
	// a's sync starts a flush (which will cover x's create) and is held
	// before it reaches the device.
	held.armed.Store(true)
	errs := make(chan error, 2)
	go func() { errs <- a.Sync() }()
	within(t, held.flushed, "a's flush")
	waiting := make(chan struct{}, 1)
	testHookFlushWait = func() { waiting <- struct{}{} }
	defer func() { testHookFlushWait = nil }()
	go func() { errs <- e.SyncNamespace() }()
	select {
	case err := <-errs:
		t.Fatalf("SyncNamespace returned (%v) while the flush covering the create had not reached the device", err)
	case <-waiting:
	case <-time.After(30 * time.Second):
		t.Fatal("no progress for 30 s waiting for SyncNamespace")
	}
	testHookFlushWait = nil
	e = releaseThenPowerCut(t, devName, emu, held, e, errs, 2, "the syncs")
	defer e.Close()
	if _, err := e.Stat("x"); err != nil {
		t.Fatalf("a file created before a directory sync returned is gone after a power cut: %v", err)
	}
}

// TestConcurrentCreatesShareADeviceFlush: durable creates that arrive
// while a device flush runs share the next one (group commit), and each
// survives a power cut as soon as it returns. The first create's flush is
// held after it has flushed the device; n more creates are made
// meanwhile. Each must log its record and wait for a flush that started
// after it (the held one was decided before their records landed), and
// they all share it: two device flushes for n+1 creates, not n+1. Before
// creates flushed outside nsMu, the held create kept nsMu across its
// flush, the others could not even log their records, and this test timed
// out waiting for them.
func TestConcurrentCreatesShareADeviceFlush(t *testing.T) {
	devName, emu, held, e := openHeldFlush(t, false)
	const n = 6
	errs := make(chan error, n+1)
	create := func(i int) {
		f, err := e.Create(fmt.Sprintf("c%d", i))
		if err == nil {
			err = f.Close()
		}
		errs <- err
	}
	calls := held.calls.Load()
	held.armed.Store(true)
	go create(0)
	within(t, held.flushed, "the first create's flush")

	waiting := make(chan struct{}, n)
	testHookFlushWait = func() { waiting <- struct{}{} }
	defer func() { testHookFlushWait = nil }()
	for i := 1; i <= n; i++ {
		go create(i)
		within(t, waiting, fmt.Sprintf("create %d to wait for the running flush", i))
	}
	testHookFlushWait = nil
	e = releaseThenPowerCut(t, devName, emu, held, e, errs, n+1, "the creates")
	defer e.Close()
	if got := held.calls.Load() - calls; got != 2 {
		t.Errorf("%d concurrent durable creates asked the device for %d flushes: want 2 (the held one and one they share)", n+1, got)
	}
	for i := range n + 1 {
		if _, err := e.Stat(fmt.Sprintf("c%d", i)); err != nil {
			t.Errorf("create c%d returned, then a power cut: %v", i, err)
		}
	}
}

// TestCreateOfAFileWhoseCreateIsFlushingWaitsForIt: a durable create
// that finds the file already there (another create logged it and is
// still waiting for its flush) returns only once that create is durable,
// so a power cut as soon as it returns keeps the file.
func TestCreateOfAFileWhoseCreateIsFlushingWaitsForIt(t *testing.T) {
	devName, emu, held, e := openHeldFlush(t, true) // held before it flushes
	held.armed.Store(true)
	errs := make(chan error, 2)
	create := func() {
		f, err := e.OpenFile("x", OCreate)
		if err == nil {
			err = f.Close()
		}
		errs <- err
	}
	go create()
	within(t, held.flushed, "the first create's flush")
	waiting := make(chan struct{}, 1)
	testHookFlushWait = func() { waiting <- struct{}{} }
	defer func() { testHookFlushWait = nil }()
	go create()
	within(t, waiting, "the second create to wait for the first one's flush")
	testHookFlushWait = nil
	e = releaseThenPowerCut(t, devName, emu, held, e, errs, 2, "the creates")
	defer e.Close()
	if _, err := e.Stat("x"); err != nil {
		t.Errorf("both creates of x returned, then a power cut: %v", err)
	}
}

// releaseThenPowerCut lets the held flush return, waits for n results on
// errs (each must be nil), cuts the power before anything else can flush,
// stops e as a killed process stops and returns the engine recovered from
// what survived.
func releaseThenPowerCut(t *testing.T, devName string, emu *zns.Emu, held *heldFlush, e *Engine, errs <-chan error, n int, what string) *Engine {
	t.Helper()
	close(held.release)
	for range n {
		if err := within(t, errs, what); err != nil {
			t.Fatal(err)
		}
	}
	if err := emu.PowerCut(); err != nil {
		t.Fatal(err)
	}
	e.crashForTest()
	if err := held.Close(); err != nil {
		t.Fatal(err)
	}
	return reopen(t, devName, smallConfig())
}
