package engine

import (
	"encoding/binary"

	"github.com/zonefold/zonefold/zns"
)

// An emu file whose header slots hold garbage (a stray dd over its
// start) or read as zeros lost its zone table if it is a zonefold
// device, which a superblock copy (it starts each metadata zone) or a
// record header (each data zone the engine wrote starts with one) at a
// zone start shows, or one where the file's data starts; any other
// file is refused as no device (zns.DataSignature).
func init() {
	zns.RegisterDataSignature(zns.DataSignature{
		Name:  "a zonefold superblock",
		Zones: superblockZones,
		Match: isSuperblockCopy,
	})
	zns.RegisterDataSignature(zns.DataSignature{
		Name:  "a zonefold record header",
		Zones: superblockZones,
		Match: isRecordHeader,
	})
}

// superblockZones bounds the zones a superblock copy may start: the two
// metadata halves, of at most maxMetaGroup zones each, come first after
// the conventional zones.
const superblockZones = 2*maxMetaGroup + 64

// isRecordHeader reports whether b starts with a record header (the
// first block of every append: RecordHeader): its magic and checksum,
// as for isSuperblockCopy (its version and fields are not checked).
// Data zones past the first superblockZones are not looked at: a
// device's metadata zones come first, and its first data zones after
// them.
func isRecordHeader(b []byte) bool {
	le := binary.LittleEndian
	return len(b) >= BlockSize && le.Uint32(b) == recordMagic && Checksum(b[:BlockSize-4]) == le.Uint32(b[BlockSize-4:])
}

// isSuperblockCopy reports whether b starts with a superblock copy: its
// magic and checksum. Its version is not checked: a device of a format
// this zonefold does not read is a zonefold device all the same.
func isSuperblockCopy(b []byte) bool {
	le := binary.LittleEndian
	return len(b) >= BlockSize && le.Uint32(b) == superMagic && Checksum(b[:BlockSize-4]) == le.Uint32(b[BlockSize-4:])
}
