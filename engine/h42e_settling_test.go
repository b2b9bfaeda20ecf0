package engine

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zonefold/zonefold/zns"
)

// h42eFlushHook is a device whose next Flush, once armed, runs hook
// first: a flush a checkpoint runs, caught while the checkpoint runs.
type h42eFlushHook struct {
	zns.Device
	armed atomic.Bool
	hook  func()
}

func (d *h42eFlushHook) Flush() error {
	if d.armed.CompareAndSwap(true, false) {
		d.hook()
	}
	return d.Device.Flush()
}

// TestH42eAckDuringAFailingCheckpointWaitsForIt: deferred operations
// whose pack failed are in memory only (Engine.unlogged), and no
// acknowledging flush may succeed until a checkpoint holds them. A
// checkpoint clears unlogged as it begins (its snapshot holds them) and
// sets it again if it fails. A SyncNamespace that read owesCheckpoint
// inside that window, lock-free, found nothing owed, settled nothing
// and acknowledged the deferred create; the checkpoint then failed, and
// a power cut lost the create SyncNamespace had called durable. Here
// the window is a settle's checkpoint whose other half refuses its
// reset (a metadata zone gone read-only) and whose own half has no room
// left: the SyncNamespace runs from inside its data flush.
func TestH42eAckDuringAFailingCheckpointWaitsForIt(t *testing.T) {
	oldMin, oldMax := switchBackoffMin, switchBackoffMax
	switchBackoffMin, switchBackoffMax = 0, 0 // every settle tries its checkpoint
	t.Cleanup(func() { switchBackoffMin, switchBackoffMax = oldMin, oldMax })
	h41bFormat(t, superPackVersion)
	devName := emuDevice(t, 16, "1M", "")
	var emu *zns.Emu
	dev := &h42eFlushHook{}
	e := formatOpenThrough(t, devName, smallConfig(), func(m *zns.Emu) zns.Device {
		emu, dev.Device = m, m
		return dev
	})
	x := createSynced(t, e, "x", []byte("acked"))
	h, err := e.OpenFile("held", OCreate|ODeferSync)
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	if err := emu.ZoneReadOnly(e.sb.MetaZones[1-e.meta.active]); err != nil {
		t.Fatal(err)
	}
	// The pack lands unreadable: never replayed, no stray to
	// supersede, its create in memory only (as in
	// TestH42bFailedPackSettleNamesThePack).
	armMetaFaults(t, metaWriteGarbage)
	err = x.Sync()
	testHookMetaWrite = nil
	x.Close()
	if !errors.Is(err, ErrMetaLog) {
		t.Fatalf("fsync landing a pack that fails, with no half to switch to: %v; want ErrMetaLog", err)
	}
	if e.meta.stray.Load() || !e.unlogged.Load() {
		t.Fatalf("stray %v, unlogged %v: want the failed pack's create unlogged, no stray", e.meta.stray.Load(), e.unlogged.Load())
	}

	// A second SyncNamespace while the first one's settle runs its
	// checkpoint (in its data flush, unlogged cleared for it).
	type result struct{ err error }
	got := make(chan result, 1)
	waiting := make(chan struct{}, 1)
	t.Cleanup(func() { testHookSettleWait = nil })
	ran := false
	dev.hook = func() {
		ran = true
		// Set here: the first SyncNamespace's own settle, before its
		// checkpoint, is not the one this waits for.
		testHookSettleWait = func(*Engine) {
			select {
			case waiting <- struct{}{}:
			default:
			}
		}
		go func() { got <- result{e.SyncNamespace()} }()
		// Either it answers without waiting for this checkpoint, or
		// it waits for it (the lock the checkpoint holds).
		select {
		case r := <-got:
			t.Logf("answered: %v", r.err)
			got <- r
		case <-waiting:
			t.Logf("waited")
		case <-time.After(30 * time.Second):
			t.Error("the concurrent SyncNamespace neither answered nor waited for the checkpoint within 30 s")
		}
	}
	dev.armed.Store(true)
	if err := e.SyncNamespace(); !errors.Is(err, ErrMetaLog) {
		t.Fatalf("sync namespace with a deferred create in memory only: %v; want ErrMetaLog", err)
	}
	if !ran {
		t.Fatal("the settle's checkpoint ran no device flush")
	}
	r := within(t, got, "the concurrent SyncNamespace")
	if r.err == nil {
		t.Error("a SyncNamespace during a checkpoint that failed succeeded: it acknowledged a deferred create no record or checkpoint holds")
	}

	e.crashForTest()
	if err := emu.PowerCut(); err != nil {
		t.Fatal(err)
	}
	emu.Close()
	e = reopen(t, devName, smallConfig())
	defer e.Close()
	if has := h41bHas(t, e, "held"); r.err == nil && !has["held"] {
		t.Error("after a power cut the deferred create that SyncNamespace acknowledged is gone")
	}
}
