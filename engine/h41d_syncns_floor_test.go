package engine

import (
	"testing"
)

// TestH41dSyncNamespaceAfterAnOpenWithoutCheckpoint: an Open that
// skips its checkpoint (a namespace that outgrew a metadata half, an
// older zonefold's device: it opens on its log as it stands) may have
// replayed operations a killed daemon left only in the device's volatile
// cache. SyncNamespace has no floor of one flush since Open (File.Sync
// has: syncTicket), so with nothing logged since it runs no flush: safe
// only because the skipped checkpoint's data flush ran before it found
// the checkpoint does not fit. A power cut after the SyncNamespace must
// not bring back a file whose deferred remove it acknowledged.
//
// On a device of format 2: there the deferred remove's record is written
// at once, unflushed, and a kill leaves it in the device's cache. On
// format 3 it is held in memory (packed with later ones) and a kill
// loses it before it reaches the device.
func TestH41dSyncNamespaceAfterAnOpenWithoutCheckpoint(t *testing.T) {
	h41bFormat(t, superMinVersion)
	devName, cfg, written := oversizeNamespaceDevice(t)
	e, err := Open(devName, cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	var victim string
	for name := range written {
		victim = name
		break
	}
	if err := e.RemoveDeferred(victim); err != nil {
		t.Fatalf("set-up: a deferred remove on the log as it stands: %v", err)
	}
	// Killed: the device stays up, its volatile cache holding what it
	// wrote, flushed or not, and the next daemon reads that.
	emu := emuOf(t, e)
	e.crashForTest()
	if e, err = OpenDevice(emu, cfg); err != nil {
		t.Fatalf("open after the kill: %v", err)
	}
	if _, err := e.Stat(victim); err == nil {
		t.Fatal("set-up: the remove was not replayed")
	}
	t.Logf("device flushes by the Open: %d", e.Stats().Flushes)
	flushes := e.Stats().Flushes
	if err := e.SyncNamespace(); err != nil {
		t.Fatalf("sync namespace: %v", err)
	}
	t.Logf("device flushes by the sync: %d", e.Stats().Flushes-flushes)
	e = powerCutReopen(t, e, devName, cfg)
	defer e.Close()
	if _, err := e.Stat(victim); err == nil {
		t.Fatal("a file removed, the remove seen after a restart and SyncNamespace acknowledged, is back after a power cut")
	}
}
