package engine

import "testing"

// A copying GC pass makes its copies durable with a device flush; that
// flush also covers the reset an earlier pass logged, so the pass frees
// that zone and leaves its own victim's reset logged for the next flush:
// one device flush per pass, not two (a writer waiting for a free zone
// queued behind both). The first pass, with nothing logged before it,
// still frees its own victim (two flushes). A power cut with a reset
// logged and not yet done loses nothing, and Close leaves none pending.
func TestGCCopyingPassCostsOneFlushWhenAResetIsLogged(t *testing.T) {
	devName, cfg, e, h, data := halfGarbageZones(t)
	for i, want := range []struct{ resets, flushes int64 }{{1, 2}, {1, 1}, {1, 1}} {
		st0 := e.Stats()
		moved, err := e.gc.pass(gcBackground)
		if err != nil || !moved {
			t.Fatalf("pass %d: moved %v, %v", i+1, moved, err)
		}
		st := e.Stats().Sub(st0)
		if st.GCWritten == 0 {
			t.Fatalf("pass %d copied nothing: the test wants copying passes", i+1)
		}
		if st.GCResets != want.resets || st.Flushes != want.flushes {
			t.Errorf("pass %d: %d resets, %d device flushes; want %d, %d", i+1, st.GCResets, st.Flushes, want.resets, want.flushes)
		}
	}
	if n := len(e.gc.logged); n != 1 {
		t.Fatalf("%d zones with a logged reset after the passes; want the last victim's", n)
	}
	h.Close()
	e = powerCutReopen(t, e, devName, cfg)
	if got := readAll(t, e, "f"); firstDiff(got, data) >= 0 {
		t.Fatalf("f differs at %d after a power cut with a reset logged", firstDiff(got, data))
	}
	checkValidCounts(t, e)
	if _, err := e.gc.pass(gcBackground); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(e.gc.logged); n != 0 {
		t.Errorf("%d zones with a logged reset left after Close", n)
	}
	checkFsck(t, devName)
	e = reopen(t, devName, cfg)
	if got := readAll(t, e, "f"); firstDiff(got, data) >= 0 {
		t.Fatalf("f differs at %d after Close and reopen", firstDiff(got, data))
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}

// halfGarbageZones formats a 32-zone device with GC off, writes a file of
// 8 zones and overwrites the first half of every zone's worth, so that
// each old zone is left half garbage, worth a copying pass. It returns
// the file's handle and the bytes it must hold.
func halfGarbageZones(t *testing.T) (devName string, cfg Config, e *Engine, h *File, data []byte) {
	t.Helper()
	devName = emuDevice(t, 32, "256K", "")
	cfg = smallConfig()
	cfg.Policy = PolicyMRU
	cfg.GC.Disabled = true
	e = formatOpen(t, devName, cfg)
	const zone = 256 << 10
	data = pattern(8*zone, 3)
	h = createSynced(t, e, "f", data)
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
	return devName, cfg, e, h, data
}
