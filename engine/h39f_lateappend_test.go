package engine

import (
	"bytes"
	"context"
	"sync/atomic"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/uring"
	"github.com/zonefold/zonefold/zns"
)

// h39fHoldDev holds back the completion of the next append after hold is
// set, until the test hands it on: a completion that arrives late, after
// a device flush (completions come in any order; a write that fails may
// take longest).
type h39fHoldDev struct {
	*zns.Emu
	hold atomic.Bool
	held chan h39fHeld
}

type h39fHeld struct {
	c   zns.AppendCompletion
	off int64
	err error
}

type h39fHolding struct {
	d *h39fHoldDev
	c zns.AppendCompletion
}

func (h *h39fHolding) Appended(off int64, err error) { h.d.held <- h39fHeld{h.c, off, err} }

func (d *h39fHoldDev) wrap(c zns.AppendCompletion) zns.AppendCompletion {
	if d.hold.CompareAndSwap(true, false) {
		return &h39fHolding{d, c}
	}
	return c
}

func (d *h39fHoldDev) Append(zone int, bufs [][]byte, c zns.AppendCompletion) error {
	return d.Emu.Append(zone, bufs, d.wrap(c))
}

func (d *h39fHoldDev) AppendSums(zone int, bufs [][]byte, sums []uint32, c zns.AppendCompletion) error {
	return d.Emu.AppendSums(zone, bufs, sums, d.wrap(c))
}

// h39fLateFailure formats an emu device, fsyncs 64 KiB to "a", then has
// the host file refuse whole the append of b's next record (emu on a
// file: its file system full), in a's zone, and holds its completion
// back while between runs (a flush there makes the zone's write pointer
// past the never-written range durable: the flush's settle saw no
// failed append, so no void and no checkpoint came before it). Then the
// failure reaches the engine, beforeCut (if not nil) runs, and the power
// is cut. It returns a's bytes as acknowledged and the reopened engine,
// or Open's error.
func h39fLateFailure(t *testing.T, between func(e *Engine, a *File, want []byte) []byte, beforeCut func(e *Engine)) (*Engine, []byte, error) {
	t.Helper()
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	cfg.OpenZones = 1 // b appends where a did
	var d *h39fHoldDev
	e := formatOpenThrough(t, devName, cfg, func(emu *zns.Emu) zns.Device {
		d = &h39fHoldDev{Emu: emu, held: make(chan h39fHeld, 1)}
		return d
	})
	want := pattern(64<<10, 1)
	a := createSynced(t, e, "a", want)
	b := mustCreate(t, e, "b")
	if _, err := b.WriteAt(pattern(64<<10, 2), 0); err != nil {
		t.Fatal(err)
	}
	z := a.f.mru.Load()
	used := z.alloc.Load()

	// The host refuses b's record from its header on.
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	limit := unix.Rlimit{Cur: uint64(d.Emu.FileOffset(z.start + used)), Max: old.Max}
	d.hold.Store(true)
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &limit); err != nil {
		t.Fatal(err)
	}
	werr := make(chan error, 1)
	go func() { werr <- e.wb.FlushFile(context.Background(), b.f.id) }()
	h := <-d.held
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	if h.err == nil {
		t.Fatal("set-up: the append the host refused succeeded")
	}
	if e.failedAppend.Load() {
		t.Fatal("set-up: the engine knows of the failed append before its completion")
	}
	want = between(e, a, want)
	h.c.Appended(h.off, h.err)
	if err := <-werr; err == nil {
		t.Fatal("set-up: b's writeback the host refused succeeded")
	}
	if beforeCut != nil {
		beforeCut(e)
	}
	e.crashForTest()
	emu := d.Emu
	if err := emu.PowerCut(); err != nil {
		t.Fatal(err)
	}
	emu.Close()
	e2, err := Open(devName, cfg)
	return e2, want, err
}

