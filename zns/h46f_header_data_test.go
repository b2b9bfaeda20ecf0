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
