package engine

import "testing"

// A relocation flush that fails while an earlier victim's reset is logged
// (not yet freed): later passes, a power cut and a reopen keep every byte,
// the valid counts and fsck clean (review of the one-flush GC pass).
func TestGCFlushEIOWithAResetLogged(t *testing.T) {
	devName, cfg, e, h, data := halfGarbageZones(t)
	if _, err := e.gc.pass(gcBackground); err != nil {
		t.Fatal(err)
	}
	emuOf(t, e).FailFlush(1)
	moved, err := e.gc.pass(gcBackground)
	t.Logf("pass with EIO: %v %v logged %d", moved, err, len(e.gc.logged))
	for i := 0; i < 3; i++ {
		moved, err = e.gc.pass(gcBackground)
		t.Logf("pass: %v %v logged %d", moved, err, len(e.gc.logged))
	}
	checkValidCounts(t, e)
	h.Close()
	e = powerCutReopen(t, e, devName, cfg)
	if got := readAll(t, e, "f"); firstDiff(got, data) >= 0 {
		t.Fatalf("f differs at %d", firstDiff(got, data))
	}
	checkValidCounts(t, e)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	checkFsck(t, devName)
}