// TestH39fFailedAppendFlushedBeforeItsFailureIsNotDamage: an append the
// host file refuses whole moved its zone's write pointer over blocks it
// never wrote (zns.Emu: a write the file did not take still moves it),
// and its failure reaches the engine only after a device flush that
// began after it was submitted (here a create's; completions come in any
// order); power is cut before anything else is flushed (h39fLateFailure).
// That is a crash, not damage: nothing was acknowledged that the failed
// record held, and the create was. Open must serve a and c (it may
// report the range as possible damage: no byte tells it from damage to
// the zone's last record).
//
// Since damagedHeader, Open refused it: a zero header below the write
// pointer of a zone not full with no void above the checkpoint was taken
// as media damage, so such a crash left the file system unopenable
// without --accept-damaged-records.
func TestH39fFailedAppendFlushedBeforeItsFailureIsNotDamage(t *testing.T) {
	e, want, err := h39fLateFailure(t, func(e *Engine, a *File, want []byte) []byte {
		// A create, acknowledged: its flush makes the zone's write
		// pointer past the failed append durable.
		mustCreate(t, e, "c").Close()
		return want
	}, nil)
	if err != nil {
		t.Fatalf("Open after a crash that left a failed append's range under a flushed write pointer: %v", err)
	}
	defer e.Close()
	if got := readAll(t, e, "a"); !bytes.Equal(got, want) {
		t.Fatal("a, fsynced, differs after the crash")
	}
	if _, err := e.Open("c"); err != nil {
		t.Fatalf("c, whose create was acknowledged: %v", err)
	}
	t.Logf("reported: %q", e.damage)
}

// h39fFsyncMore is an h39fLateFailure between that writes 32 KiB more
// of a, after the failed append (its record lands later in the zone),
// and fsyncs it; it returns a's bytes as acknowledged.
func h39fFsyncMore(t *testing.T) func(e *Engine, a *File, want []byte) []byte {
	return func(e *Engine, a *File, want []byte) []byte {
		t.Helper()
		more := pattern(32<<10, 3)
		if _, err := a.WriteAt(more, 64<<10); err != nil {
			t.Fatal(err)
		}
		if err := a.Sync(); err != nil {
			t.Fatalf("set-up: a's fsync: %v", err)
		}
		return append(want, more...)
	}
}

// TestH39fFsyncAfterALateFailedAppendSurvives: as above, but what the
// flush acknowledges is an fsync of a whose record was appended in the
// zone after the failed one (submitted before the engine knew of the
// failure). Open must serve a's fsynced bytes: ending the zone's log at
// the failed range (as before damagedHeader) lost them, refusing Open
// (damagedHeader) made the crash unopenable.
func TestH39fFsyncAfterALateFailedAppendSurvives(t *testing.T) {
	e, want, err := h39fLateFailure(t, h39fFsyncMore(t), nil)
	if err != nil {
		t.Fatalf("Open after a crash that left a failed append's range under a flushed write pointer: %v", err)
	}
	defer e.Close()
	if got := readAll(t, e, "a"); !bytes.Equal(got, want) {
		t.Fatalf("a, fsynced at %d bytes, reads %d bytes (or other bytes) after the crash", len(want), len(got))
	}
	t.Logf("reported: %q", e.damage)
}

// h39fBadRead fails (EIO) every read that overlaps device bytes
// [lo, hi): bad media.
type h39fBadRead struct {
	*zns.Emu
	lo, hi int64
}

type h39fEIO struct{ c uring.Completion }

func (x h39fEIO) Complete(res uring.Result) {
	if res.Res >= 0 {
		res.Res = -int32(syscall.EIO)
	}
	x.c.Complete(res)
}

func (d *h39fBadRead) Read(off int64, buf []byte, c uring.Completion) error {
	if off < d.hi && off+int64(len(buf)) > d.lo {
		c = h39fEIO{c}
	}
	return d.Emu.Read(off, buf, c)
}

// TestH39fCutLogReportSurvivesABadBlockAfterIt: the record of a remove
// logged after the newest checkpoint is zeroed at rest and the block
// after it fails to read (bad media). The walk of the log ends at the
// zeroed record (a design limit) and Open used to go on; checkCutLog,
// which only reports the cut, looks on past it for whole records and
// failed Open on the bad block's EIO. It must report, not refuse.
func TestH39fCutLogReportSurvivesABadBlockAfterIt(t *testing.T) {
	devName, _, _, devAt := zeroedRemoveImage(t)
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	bad := &h39fBadRead{Emu: dev.(*zns.Emu), lo: devAt + BlockSize, hi: devAt + 2*BlockSize}
	e, err := OpenDevice(bad, smallConfig())
	if err != nil {
		t.Fatalf("Open with the log cut short at a zeroed record and a bad block after it: %v", err)
	}
	defer e.Close()
	if len(e.damage) == 0 {
		t.Fatal("the cut log is not reported")
	}
	t.Logf("reported: %q", e.damage)
}
