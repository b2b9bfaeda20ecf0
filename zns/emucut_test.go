package zns

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// cutTestGeo is small: every cut image is a whole file.
const cutTestGeo = "?zone_size=128K&zones=8&max_append=64K"

// zoneModel is what a zone reads as in one durable state: its write
// pointer (relative) and condition, and its whole capacity as a Read
// returns it (zeros past the data).
type zoneModel struct {
	wp   int64
	cond Cond
	data []byte
}

// cutModels reads every sequential zone of the device as it is now.
func cutModels(c *conf) []zoneModel {
	c.t.Helper()
	ms := make([]zoneModel, min(c.g.Zones, 8)) // the zones the scenarios use
	for i := range ms {
		z := c.zone(i)
		ms[i] = zoneModel{wp: z.WP - z.Start, cond: z.Cond, data: bytes.Clone(c.read(z.Start, c.g.ZoneCap))}
	}
	return ms
}

// cutScenario is what happens between the Flush that the cut cannot
// touch (F1) and the Flush it interrupts (F2).
type cutScenario struct {
	name   string
	params string
	// between runs after F1; it may run a Flush that fails (and
	// return true: the images then include that Flush's slot).
	between func(t *testing.T, e *Emu, c *conf) (failedFlush bool)
	// reset: zones reset after F1 (nothing below their write pointer
	// is durable any more).
	reset []int
	syncs int // what F2 must cost
	// early, if set, runs before the data F1 claims, followed by a
	// Flush (F0): what it writes predates F1's checksums.
	early func(t *testing.T, e *Emu, c *conf)
	// durable, if set, runs after F1 and before between; what it does
	// is durable when it returns (zone resets: ResetZone writes and
	// syncs the table with the zone emptied), so the cut's images start
	// from the file as it leaves it.
	durable func(t *testing.T, e *Emu, c *conf)
}

// cutImage builds the file a power cut during F2 may leave: the header
// area from one of the slot images, each data block F2 claims from the
// old or the new image (or torn between them).
type cutImage struct {
	slot string // "new", "old", "torn" (128 bytes of the new slot), "failed"
	data string // "all", "none", "even", "odd", "last-lost", "torn"
}

func (ci cutImage) build(old, failed, new []byte, dataOff int64, bs int) []byte {
	img := bytes.Clone(new)
	switch ci.slot {
	case "old":
		copy(img[:dataOff], old[:dataOff])
	case "failed":
		copy(img[:dataOff], failed[:dataOff])
	case "torn":
		copy(img[:dataOff], old[:dataOff])
		for i := int64(0); i < dataOff; i++ {
			if old[i] != new[i] {
				copy(img[i:min(i+128, dataOff)], new[i:min(i+128, dataOff)])
				break
			}
		}
	}
	var changed []int64
	for off := dataOff; off < int64(len(new)); off += int64(bs) {
		if !bytes.Equal(old[off:off+int64(bs)], new[off:off+int64(bs)]) {
			changed = append(changed, off)
		}
	}
	for k, off := range changed {
		blk := img[off : off+int64(bs)]
		was := old[off : off+int64(bs)]
		switch {
		case ci.data == "none",
			ci.data == "even" && k%2 == 1,
			ci.data == "odd" && k%2 == 0,
			ci.data == "last-lost" && k == len(changed)-1:
			copy(blk, was)
		case ci.data == "torn":
			copy(blk[512:], was[512:])
		}
	}
	return img
}

