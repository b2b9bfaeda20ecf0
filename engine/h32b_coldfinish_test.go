package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zonefold/zonefold/uring"
	"github.com/zonefold/zonefold/zns"
)

// h32bHeldReads is a device whose reads, once armed, are submitted as
// usual but complete only when the test releases them: a device slow to
// answer, not one that blocks its submitter.
type h32bHeldReads struct {
	zns.Device
	armed   atomic.Bool
	held    atomic.Int32
	release chan struct{}
}

func (d *h32bHeldReads) Read(off int64, buf []byte, c uring.Completion) error {
	if !d.armed.Load() {
		return d.Device.Read(off, buf, c)
	}
	d.held.Add(1)
	return d.Device.Read(off, buf, h32bHeldRead{c, d.release})
}

type h32bHeldRead struct {
	c    uring.Completion
	gate chan struct{}
}

func (h h32bHeldRead) Complete(r uring.Result) {
	go func() { <-h.gate; h.c.Complete(r) }()
}

// openWithHeldReads formats an emu device, writes name with data and
// syncs it, and opens the engine again (readahead off) over the device
// wrapped so that reads made while it is armed are held until release.
func openWithHeldReads(t *testing.T, name string, data []byte) (*Engine, *h32bHeldReads) {
	t.Helper()
	devName := emuDevice(t, 16, "4M", "")
	cfg := smallConfig()
	cfg.ReadaheadMax = -1
	e := formatOpen(t, devName, cfg)
	createSynced(t, e, name, data)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	dev := &h32bHeldReads{release: make(chan struct{})}
	raw, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dev.Device = raw
	if e, err = OpenDevice(dev, cfg); err != nil {
		t.Fatal(err)
	}
	return e, dev
}

// heldColdRead opens name on e (openWithHeldReads'), reads its last
// block of bs bytes (at 7*bs: the file's cache state), and begins a cold
// read (StartRead, the daemon's way) of its first bs bytes into p, whose
// device reads dev holds. release lets them complete, once; the test's
// cleanup does it if the test did not.
func heldColdRead(t *testing.T, e *Engine, dev *h32bHeldReads, name string, bs int) (h *File, p []byte, d readDone, release func()) {
	t.Helper()
	var once sync.Once
	release = func() { once.Do(func() { close(dev.release) }) }
	t.Cleanup(release)
	h, err := e.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.ReadAt(make([]byte, bs), 7*int64(bs)); err != nil {
		t.Fatal(err)
	}
	dev.armed.Store(true)
	d = readDone{make(chan readEnd, 1)}
	p = make([]byte, bs)
	if startReads(e, h, [][]byte{p}, []int64{0}, d) != 1 {
		t.Fatal("StartRead did not begin the cold read")
	}
	if dev.held.Load() == 0 {
		t.Fatal("the cold read's device reads were not held")
	}
	return h, p, d, release
}

// TestH32bColdReadLateAfterAbandonedCloseEnds: a cold read StartRead
// began is still in the device when Close stops waiting for it (its
// context ended: a device slow to answer) and closes on. The device
// answers later, when the cache's lock of the file is held, so the
// reaper hands the read to the cold-read finisher. The read must still
// end (its ReadDone told, with the bytes or an error) once the lock is
// free: the daemon's reader, which began it, answers its client only
// then, and its connection (holding the handle's lock until then) ends
// only after that.
//
// Before, the finisher stopped with the background work that Close
// cancels whether or not it had waited for every read, and the read
// sat in its queue for ever: ReadDone was never called.
func TestH32bColdReadLateAfterAbandonedCloseEnds(t *testing.T) {
	const bs = 64 << 10
	e, dev := openWithHeldReads(t, "a", pattern(8*bs, 5))
	h, _, d, release := heldColdRead(t, e, dev, "a", bs)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cerr := e.CloseContext(ctx)
	t.Logf("Close with the read in the device: %v", cerr)
	if cerr == nil {
		t.Fatal("Close returned nil with a read in the device")
	}

	// Hold the cache's lock of the file (a write's last piece holds it
	// while then runs) while the device answers.
	cf := h.f.cached.Load()
	locked, unlock := make(chan struct{}), make(chan struct{})
	wrote := make(chan error, 1)
	go func() {
		_, err := e.cache.WriteThen(context.Background(), *cf, 5*bs, make([]byte, BlockSize), e, func() {
			close(locked)
			<-unlock
		})
		wrote <- err
	}()
	select {
	case <-locked:
	case err := <-wrote:
		t.Fatalf("set-up: the write that holds the file's cache lock failed: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("set-up: the write that holds the file's cache lock did not get it in 20 s")
	}
	late := e.Stats().ColdReadsLate
	release()
	for deadline := time.Now().Add(20 * time.Second); e.Stats().ColdReadsLate == late; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			close(unlock)
			t.Fatal("set-up: the reaper did not hand the read to the finisher in 20 s")
		}
	}
	close(unlock)
	<-wrote
	select {
	case r := <-d.ch:
		t.Logf("the read ended: %+v", r)
		if r.err == nil && !r.again && r.n != bs {
			t.Errorf("the read ended with %d bytes and no error", r.n)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a cold read handed to the finisher after Close stopped waiting for it never ended")
	}
	e.releaseAbandoned()
}

// TestCrashForTestStopsTheColdFinisher: the crash the tests simulate
// (crashForTest, a killed process) ends the cold-read finisher as every
// other goroutine of the engine. Since the finisher stopped only in a
// Close that waited for every operation, each crashed engine's finisher
// ran on and kept the engine reachable: CI's engine tests, whose power
// cuts crash dozens of engines, grew to 22 GiB under -race and were
// killed by the OOM killer (73 finishers alive in the goroutine dump).
func TestCrashForTestStopsTheColdFinisher(t *testing.T) {
	e := formatOpen(t, emuDevice(t, 16, "4M", ""), smallConfig())
	e.crashForTest()
	select {
	case <-e.coldDone:
	default:
		t.Fatal("the cold-read finisher outlived crashForTest")
	}
}
