package engine

import "testing"

// A relocation flush that fails while an earlier victim's reset is logged
// (not yet freed): later passes, a power cut and a reopen keep every byte,
// the valid counts and fsck clean (review of the one-flush GC pass).
func TestGCFlushEIOWithAResetLogged(t *testing.T) {
	devName := emuDevice(t, 32, "256K", "")
	cfg := smallConfig()
	cfg.Policy = PolicyMRU
	cfg.GC.Disabled = true
	e := formatOpen(t, devName, cfg)
	const zone = 256 << 10
	data := pattern(8*zone, 3)
	h := createSynced(t, e, "f", data)
	for i := 0; i < 8; i++ {
		p := pattern(zone/2, byte(10+i))
		if _, err := h.WriteAt(p, int64(i)*zone); err != nil {
			t.Fatal(err)
		}
		copy(data[i*zone:], p)
	}
	if err := h.Sync(); err != nil {
		t.Fatal(err)
	}
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
