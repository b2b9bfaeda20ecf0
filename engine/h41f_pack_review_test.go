package engine

import "testing"

// Review of the packs of held namespace operations (metaPack): races
// and failure paths h41b's tests do not reach.

// A SyncNamespace that reads the log's ticket while a deferred create is
// held, and finds it no longer held because another caller landed its
// pack in between, must wait for the flush that covers that pack: it
// returned at once on the older ticket, a flush that ended before the
// pack landed, and a power cut then lost the create it acknowledged.
func TestH41fSyncNamespaceRacingALandingWaitsForItsFlush(t *testing.T) {
	h41bFormat(t, superPackVersion) // packs, whatever Format writes
	devName := emuDevice(t, 16, "256K", "")
	e := formatOpen(t, devName, smallConfig())
	// A flush covers everything logged so far.
	createSynced(t, e, "x", []byte("acked")).Close()
	f, err := e.OpenFile("held", OCreate|ODeferSync)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if !e.meta.pending.Load() {
		t.Fatal("the deferred create is not held")
	}
	landed := false
	testHookSyncNamespaceRead = func(e *Engine) {
		if landed {
			return
		}
		landed = true
		// Another caller (an fsync's flushAcked, say) lands the
		// held pack now; its own flush is still to come.
		if err := e.landPending(); err != nil {
			t.Errorf("land the held create: %v", err)
		}
	}
	t.Cleanup(func() { testHookSyncNamespaceRead = nil })
	if err := e.SyncNamespace(); err != nil {
		t.Fatal(err)
	}
	testHookSyncNamespaceRead = nil
	if !landed {
		t.Fatal("the hook did not run")
	}
	e = powerCutReopen(t, e, devName, smallConfig())
	defer e.Close()
	h41bWant(t, "after SyncNamespace and a power cut", h41bHas(t, e, "x", "held"), []string{"x", "held"}, nil)
}
