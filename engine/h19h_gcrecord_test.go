package engine

import (
	"testing"
	"time"
)

// A checkpoint extent of "a" (checksum valid) at a file offset that is
// not block aligned, or with a version at or above maxSeq, aliasing a
// piece of b's data in b's zone: decodeCheckpoint takes it. A GC pass
// then relocates the zone, a's piece with b's, and writes a GC record
// carrying a's extent as it stands (EncodeHeader does not check it),
// ahead of b's record in the GC zone. DecodeHeader refuses that header
// (FileOff%BlockSize != 0, Version >= maxSeq), so recovery's scan of the
// GC zone stops there as at a torn record: b's GC record behind it is
// never replayed, the victim zone was reset, and after a crash b, which
// the damage never touched, reads other bytes (fsck: "no record
// carries it"). Cause: meta.go decodeCheckpoint does not hold extents
// to DecodeHeader's rules (alignment, version), and gc.go
// rewrite/appendFile (record.go EncodeHeader) writes a header
// DecodeHeader refuses.
func TestH19hGCRecordOfCraftedExtentHidesIntactFile(t *testing.T) {
	bx := extent{off: 524288, len: 520192, dev: 3674112, ver: 6, hdr: 3145728} // b's piece in zone 3
	for name, x := range map[string]extent{
		"unaligned offset": {off: 65536 + 100, len: 4096, dev: bx.dev, ver: bx.ver, hdr: bx.hdr},
		"version 2^63":     {off: 65536, len: 4096, dev: bx.dev, ver: 1 << 63, hdr: bx.hdr},
	} {
		t.Run(name, func(t *testing.T) {
			d := h19hSetup(t)
			c := d.e.snapshot()
			a, b := ckptFileOf(t, c, "a"), ckptFileOf(t, c, "b")
			if b.ext[2] != bx {
				t.Fatalf("b's layout changed: %+v", b.ext)
			}
			a.size = 256 << 10
			a.ext = append(a.ext, x)
			h19gCraftCheckpoint(t, d.e, c)
			d.e.crashForTest()
			e, err := h19gOpen(t, d.devName)
			if err != nil {
				return // refused with an error: fine
			}
			h19gBounded(t, "GC", time.Minute, func() {
				for i := 0; i < 8 && e.zones[3].state.Load() != zoneFree; i++ {
					if moved, err := e.gc.pass(gcUrgent); err != nil || !moved {
						t.Logf("GC pass: moved %v, %v", moved, err)
						break
					}
				}
			})
			// GC may refuse the zone (its record of a's extent would
			// not decode): b must read whole either way.
			t.Logf("b's zone after GC: state %d", e.zones[3].state.Load())
			h19hCheckB(t, e, d.b, "after GC")
			e.crashForTest()
			rep, err := h19gFsck(t, d.devName)
			if err == nil {
				t.Logf("fsck after the crash: %q", rep.Problems)
			}
			e2, err := h19gOpen(t, d.devName)
			if err != nil {
				t.Fatalf("reopen after GC and a crash: %v", err)
			}
			defer e2.Close()
			h19hCheckB(t, e2, d.b, "after GC and a crash")
		})
	}
}
