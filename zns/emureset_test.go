package zns

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// A zone reset is durable when ResetZone returns, and makes nothing else
// durable: as on a zoned drive with a volatile write cache, whose reset
// does not flush the cache's writes to other zones. A power cut after
// it, or a close and reopen, finds every other zone as the last Flush
// left it (an unflushed append to it gone, an unflushed torn one too)
// and the reset zone empty. The emu's reset used to run a Flush, which
// made every unflushed write durable with it, a failed append
// included: the engine's voids after a failed checkpoint record did not
// cover a reset in between (docs/engine.md).
func TestEmuResetDoesNotFlushOtherZones(t *testing.T) {
	for _, how := range []string{"PowerCut", "reopen", "TearLastWrite"} {
		t.Run(how, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "dev")
			e, c := openEmuT(t, path, emuTestGeo)
			a, b := c.buf(c.bs, 1), c.buf(2*c.bs, 2)
			c.append(0, a)
			c.append(1, a)
			c.ok("Flush", e.Flush())
			c.append(2, a) // unflushed, an empty zone
			c.append(0, b) // unflushed, after flushed data: the one TearLastWrite tears
			syncs := e.flushIO.syncs
			c.ok("ResetZone", e.ResetZone(1))
			if got := e.flushIO.syncs - syncs; got != 1 {
				t.Errorf("ResetZone of a flushed zone did %d syncs, want 1 (the table's)", got)
			}
			if !e.Unflushed() {
				t.Error("the appends before ResetZone count as flushed")
			}
			check := func(c *conf, zone0 int64) {
				t.Helper()
				c.expectZone(1, CondEmpty, 0)
				c.expectZone(2, CondEmpty, 0)
				c.expectZeros(c.zone(1).Start, c.bs)
				c.expectZeros(c.zone(2).Start, c.bs)
				got := c.read(c.zone(0).Start, 3*c.bs)
				if !bytes.Equal(got[:c.bs], a) || !bytes.Equal(got[c.bs:c.bs+zone0], b[:zone0]) ||
					!bytes.Equal(got[c.bs+zone0:], make([]byte, 2*c.bs-zone0)) {
					t.Fatalf("zone 0: want the flushed block, %d bytes of the unflushed append, then zeros", zone0)
				}
			}
			zone0 := int64(0)
			switch how {
			case "PowerCut":
				c.ok("PowerCut", e.PowerCut())
			case "TearLastWrite":
				// What the engine's crash tests do to a failed append
				// that a reset of another zone followed.
				c.ok("TearLastWrite", e.TearLastWrite(c.bs))
				zone0 = c.bs
			}
			if how != "reopen" {
				c.expectZone(0, CondClosed, c.bs+zone0)
				check(c, zone0)
			}
			c.ok("Close", e.Close())
			e, c = openEmuT(t, path, "")
			check(c, zone0)
			// The device goes on: the reset zone and the others take
			// appends at their durable write pointers.
			if off := c.append(1, b); off != c.zone(1).Start {
				t.Fatalf("append to the reset zone at +%d", off-c.zone(1).Start)
			}
			if off := c.append(0, a); off != c.zone(0).Start+c.bs+zone0 {
				t.Fatalf("append to zone 0 at +%d", off-c.zone(0).Start)
			}
			c.ok("Close", e.Close())
		})
	}
}

// A reset of a zone the last Flush left empty (its data all unflushed)
// changes nothing durable: it costs no I/O, and a power cut after it
// finds the zone empty all the same.
func TestEmuResetOfAnUnflushedZoneCostsNoIO(t *testing.T) {
	e, c := openEmuT(t, filepath.Join(t.TempDir(), "dev"), emuTestGeo)
	c.append(0, c.buf(c.bs, 1))
	c.ok("Flush", e.Flush())
	c.append(3, c.buf(c.bs, 2))
	io := e.flushIO
	c.ok("ResetZone", e.ResetZone(3))
	if e.flushIO != io {
		t.Fatalf("ResetZone of a zone empty in the flushed table did I/O: %+v, before %+v", e.flushIO, io)
	}
	c.append(3, c.buf(c.bs, 3))
	c.ok("PowerCut", e.PowerCut())
	c.expectZone(3, CondEmpty, 0)
	c.expectZone(0, CondClosed, c.bs)
}

// A power cut during ResetZone's own table write and sync may keep the
// new slot, tear it or lose it: the device reopens with the zone reset or
// as the last Flush left it, and every other zone as the last Flush left
// it either way, though the reset's sync made their unflushed data reach
// the file. Once ResetZone returned, the data written to the zone after
// it never shows under the zone's old write pointer.
func TestEmuCutDuringReset(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base")
	e, c := openEmuT(t, base, cutTestGeo)
	c.append(0, c.buf(2*c.bs, 1))
	c.append(1, c.buf(3*c.bs, 2))
	c.ok("F1", e.Flush())
	f1 := cutModels(c)
	c.append(0, c.buf(c.bs, 3)) // unflushed
	c.append(2, c.buf(c.bs, 4)) // unflushed
	old := readFileT(t, base)
	c.ok("ResetZone", e.ResetZone(1))
	reset := readFileT(t, base)
	c.append(1, c.buf(3*c.bs, 5)) // over the old data, never flushed
	c.append(0, c.buf(c.bs, 6))
	c.ok("Close", e.Close())
	after := readFileT(t, base)
	dataOff := emuDataOff(c.g.Zones)

	resetModels := slices.Clone(f1)
	resetModels[1] = zoneModel{wp: 0, cond: CondEmpty, data: make([]byte, c.g.ZoneCap)}
	for _, img := range []struct {
		name      string
		old, data []byte
		slot      string
		want      []zoneModel
	}{
		{"slot-lost", old, reset, "old", f1},
		{"slot-torn", old, reset, "torn", f1},
		{"slot-landed", old, reset, "new", resetModels},
		{"written-after", reset, after, "new", resetModels},
	} {
		t.Run(img.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "dev")
			b := cutImage{img.slot, "all"}.build(img.old, nil, img.data, dataOff, int(c.bs))
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			e, c := openEmuT(t, path, "")
			got := cutModels(c)
			for i := range got {
				m := img.want[i]
				if got[i].wp != m.wp || !bytes.Equal(got[i].data, m.data) {
					t.Errorf("zone %d: %s wp +%d, want wp +%d with its data", i, got[i].cond, got[i].wp, m.wp)
				}
			}
			c.ok("Close", e.Close())
		})
	}
}
