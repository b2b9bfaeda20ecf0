package engine

import "testing"

// The first copying pass (nothing logged before it) should copy one
// victim's worth, as before lsm30: it frees one zone either way.
func TestRev37FirstPassCopiesOneVictim(t *testing.T) {
	devName := emuDevice(t, 32, "256K", "")
	cfg := smallConfig()
	cfg.Policy = PolicyMRU
	cfg.GC.Disabled = true
	e := formatOpen(t, devName, cfg)
	const zone = 256 << 10
	h := createSynced(t, e, "f", pattern(8*zone, 3))
	for i := 0; i < 8; i++ {
		if _, err := h.WriteAt(pattern(zone/2, byte(10+i)), int64(i)*zone); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Sync(); err != nil {
		t.Fatal(err)
	}
	var w [2]int64
	for i := range w {
		st0 := e.Stats()
		if _, err := e.gc.pass(gcBackground); err != nil {
			t.Fatal(err)
		}
		st := e.Stats().Sub(st0)
		w[i] = st.GCWritten
		t.Logf("pass %d: written %d resets %d flushes %d", i+1, st.GCWritten, st.GCResets, st.Flushes)
	}
	if w[0] > w[1]*3/2 {
		t.Errorf("first pass copied %d bytes, a steady pass %d: it copied a second victim to free one zone", w[0], w[1])
	}
	h.Close()
	e.Close()
}

func TestRev37FlushEIOWithPending(t *testing.T) {
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
