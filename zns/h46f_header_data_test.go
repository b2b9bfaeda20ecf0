package zns

import (
	"errors"
	"strings"
	"testing"
)

// A file whose first page reads as zeros and whose header area holds
// data that is no device's (a file system that leaves its first 64 KiB
// alone, as btrfs does) is refused as no device from that data alone:
// what follows it in the zones decides nothing. The check read on into
// the zones for their first byte that is not zero all the same, and
// discarded it: a file of written zeros past that data, or a block
// device, was read whole (every Open but fsck) or for 64 MiB (fsck) to
// refuse it.
func TestEmuForeignDataInTheHeaderAreaIsRefusedWithoutReadingTheZones(t *testing.T) {
	const (
		geo  = "?zone_size=4M&zones=16"
		size = 1<<20 + 16*4<<20
	)
	for _, o := range everyOpen {
		t.Run(o.name, func(t *testing.T) {
			p := zerosFile(t, size)
			patchFile(t, p, 64<<10, randomBytes(9, 4096))
			err := refusedOpenOf(t, p, p, geo, o.opts, 4<<20)
			if errors.Is(err, ErrLostZoneTable) || !strings.Contains(err.Error(), "not an emu device") || !strings.Contains(err.Error(), "byte 65536, in the header") {
				t.Fatalf("Open = %v, want it refused as no emu device for its data at byte 65536, in the header", err)
			}
		})
	}
}

// A geometry of more zones than the device's has a larger header, and
// the device's first zones lie in it: in its slot 1 too (some 33k to
// 65k zones). The file's first data there is where the device's data
// starts, a signature; the check looked at slot 1 last, after the
// padding past it, and took data further into the device's zone 0
// (past slot 1 of the geometry given) for where its data starts: the
// device was refused as no device at all, and fsck --copy-to, whose
// engine names the geometry a superblock it finds gives, did not run.
func TestEmuZeroPageSignatureInSlot1OfTheGeometryGiven(t *testing.T) {
	p := lostDevice(t)
	e, c := openEmuT(t, p, lostGeo)
	c.append(0, signed(c.buf(c.bs, 1)))
	for i := range 3 {
		c.append(0, c.buf(128<<10, byte(i+2)))
	}
	c.ok("Flush", e.Flush())
	c.ok("Close", e.Close())
	zeroSlots(t, p)
	const many = "?zone_size=64K&zones=40000"
	if sl := emuSlotLen(40000); sl > 1<<20 || 2*sl <= 1<<20+c.bs || 2*sl >= 1<<20+c.bs+3*128<<10 {
		t.Fatalf("set-up: slot 1 of the geometry given, at %d+%d, does not hold the device's zone 0 start, or its data does not reach past it", sl, sl)
	}
	err := refusedOpen(t, p, many, Options{})
	if !errors.Is(err, ErrLostZoneTable) || !strings.Contains(err.Error(), "(byte 1048576, in the header), which starts with a zns test signature") {
		t.Fatalf("Open = %v, want ErrLostZoneTable naming the signature where the data starts, in slot 1 of the header", err)
	}
}
