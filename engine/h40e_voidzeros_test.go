package engine

import (
	"bytes"
	"context"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/zns"
)

// TestH40eFsyncAfterALateFailedAppendSurvivesItsVoid: as
// TestH39fFsyncAfterALateFailedAppendSurvives (an append the host file
// refuses, whose failure reaches the engine only after a flush that
// acknowledged a's fsync of a record appended after it in the zone), but
// the power is cut only after the engine voided the failed record in the
// log: the checkpoint that settles it fails at its write, after the data
// flush that made the void durable. The failed range reads as zeros (the
// emu zeroes it), and beside a void recovery ended the zone's log at a
// block of zeros, silently: a's fsynced record after it was lost, with
// nothing reported. Without the void (the crash a moment earlier) Open
// goes on at a's record and serves it.
func TestH40eFsyncAfterALateFailedAppendSurvivesItsVoid(t *testing.T) {
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
	// a's next record lands after the failed range; its fsync is
	// acknowledged by a flush whose settle sees no failed append.
	more := pattern(32<<10, 3)
	if _, err := a.WriteAt(more, 64<<10); err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(); err != nil {
		t.Fatalf("set-up: a's fsync: %v", err)
	}
	want = append(want, more...)
	h.c.Appended(h.off, h.err)
	if err := <-werr; err == nil {
		t.Fatal("set-up: b's writeback the host refused succeeded")
	}
	// The settle: the void is logged and flushed, the checkpoint's
	// write fails.
	failNextCheckpointWrite(t)
	if err := e.SyncNamespace(); err == nil {
		t.Fatal("set-up: the settling checkpoint's write did not fail")
	}
	e.crashForTest()
	emu := d.Emu
	if err := emu.PowerCut(); err != nil {
		t.Fatal(err)
	}
	emu.Close()

	voided := 0
	testHookRecoverVoids = func(n int) { voided = n }
	t.Cleanup(func() { testHookRecoverVoids = nil })
	e2, err := Open(devName, cfg)
	if err != nil {
		t.Fatalf("Open after a crash that left a voided failed append's range under a flushed write pointer: %v", err)
	}
	defer e2.Close()
	if voided == 0 {
		t.Fatal("set-up: recovery found no void above the checkpoint")
	}
	if got := readAll(t, e2, "a"); !bytes.Equal(got, want) {
		t.Fatalf("a, fsynced at %d bytes, reads %d bytes (or other bytes) after the crash; reported: %q", len(want), len(got), e2.damage)
	}
	t.Logf("reported: %q", e2.damage)
}
