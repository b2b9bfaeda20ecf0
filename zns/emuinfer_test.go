package zns

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// An emu file whose zone table is lost opens, with InferLostTable, on a
// table inferred from its data, in memory: a zone's write pointer is
// where its data in the file ends (a trailing block written as zeros
// and what a reset zone held before included; a zone finished part way
// shows where its data ends), a zone without is empty, every sequential
// zone is read-only, and the file does not change. Without the option it is refused, and the refusal
// names fsck --copy-to.
func TestEmuInfersALostZoneTable(t *testing.T) {
	path := lostDevice(t)
	e, c := openEmuT(t, path, lostGeo)
	g := e.Geometry()
	a := signed(c.buf(c.bs, 1)) // what shows a device (checkLostTable)
	c.append(0, a)
	c.ok("FinishZone", e.FinishZone(0)) // finished part way
	b := c.buf(2*c.bs, 2)
	clear(b[c.bs:]) // its last block written as zeros
	c.append(1, b)
	c.append(2, c.buf(3*c.bs, 3))
	c.ok("ResetZone", e.ResetZone(2))
	d := c.buf(c.bs, 4)
	c.append(2, d) // what zone 2 held before its reset lies past it
	full := c.buf(g.ZoneCap, 5)
	for off := int64(0); off < g.ZoneCap; off += int64(g.MaxAppend) {
		c.append(3, full[off:off+int64(g.MaxAppend)])
	}
	c.ok("Flush", e.Flush())
	c.ok("Close", e.Close())
	zeroSlots(t, path)
	digest := fileDigest(t, path)

	_, err := Open("emu:"+path+lostGeo, Options{Existing: true})
	if !errors.Is(err, ErrLostZoneTable) || !strings.Contains(err.Error(), "`zonefold fsck DEVICE --copy-to DIR`") {
		t.Fatalf("Open without InferLostTable: %v, want ErrLostZoneTable naming fsck --copy-to", err)
	}
	e2, c2 := openEmuWith(t, path, Options{Existing: true, InferLostTable: true})
	if !e2.InferredZoneTable() {
		t.Error("InferredZoneTable is false on an inferred table")
	}
	for i, want := range []int64{c.bs, 2 * c.bs, 3 * c.bs, g.ZoneCap, 0, 0, 0, 0} {
		if z := c2.zone(i); z.Cond != CondReadOnly || z.WP-z.Start != want {
			t.Errorf("zone %d inferred %s at +%d, want read-only at +%d", i, z.Cond, z.WP-z.Start, want)
		}
	}
	for _, r := range []struct {
		zone int
		want []byte
	}{{0, a}, {1, b}, {2, d}, {3, full}, {4, make([]byte, c.bs)}} {
		if got := c2.read(c2.zone(r.zone).Start, int64(len(r.want))); !bytes.Equal(got, r.want) {
			t.Errorf("zone %d does not read what was written", r.zone)
		}
	}
	_, err = c2.tryAppend(4, c2.buf(c2.bs, 6))
	c2.expectErr("append to an inferred table", err, ErrReadOnly)
	c2.expectErr("reset of an inferred table", e2.ResetZone(1), ErrReadOnly)
	c2.ok("Flush", e2.Flush())
	c2.ok("Close", e2.Close())
	if got := fileDigest(t, path); got != digest {
		t.Error("opening an inferred table changed the file")
	}

	// A device whose table reads opens as always; a blank file is not
	// a lost table, and Existing still refuses it.
	healthy := lostDevice(t, 0)
	e3, _ := openEmuWith(t, healthy, Options{Existing: true, InferLostTable: true})
	if e3.InferredZoneTable() {
		t.Error("a device whose table reads says it was inferred")
	}
	e3.Close()
	blank := sparseFile(t, 9<<20)
	if _, err := Open("emu:"+blank+lostGeo, Options{Existing: true, InferLostTable: true}); err == nil || errors.Is(err, ErrLostZoneTable) {
		t.Errorf("a blank file with InferLostTable: %v, want the refusal of a file with no zone table", err)
	}
}

// openEmuWith opens the emu device on path, of lostGeo, with opts.
func openEmuWith(t *testing.T, path string, opts Options) (*Emu, *conf) {
	t.Helper()
	d, err := Open("emu:"+path+lostGeo, opts)
	if err != nil {
		t.Fatalf("Open %s: %v", path, err)
	}
	return d.(*Emu), newConf(t, d)
}

// With its zone table lost, the geometry comes from the device string
// only: one that needs more bytes than the file holds is named as the
// likely mistake (give the device's own geometry), not only as a
// truncated file, and the refusal does not suggest format=1, which
// erases what the salvage is for.
func TestEmuInferLostTableGeometryTooBig(t *testing.T) {
	path := lostTable(0, 3)(t)
	digest := fileDigest(t, path)
	_, err := Open("emu:"+path+"?zone_size=1M&zones=9&zone_cap=768K&max_append=128K", Options{Existing: true, InferLostTable: true})
	if err == nil || !strings.Contains(err.Error(), "zone table is lost") || !strings.Contains(err.Error(), "zone_size and zones") || strings.Contains(err.Error(), "format=1") {
		t.Errorf("Open with a geometry larger than the file: %v, want a refusal naming the lost table and the geometry given, not format=1", err)
	}
	if got := fileDigest(t, path); got != digest {
		t.Error("the refused Open changed the file")
	}
}