// TestEmuCutDuringOneSyncFlush: a power cut during a Flush's one
// fdatasync may keep its slot or not (or tear it), and any subset of the
// data blocks it claims, whole or torn. Whatever survives, every zone
// reopens in a state some Flush made durable (F1's, or F2's), or, where
// F2's slot survived without all its data, back to what F1 made durable
// (its start, if it was reset since), never over data that did not reach
// the media; a second reopen and a Flush keep that state. Scenarios:
// plain appends, a reset (and rewrite, to the same write pointer too), a
// finish, a Flush that failed before F2 (F2 then syncs twice), and the
// fallback where the checksums do not fit in the slot.
func TestEmuCutDuringOneSyncFlush(t *testing.T) {
	scenarios := []cutScenario{{
		name: "appends", params: cutTestGeo, syncs: 1,
		between: func(t *testing.T, e *Emu, c *conf) bool {
			c.append(0, c.buf(2*c.bs, 11))
			c.append(1, c.buf(3*c.bs, 12))
			c.append(0, c.buf(c.bs, 13))
			return false
		},
	}, {
		name: "reset-and-rewrite", params: cutTestGeo, syncs: 1,
		durable: func(t *testing.T, e *Emu, c *conf) {
			c.ok("ResetZone", e.ResetZone(0))
			c.ok("ResetZone", e.ResetZone(3))
		},
		between: func(t *testing.T, e *Emu, c *conf) bool {
			c.append(0, c.buf(3*c.bs, 21))
			c.append(1, c.buf(c.bs, 22))
			return false
		},
	}, {
		name: "reset-to-the-same-wp", params: cutTestGeo, syncs: 1,
		durable: func(t *testing.T, e *Emu, c *conf) {
			c.ok("ResetZone", e.ResetZone(0))
		},
		between: func(t *testing.T, e *Emu, c *conf) bool {
			c.append(0, c.buf(2*c.bs, 31))
			return false
		},
	}, {
		// Zone 5's data predates F1: F1's slot holds no checksum of
		// it. With a reset durable only at the next Flush, a cut
		// before F2 reopened the zone at its old write pointer over
		// some blocks of what was written since the reset and some
		// old ones, and no checksum caught it (failed before
		// ResetZone flushed: old-slot and torn-slot images, data
		// even, odd, last-lost, torn).
		name: "reset-of-data-older-than-F1", params: cutTestGeo, syncs: 1,
		early: func(t *testing.T, e *Emu, c *conf) {
			c.append(5, c.buf(4*c.bs, 71))
		},
		durable: func(t *testing.T, e *Emu, c *conf) {
			c.ok("ResetZone", e.ResetZone(5))
		},
		between: func(t *testing.T, e *Emu, c *conf) bool {
			c.append(5, c.buf(4*c.bs, 72))
			return false
		},
	}, {
		name: "finish", params: cutTestGeo, syncs: 1,
		between: func(t *testing.T, e *Emu, c *conf) bool {
			c.append(0, c.buf(c.bs, 41))
			c.ok("FinishZone", e.FinishZone(0))
			c.ok("FinishZone", e.FinishZone(4))
			c.append(1, c.buf(c.bs, 42))
			return false
		},
	}, {
		name: "after-a-failed-flush", params: cutTestGeo, syncs: 2,
		between: func(t *testing.T, e *Emu, c *conf) bool {
			c.append(0, c.buf(c.bs, 51))
			c.append(1, c.buf(c.bs, 52))
			e.testHookSync = func() error { return syscall.EIO }
			if err := e.Flush(); err == nil {
				t.Fatal("a Flush whose sync failed succeeded")
			}
			e.testHookSync = nil
			c.append(0, c.buf(2*c.bs, 53))
			c.append(2, c.buf(c.bs, 54))
			return true
		},
	}, {
		// 251 zones leave no room past the slot's entries: F2 falls
		// back to syncing the data before it writes the slot.
		name: "sums-do-not-fit", params: "?zone_size=16K&zones=251&max_append=16K", syncs: 2,
		between: func(t *testing.T, e *Emu, c *conf) bool {
			c.append(0, c.buf(2*c.bs, 61))
			c.append(1, c.buf(c.bs, 62))
			return false
		},
	}}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			dir := t.TempDir()
			base := filepath.Join(dir, "base")
			e, c := openEmuT(t, base, sc.params)
			if sc.early != nil {
				sc.early(t, e, c)
				c.ok("F0", e.Flush())
			}
			c.append(0, c.buf(2*c.bs, 1))
			c.append(2, c.buf(c.bs, 2))
			c.append(3, c.buf(3*c.bs, 3))
			c.ok("F1", e.Flush())
			if sc.durable != nil {
				sc.durable(t, e, c)
			}
			before := cutModels(c)
			old := readFileT(t, base)
			var failed []byte
			var mid []zoneModel
			if sc.between(t, e, c) {
				failed = readFileT(t, base)
			}
			syncs := e.flushIO.syncs
			c.ok("F2", e.Flush())
			if got := e.flushIO.syncs - syncs; got != sc.syncs {
				t.Fatalf("F2 did %d syncs, want %d", got, sc.syncs)
			}
			after := cutModels(c)
			if failed != nil {
				// What the failed Flush's slot claims: the table as
				// of its start, which the reopened image shows.
				mid = reopenModels(t, filepath.Join(dir, "mid"), failed)
			}
			c.ok("Close", e.Close())
			new := readFileT(t, base)
			dataOff := emuDataOff(c.g.Zones)

			slots := []string{"new", "old", "torn"}
			if failed != nil {
				slots = append(slots, "failed")
			}
			for _, slot := range slots {
				for _, data := range []string{"all", "none", "even", "odd", "last-lost", "torn"} {
					ci := cutImage{slot, data}
					if sc.syncs == 2 && slot == "new" && data != "all" {
						continue // F2's slot followed its data's sync
					}
					t.Run(slot+"-slot/"+data+"-data", func(t *testing.T) {
						path := filepath.Join(t.TempDir(), "dev")
						if err := os.WriteFile(path, ci.build(old, failed, new, dataOff, int(c.bs)), 0o644); err != nil {
							t.Fatal(err)
						}
						models := [][]zoneModel{before, after}
						if mid != nil {
							models = [][]zoneModel{before, mid, after}
						}
						e, c := openEmuT(t, path, "")
						got := cutModels(c)
						if ci == (cutImage{"new", "all"}) {
							// Everything reached the media: F2 completed.
							models = [][]zoneModel{after}
						}
						checkCut(t, got, before, models, sc.reset)
						c.ok("Close", e.Close())
						for _, then := range []string{"reopened again", "flushed and reopened"} {
							e, c = openEmuT(t, path, "")
							if again := cutModels(c); !sameModels(again, got) {
								t.Fatalf("%s: the state changed", then)
							}
							if then == "reopened again" {
								c.ok("Flush", e.Flush())
							}
							c.ok("Close", e.Close())
						}
					})
				}
			}
		})
	}
}

