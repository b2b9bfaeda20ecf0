package engine

import (
	"fmt"
	"testing"
)

// A checkpoint switches metadata zones with every other active zone the
// engine plans for in use (its data budget and the GC zone): the switch
// must never hold both metadata zones active at once, or the device
// refuses the new one. (Pebble on 1 MiB zones hit this: a full data budget,
// a GC zone, and a metadata zone filling every few hundred operations.)
func TestCheckpointSwitchAtActiveLimit(t *testing.T) {
	// max_active 5: three data zones, GC's and metadata's.
	e := formatOpen(t, emuDevice(t, 24, "256K", "&max_open=5&max_active=5"), smallConfig())
	defer e.Close()
	for i := range 3 {
		f, err := e.Create(fmt.Sprintf("f%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(make([]byte, 8192), 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	// GC's zone, as a relocation would leave it: open on the device.
	e.placer.mu.Lock()
	gcZone := e.placer.free[len(e.placer.free)-1]
	e.placer.mu.Unlock()
	if err := e.dev.OpenZone(gcZone.idx); err != nil {
		t.Fatal(err)
	}
	if n := activeZones(t, e); n != 5 {
		t.Fatalf("%d active zones; the test wants the device's 5", n)
	}
	for i := range 3 {
		if err := e.checkpoint(); err != nil {
			t.Fatalf("checkpoint %d at the active limit: %v", i, err)
		}
	}
}
