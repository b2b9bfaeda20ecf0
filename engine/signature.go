package engine

import (
	"encoding/binary"

	"github.com/zonefold/zonefold/zns"
)

// An emu file whose header slots hold garbage (a stray dd over its
// start) lost its zone table if it is a zonefold device, which a
// superblock copy at a zone start shows; any other file is refused as
// no device (zns.DataSignature).
func init() {
	zns.RegisterDataSignature(zns.DataSignature{
		Name:  "a zonefold superblock",
		Zones: superblockZones,
		Match: isSuperblockCopy,
	})
}

// superblockZones bounds the zones a superblock copy may start: the two
// metadata halves, of at most maxMetaGroup zones each, come first after
// the conventional zones.
const superblockZones = 2*maxMetaGroup + 64

// isSuperblockCopy reports whether b starts with a superblock copy: its
// magic and checksum. Its version is not checked: a device of a format
// this zonefold does not read is a zonefold device all the same.
func isSuperblockCopy(b []byte) bool {
	le := binary.LittleEndian
	return len(b) >= BlockSize && le.Uint32(b) == superMagic && Checksum(b[:BlockSize-4]) == le.Uint32(b[BlockSize-4:])
}
