package zns

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestH46kDataPastAfterAReset: a reset leaves the zone's old data in
// the file (it punches nothing; reads past the write pointer return
// zeros), so after a reset the block at the write pointer holds what
// the zone held before it. Losing the OLDER slot then loses nothing, yet
// DataPast names the zone: no byte tells that stale data from what a
// lost newer table claimed. The report must not tell the user the
// damaged copy was the newer one claiming it, nor only "writes no flush
// made durable": it must name a reset's leftovers as a cause too.
func TestH46kDataPastAfterAReset(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev")
	e, c := openEmuT(t, path, emuTestGeo)
	c.append(0, c.buf(2*c.bs, 1))
	c.ok("Flush", e.Flush()) // the older slot: zone 0 at +2 blocks
	c.ok("ResetZone", e.ResetZone(0))
	// The reset's slot is the newest: zone 0 empty.
	older := int64((e.seq+1)%2) * e.slotLen
	c.ok("Close", e.Close())
	// The older copy zeroed at rest: nothing is lost.
	damageFile(t, path, make([]byte, e.slotLen), older)

	e2, c2 := openEmuT(t, path, "")
	c2.expectZone(0, CondEmpty, 0)
	fb, ok := e2.SlotFallback()
	if !ok || !fb.Overwritten {
		t.Fatalf("SlotFallback = %+v, %v; want the zeroed older slot reported", fb, ok)
	}
	// The block at zone 0's write pointer is its data from before the
	// reset: the device cannot tell it from data a lost table claimed.
	if !slices.Equal(fb.DataPast, []int{0}) {
		t.Fatalf("DataPast = %v, want [0] (the zone's data from before its reset)", fb.DataPast)
	}
	s := fb.String()
	if !strings.Contains(s, "before its last reset") {
		t.Errorf("the report does not name a reset's leftovers as a cause of data past the write pointers: %q", s)
	}
	if strings.Contains(s, "the damaged copy was the newer") {
		t.Errorf("the report claims the damaged copy was the newer: %q", s)
	}
	c2.ok("Close", e2.Close())
}

// TestH46kTornSlotKeepsTheMagic: a slot write torn as a kill -9 tears
// it (a prefix of its pages new, the rest as the slot held them before)
// or as a power cut may (any pages new) leaves the magic in the slot's
// first bytes: the engine then opens without an option. Checked on a
// slot of many pages (4096 zones: 17 pages), each split point.
func TestH46kTornSlotKeepsTheMagic(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev")
	e, c := openEmuT(t, path, "?zone_size=64K&zones=4096")
	if e.slotLen/emuSlotAlign < 2 {
		t.Fatalf("slot of %d bytes: want several pages", e.slotLen)
	}
	c.append(4000, c.buf(c.bs, 1))
	c.ok("Flush", e.Flush())
	c.append(4000, c.buf(c.bs, 2))
	c.ok("Flush", e.Flush()) // the newest slot: what a kill -9 tears
	slotOff := int64(e.seq%2) * e.slotLen
	c.ok("Close", e.Close())
	f, err := openFileRW(path)
	if err != nil {
		t.Fatal(err)
	}
	newSlot := make([]byte, e.slotLen)
	if _, err := f.ReadAt(newSlot, slotOff); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, tear := range []struct {
		name string
		page func(i, n int) bool // whether page i of n is new
	}{
		{"prefix", func(i, n int) bool { return i < n/2 }},
		{"suffix", func(i, n int) bool { return i >= n/2 }},
		{"first-only", func(i, n int) bool { return i == 0 }},
		{"all-but-first", func(i, n int) bool { return i > 0 }},
	} {
		t.Run(tear.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "dev")
			copyFileT(t, path, p)
			old := make([]byte, e.slotLen)
			// Page content before the write: any slot with the magic
			// stands for it (a slot is never zeros after format).
			copy(old, newSlot)
			old[emuHdrFixed+emuEntryLen*4000] ^= 0xff // older entry bytes
			old[16] ^= 3                              // older seq
			n := int(e.slotLen / emuSlotAlign)
			torn := make([]byte, e.slotLen)
			for i := range n {
				src := old
				if tear.page(i, n) {
					src = newSlot
				}
				copy(torn[i*emuSlotAlign:(i+1)*emuSlotAlign], src[i*emuSlotAlign:])
			}
			damageFile(t, p, torn, slotOff)
			e2, _ := openEmuT(t, p, "")
			fb, ok := e2.SlotFallback()
			if !ok || fb.Overwritten || !slices.Equal(fb.DataPast, []int{4000}) {
				t.Fatalf("SlotFallback = %+v, %v; want a fallback from a slot that keeps the magic, data past zone 4000's pointer", fb, ok)
			}
			e2.Close()
		})
	}
}

func copyFileT(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
