package engine

import (
	"bytes"
	"errors"
	"fmt"
	"syscall"
	"testing"
)

// wantDeviceError fails the test unless err is the device's EIO, and not
// "no space": a client told ENOSPC would free space and try again, on a
// device that is failing.
func wantDeviceError(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, syscall.EIO) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, ErrNoSpace) {
		t.Fatalf("%s: %v; want the device's EIO, not ENOSPC", what, err)
	}
}

// writersGCOnly opens an engine on zones of 256 KiB with a cache of
// cache bytes (half of it the dirty limit) and no background GC: only
// writers' own passes collect.
func writersGCOnly(t *testing.T, zones int, cache int64) *Engine {
	t.Helper()
	cfg := Config{CacheBytes: cache, DirtyLimit: cache / 2}
	cfg.GC.Disabled = true
	return formatOpen(t, emuDevice(t, zones, "256K", ""), cfg)
}

// A writer admitted on a full device runs a GC pass itself; when the
// device fails that pass (its relocation or its reset's log record gets
// EIO), the writer is told that EIO, wrapped, not that the device is full.
//
// Before, admission dropped the pass's error (collector.reclaimFor) and
// refused the write with ENOSPC.
func TestAdmissionReportsGCDeviceErrorNotENOSPC(t *testing.T) {
	e := writersGCOnly(t, 12, 2<<20)
	defer e.Close()
	const size = 100000
	// Distinct files, fsynced, until the device refuses one: nothing
	// is garbage yet, so GC can free nothing.
	names, open := fillWithFilesKept(t, e, size, true)
	// A file removed (and closed: its data stays while it is open): GC
	// could now make room by collecting its zone.
	open[0].Close()
	if err := e.Remove(names[0]); err != nil {
		t.Fatal(err)
	}
	charge := writeCharge(0, size)
	if d := e.cache.DirtyBytes(); d != 0 || e.roomFor(charge) {
		t.Fatalf("set-up: %d dirty bytes, room for %d bytes %v; want none of either", d, charge, e.roomFor(charge))
	}
	f := mustCreate(t, e, "late")
	emuOf(t, e).FailWrites(true)
	before := e.Stats().GCFailed
	_, err := f.WriteAt(bytes.Repeat([]byte{1}, size), 0)
	if e.Stats().GCFailed == before {
		t.Fatalf("write: %v, and no GC pass failed: the test did not make one", err)
	}
	wantDeviceError(t, "write needing a GC pass the device fails", err)
}

// Writeback on a device that fails every append gives up a zone with
// each failed append (a zone an append failed in takes no more), until
// placement has no zone left and runs a GC pass itself, which the
// device fails too. Every fsync is told the device's EIO, never ENOSPC:
// the device is failing, not full.
//
// Before, writeback dropped the pass's error (collector.reclaim) and
// its fsync reported ENOSPC once the failed appends had used the zones
// up.
func TestWritebackReportsGCDeviceErrorNotENOSPC(t *testing.T) {
	e := writersGCOnly(t, 16, 4<<20)
	defer e.Close()
	// Garbage for GC: a file overwritten, fsynced each time.
	g := mustCreate(t, e, "garbage")
	for i := range 4 {
		if _, err := g.WriteAt(bytes.Repeat([]byte{byte(i)}, 200<<10), 0); err != nil {
			t.Fatal(err)
		}
		if err := g.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	f := mustCreate(t, e, "f")
	if _, err := f.WriteAt(bytes.Repeat([]byte{7}, 64<<10), 0); err != nil {
		t.Fatal(err)
	}
	emuOf(t, e).FailWrites(true)
	before := e.Stats().GCFailed
	for i := 0; e.Stats().GCFailed == before; i++ {
		if i == 100 {
			t.Fatalf("100 fsyncs of a failing device and no GC pass failed (free zones %d)", e.Stats().FreeZones)
		}
		wantDeviceError(t, fmt.Sprintf("fsync %d on a failing device", i), f.Sync())
	}
	wantDeviceError(t, "fsync after a failed GC pass", f.Sync())
}