// checkCut checks every zone of a device reopened after a cut against
// the durable states models: it is one of them, or a later one put back
// to what F1 (before) made durable, its start if it was reset since.
func checkCut(t *testing.T, got, before []zoneModel, models [][]zoneModel, reset []int) {
	t.Helper()
	for i, z := range got {
		ok := false
		for _, m := range models {
			if z.wp == m[i].wp && bytes.Equal(z.data, m[i].data) {
				ok = true
				break
			}
			if len(models) == 1 {
				continue // no cut: exactly F2's state
			}
			// Put back: the data F1 made durable, then zeros; the
			// write pointer there, or at the capacity if finished.
			floor := before[i].wp
			if before[i].cond == CondFull || containsInt(reset, i) {
				floor = 0 // no zone here is finished at F1
			}
			if bytes.Equal(z.data[:floor], m[i].data[:floor]) && allZeros(z.data[floor:]) &&
				(z.wp == floor || z.cond == CondFull && m[i].cond == CondFull) {
				ok = true
				break
			}
		}
		if !ok {
			t.Errorf("zone %d: %s wp +%d with data matching no durable state (F1: wp +%d, F2: wp +%d)",
				i, z.cond, z.wp, before[i].wp, models[len(models)-1][i].wp)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

func sameModels(a, b []zoneModel) bool {
	for i := range a {
		if a[i].wp != b[i].wp || !bytes.Equal(a[i].data, b[i].data) {
			return false
		}
	}
	return true
}

func containsInt(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func allZeros(b []byte) bool {
	for _, v := range b {
		if v != 0 {
			return false
		}
	}
	return true
}

func readFileT(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// reopenModels writes img to path, opens it and reads its zones.
func reopenModels(t *testing.T, path string, img []byte) []zoneModel {
	t.Helper()
	if err := os.WriteFile(path, img, 0o644); err != nil {
		t.Fatal(err)
	}
	e, c := openEmuT(t, path, "")
	defer e.Close()
	return cutModels(c)
}
