package engine

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// Held operations (a deferred create with data, a deferred remove), then
// a fault on the metadata write that carries them (a durable remove's
// record, or an fsync's landing) and on the switch after it, with the
// other half taking its reset or refusing it; then fsyncs. Whatever an
// fsync acknowledged survives a power cut, and a remove that failed with
// ErrMetaLog is not replayed after an ack. Passes on the branch: the
// review's map of the failure paths of a pack's write.
func TestH41fFaultOnTheRecordCarryingHeldOps(t *testing.T) {
	h41bFormat(t, superPackVersion) // packs, whatever Format writes
	oldMin, oldMax := switchBackoffMin, switchBackoffMax
	switchBackoffMin, switchBackoffMax = 0, 0
	t.Cleanup(func() { switchBackoffMin, switchBackoffMax = oldMin, oldMax })
	type tc struct {
		faults  []metaFault
		carrier string // "remove", "fsync", "reset-readonly"
		ro      bool
	}
	var cases []tc
	fs := []metaFault{metaWriteFail, metaWriteLand, metaWriteGarbage}
	for _, a := range fs {
		for _, b := range []metaFault{metaWriteOK, metaWriteFail, metaWriteLand} {
			for _, c := range []string{"remove", "fsync"} {
				for _, ro := range []bool{false, true} {
					cases = append(cases, tc{[]metaFault{a, b}, c, ro})
				}
			}
		}
	}
	for i, c := range cases {
		t.Run(fmt.Sprintf("%d-%v-%s-ro%v", i, c.faults, c.carrier, c.ro), func(t *testing.T) {
			devName := emuDevice(t, 16, "1M", "")
			cfg := smallConfig()
			e := formatOpen(t, devName, cfg)
			x := createSynced(t, e, "x", []byte("acked x"))
			createSynced(t, e, "r", []byte("r")).Close()
			createSynced(t, e, "gone", []byte("g")).Close()
			h, err := e.OpenFile("held", OCreate|ODeferSync)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := h.WriteAt([]byte("held data"), 0); err != nil {
				t.Fatal(err)
			}
			if err := e.RemoveDeferred("gone"); err != nil {
				t.Fatal(err)
			}
			if c.ro {
				if err := emuOf(t, e).ZoneReadOnly(e.sb.MetaZones[1-e.meta.active]); err != nil {
					t.Fatal(err)
				}
			}
			armMetaFaults(t, c.faults...)
			var rmErr error
			switch c.carrier {
			case "remove":
				rmErr = e.Remove("r")
				t.Logf("remove r: %v", rmErr)
			case "fsync":
				t.Logf("fsync x: %v", x.Sync())
			}
			testHookMetaWrite = nil
			acked := false
			for i := range 3 {
				if _, err := x.WriteAt(bytes.Repeat([]byte{byte('a' + i)}, 100), 0); err != nil {
					t.Fatal(err)
				}
				err := h.Sync()
				t.Logf("fsync held %d: %v", i, err)
				if err == nil {
					acked = true
				}
			}
			ackedX := x.Sync() == nil
			want := readAll(t, e, "x")
			h.Close()
			x.Close()
			e = powerCutReopen(t, e, devName, cfg)
			defer e.Close()
			got := h41bHas(t, e, "held", "gone", "r", "x")
			t.Logf("after cut: %v acked=%v ackedX=%v", got, acked, ackedX)
			if acked {
				h41bWant(t, "after an acked fsync of held", got, []string{"held", "x"}, []string{"gone"})
				if got["held"] {
					sameBytes(t, "held", readAll(t, e, "held"), []byte("held data"))
				}
			}
			if ackedX && got["x"] {
				sameBytes(t, "x", readAll(t, e, "x"), want)
			}
			if c.carrier == "remove" && rmErr != nil && errors.Is(rmErr, ErrMetaLog) && (acked || ackedX) && !got["r"] {
				t.Errorf("r, whose remove failed, is gone after an ack")
			}
			if c.carrier == "remove" && rmErr == nil && got["r"] {
				t.Errorf("r, whose remove was acknowledged, is back")
			}
		})
	}
}

// Thousands of deferred creates and removes, some durable renames, and a
// SyncNamespace now and then fill a one-zone metadata half again and
// again (switches while operations are held, and a pack that no longer
// fits, landed first); after a power cut the namespace is exactly what
// the last SyncNamespace acknowledged. Passes on the branch.
func TestH41fHalfSwitchesWhileHeld(t *testing.T) {
	h41bFormat(t, superPackVersion) // packs, whatever Format writes
	devName := emuDevice(t, 16, "256K", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	t.Logf("half cap %d, group %d", e.sb.metaHalfCap(), e.sb.MetaGroup)
	live := map[string]bool{}
	acked := map[string]bool{}
	s0 := e.Stats()
	for i := range 5000 {
		name := fmt.Sprintf("f%d", i)
		f, err := e.OpenFile(name, OCreate|ODeferSync)
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		f.Close()
		live[name] = true
		if old := fmt.Sprintf("f%d", i-3); i%7 == 3 && live[old] {
			if err := e.RemoveDeferred(old); err != nil {
				t.Fatal(err)
			}
			delete(live, old)
		}
		if i%50 == 49 {
			if err := e.Rename(name, name+"r"); err != nil {
				t.Fatal(err)
			}
			delete(live, name)
			live[name+"r"] = true
		}
		if i%23 == 0 {
			if err := e.SyncNamespace(); err != nil {
				t.Fatal(err)
			}
			acked = map[string]bool{}
			for k := range live {
				acked[k] = true
			}
		}
	}
	if err := e.SyncNamespace(); err != nil {
		t.Fatal(err)
	}
	acked = map[string]bool{}
	for k := range live {
		acked[k] = true
	}
	if d := e.Stats().Sub(s0); d.Checkpoints < 3 {
		t.Fatalf("%d half switches, want several", d.Checkpoints)
	}
	e = powerCutReopen(t, e, devName, cfg)
	defer e.Close()
	n := 0
	have := map[string]bool{}
	for _, fi := range e.List() {
		n++
		have[fi.Name] = true
		if !acked[fi.Name] {
			t.Errorf("%s exists, not acked", fi.Name)
		}
	}
	for k := range acked {
		if !have[k] {
			t.Errorf("%s acked, missing", k)
		}
	}
	if n != len(acked) {
		t.Errorf("%d files after the cut, %d acked", n, len(acked))
	}
}
