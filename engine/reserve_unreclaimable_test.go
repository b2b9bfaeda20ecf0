package engine

import "testing"

// keepsReserve counted every byte of the capacity outside GC's
// reserve that is not valid as free once GC has run, but record headers,
// pads and garbage under minGCGain in a zone (no pass ever takes such a
// zone: pick) are never reclaimed. A file without the reserve is then
// admitted into the free space the reserve stands for, and the file
// allowed it finds none. "sequential": a device filled with sequential
// data only (its headers); "thin": three blocks overwritten per zone.
func TestReserveCountsOnlyReclaimableSpace(t *testing.T) {
	for _, thin := range []bool{false, true} {
		name := "sequential"
		if thin {
			name = "thin"
		}
		t.Run(name, func(t *testing.T) {
			e := formatOpen(t, emuDevice(t, 96, "256K", ""), Config{CacheBytes: 4 << 20, DirtyLimit: 1 << 20})
			defer e.Close()
			base, err := e.Create("base")
			if err != nil {
				t.Fatal(err)
			}
			defer base.Close()
			buf := make([]byte, 64<<10)
			const baseSize = 16 << 20
			for off := int64(0); off < baseSize; off += int64(len(buf)) {
				buf[0] = byte(off >> 16)
				if _, err := base.WriteAt(buf, off); err != nil {
					t.Fatal(err)
				}
			}
			// Three blocks of garbage in each zone base fills: every
			// 256 KiB of the file lies in another zone (a zone holds
			// less than 256 KiB of data, with its headers).
			small := make([]byte, 3*BlockSize)
			small[0] = 1
			for off := int64(0); thin && off < baseSize; off += 256 << 10 {
				if _, err := base.WriteAt(small, off); err != nil {
					t.Fatal(err)
				}
			}
			if err := base.Sync(); err != nil {
				t.Fatal(err)
			}
			const reserve = 512 << 10
			e.SetReserved(reserve)
			other, log, tables, logged := fillReserve(t, e)
			defer other.Close()
			defer log.Close()
			t.Logf("not valid: %d of %d usable; table refused after %d, log after %d",
				e.usableBytes()-e.placer.validBytes(), e.usableBytes(), tables, logged)
			if logged < reserve*3/4 {
				t.Fatalf("the file allowed the %d-byte reserve wrote %d bytes once the other was refused", reserve, logged)
			}
		})
	}
}
