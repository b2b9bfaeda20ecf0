package engine

import (
	"fmt"
	"testing"
)

// The stats take what the engine writes beside client data apart by
// cause, so that a WAF above 1.0 without GC copies can be accounted for
// (bench gc's lifetimes: 0.035 of headers and 0.008 of metadata per host
// byte): the metadata by the operation that logged it and checkpoints,
// adding up to DevMeta; the headers of records cut in two at a zone's end
// and of GC's records, within DevHeaders.
func TestStatsTakeOverheadApart(t *testing.T) {
	devName := emuDevice(t, 32, "256K", "")
	cfg := smallConfig()
	cfg.GC.Disabled = true
	e := formatOpen(t, devName, cfg)
	defer e.Close()
	st0 := e.Stats()

	// Records of 100 KiB and their header, synced one at a time: the
	// third in each 256 KiB zone finds 48 KiB left and is cut in two.
	h := mustCreate(t, e, "split")
	for i := range 5 {
		if _, err := h.WriteAt(pattern(100<<10, byte(i)), int64(i)*100<<10); err != nil {
			t.Fatal(err)
		}
		if err := h.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	h.Close()
	createSynced(t, e, "big", pattern(6*256<<10, 7)).Close()
	if err := e.Rename("big", "gone"); err != nil {
		t.Fatal(err)
	}
	if err := e.Remove("gone"); err != nil {
		t.Fatal(err)
	}
	empty := len(emptyFullZones(e))
	if empty < 3 {
		t.Fatalf("%d full zones empty after the remove; the test wants several", empty)
	}
	if moved, err := e.gc.pass(gcBackground); err != nil || !moved {
		t.Fatalf("pass: moved %v, %v", moved, err)
	}
	if err := e.checkpoint(); err != nil {
		t.Fatal(err)
	}
	st := e.Stats().Sub(st0)

	for _, c := range []struct {
		what      string
		got, want int64
	}{
		{"creates", st.DevMetaCreates, 2 * BlockSize},
		{"removes", st.DevMetaRemoves, BlockSize},
		{"renames and truncates", st.DevMetaOther, BlockSize},
		{"zone resets (a record each)", st.DevMetaResets, int64(empty) * BlockSize},
		{"checkpoints", min(st.DevCheckpoint, 1), 1},
		{"metadata parts", st.DevCheckpoint + st.DevMetaCreates + st.DevMetaRemoves + st.DevMetaResets + st.DevMetaOther, st.DevMeta},
		{"records split at a zone's end", min(st.RecordsSplit, 2), 2},
		{"headers", st.DevHeaders, st.Appends * BlockSize},
		{"GC headers (nothing copied)", st.GCHeaders, 0},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d; want %d", c.what, c.got, c.want)
		}
	}
	if t.Failed() {
		t.Logf("stats: %s", fmt.Sprintf("%+v", st))
	}
}
