package engine

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestH42bFailedPackSettleNamesThePack: a pack whose record fails (it
// lands unreadable, so recovery never replays it and the stray needs no
// superseding) while the other metadata half refuses its reset leaves
// its deferred operations in memory only (Engine.unlogged), and every
// acknowledging flush fails until a checkpoint holds them. The error
// names them, not a truncate's size: that message was the only one for
// unlogged, before packs could set it too.
func TestH42bFailedPackSettleNamesThePack(t *testing.T) {
	e, _ := failedPackBesideReadOnlyHalf(t)
	err := e.SyncNamespace()
	if !errors.Is(err, ErrMetaLog) {
		t.Fatalf("sync namespace with deferred operations in memory only: %v; want ErrMetaLog", err)
	}
	if msg := err.Error(); strings.Contains(msg, "truncate") || !strings.Contains(msg, "pack") {
		t.Fatalf("the settle's error names the wrong cause: %v", err)
	}
}

// failedPackBesideReadOnlyHalf is heldPackBesideReadOnlyHalf whose held
// pack then failed (its record landed unreadable, so it needs no
// superseding): its operations are in memory only (Engine.unlogged).
func failedPackBesideReadOnlyHalf(t *testing.T) (*Engine, *File) {
	t.Helper()
	e, x := heldPackBesideReadOnlyHalf(t)
	armMetaFaults(t, metaWriteGarbage)
	err := x.Sync() // lands the pack, which fails
	testHookMetaWrite = nil
	if !errors.Is(err, ErrMetaLog) {
		t.Fatalf("fsync landing a pack that fails, with no half to switch to: %v; want ErrMetaLog", err)
	}
	if e.meta.stray.Load() || !e.unlogged.Load() {
		t.Fatalf("stray %v, unlogged %v: want the failed pack's operations unlogged, no stray", e.meta.stray.Load(), e.unlogged.Load())
	}
	return e, x
}

// heldPackBesideReadOnlyHalf opens a format-3 device holding a synced
// file x (returned open) and a deferred create held for a pack, whose
// other metadata half refuses its reset, with metadata-log switches
// backed off for an hour: the next pack that fails has no half to
// switch to. The engine and x close at the test's end.
func heldPackBesideReadOnlyHalf(t *testing.T) (*Engine, *File) {
	t.Helper()
	oldMin, oldMax := switchBackoffMin, switchBackoffMax
	switchBackoffMin, switchBackoffMax = time.Hour, time.Hour
	t.Cleanup(func() { switchBackoffMin, switchBackoffMax = oldMin, oldMax })
	h41bFormat(t, superPackVersion)
	devName := emuDevice(t, 16, "1M", "")
	e := formatOpen(t, devName, smallConfig())
	t.Cleanup(func() { e.Close() })
	x := createSynced(t, e, "x", []byte("acked"))
	t.Cleanup(func() { x.Close() })
	h, err := e.OpenFile("held", OCreate|ODeferSync)
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	if err := emuOf(t, e).ZoneReadOnly(e.sb.MetaZones[1-e.meta.active]); err != nil {
		t.Fatal(err)
	}
	return e, x
}
