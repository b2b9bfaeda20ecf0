package engine

import (
	"errors"
	"strings"
	"testing"
)

// TestH43bSettleNamesPackAndTruncate: as TestH42bFailedPackSettleNamesThePack,
// a pack's record fails with no half to switch to, and then a truncate's
// record fails too: both are in memory only (Engine.unlogged), and the
// settle that fails must name both. It named only the pack: one flag
// (unloggedPack) said what was unlogged, and the pack's hid the truncate.
func TestH43bSettleNamesPackAndTruncate(t *testing.T) {
	e, x := failedPackBesideReadOnlyHalf(t)
	armMetaFaults(t, metaWriteGarbage)
	err := x.Truncate(0) // block aligned: no tail to zero, which would settle first
	testHookMetaWrite = nil
	t.Logf("truncate after the failed pack: %v", err)
	if err == nil {
		t.Fatal("truncate whose record fails, with no half to switch to: no error")
	}
	if n := x.Size(); n != 0 {
		t.Fatalf("x's size after the truncate whose record failed: %d, want 0 (the cut stays in memory, unlogged)", n)
	}
	if e.meta.stray.Load() || e.failedAppend.Load() || !e.unlogged.Load() {
		t.Fatalf("stray %v, failed append %v, unlogged %v: want only unlogged", e.meta.stray.Load(), e.failedAppend.Load(), e.unlogged.Load())
	}
	err = e.SyncNamespace()
	if !errors.Is(err, ErrMetaLog) {
		t.Fatalf("sync namespace with a pack and a truncate in memory only: %v; want ErrMetaLog", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "truncate") || !strings.Contains(msg, "pack") {
		t.Fatalf("the settle's error does not name both the pack and the truncate: %v", err)
	}
}
