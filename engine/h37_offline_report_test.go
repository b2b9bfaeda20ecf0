package engine

import (
	"fmt"
	"strings"
	"testing"
)

// TestNoSpaceReportSaysWhatIsOffline: an ENOSPC with a zone offline
// says how much of the capacity it names is offline, and the data lost
// there: the report gave the data zones' whole capacity beside the
// valid bytes, and a user with a zone gone offline saw a device far
// from full refuse a write, with nothing to say why.
func TestNoSpaceReportSaysWhatIsOffline(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	cfg.GC.Disabled = true
	e := formatOpen(t, devName, cfg)
	createSynced(t, e, "a", pattern(3<<19, 7)).Close() // 1.5 MiB: fills its first zone
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	// Nothing cached, so that what a maps in the zone is lost, not
	// written again from the cache.
	e = reopen(t, devName, cfg)
	defer e.Close()
	z := e.zoneAt(devOf(t, e, "a", 0).dev)
	if z.state.Load() != zoneFull {
		t.Fatalf("set-up: zone %d is in state %d, want full", z.idx, z.state.Load())
	}
	lost := z.valid.Load()
	if lost == 0 {
		t.Fatalf("set-up: zone %d maps nothing", z.idx)
	}
	if err := emuOf(t, e).ZoneOffline(z.idx); err != nil {
		t.Fatal(err)
	}
	h34cWaitOffline(t, e, z)
	b, err := writeUntilNoSpace(t, e, "b")
	want := fmt.Sprintf("offline zones 1 (%d bytes of the capacity, %d bytes of files lost there)", z.cap, lost)
	if !strings.Contains(err.Error(), want) {
		t.Errorf("ENOSPC %q does not say %q", err, want)
	}
	if err := b.Sync(); err != nil {
		t.Fatalf("fsync of what was admitted: %v", err)
	}
}
