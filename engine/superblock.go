package engine

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/zonefold/zonefold/zns"
)

const (
	superMagic = 0x42534a46 // "FJSB"
	// superVersion is the newest on-device format this zonefold reads.
	// 2: records carry a CRC32C per data block and checkpoint extents
	// name their record's header, so that reads can check what they
	// read. 3 (superPackVersion): the metadata log may also hold packs
	// of several namespace operations in one record (metaPack). A
	// device of format 1 is refused with the way out, not read; one of
	// a format above superVersion is refused too (a zonefold of format
	// 2 refuses format 3 so: it would read a pack as the log's end and
	// lose what follows).
	superVersion = 3
	// superMinVersion is the oldest format read. A device keeps the
	// format it was formatted with (Superblock.Version): the copies a
	// checkpoint writes carry it again, and the engine writes no pack
	// to a device of format 2, so a zonefold of format 2 still reads
	// it. There is no upgrade in place: format the device again.
	superMinVersion  = 2
	superPackVersion = 3
)

// formatVersion is the format Format writes: superPackVersion, whose
// log packs deferred operations (metaPack). A variable for tests, which
// make format-2 devices with it too (h41bFormat), to keep that format,
// still read and written where a device has it, covered.
var formatVersion = superPackVersion

// Superblock identifies a formatted device and the geometry it was
// formatted with. A copy starts each of the two metadata zones.
//
// Layout (little endian, one block): magic u32, version u32 (the
// format, Version), uuid [16]byte,
// zone size u64, zone capacity u64, zones u32, block size u32, metadata
// zones [2]u32, used zones u32, metadata group u32 (0, as superblocks
// written before groups hold, means 1), zeros, CRC32C of the first 4092
// bytes.
type Superblock struct {
	// Version is the device's on-device format (superMinVersion to
	// superVersion), kept by every superblock copy written after Format.
	Version   int
	UUID      [16]byte
	ZoneSize  int64
	ZoneCap   int64
	Zones     int
	BlockSize int
	// MetaZones are the first zones of the two metadata halves.
	MetaZones [2]int
	// MetaGroup is the zones in each metadata half, consecutive from
	// MetaZones[i]: sized at Format so that the largest checkpoint the
	// device's data zones can call for, and room for a log after it, fit
	// one half (see metaGroupFor).
	MetaGroup int
	// UsedZones is how many zones, from zone 0, the file system uses; the
	// rest of the device is left alone. Equal to Zones unless formatted
	// smaller.
	UsedZones int
}

// FS is the file system id that records and metadata carry: the first
// eight bytes of the UUID.
func (s *Superblock) FS() uint64 { return binary.LittleEndian.Uint64(s.UUID[:8]) }

// ID is the UUID as text.
func (s *Superblock) ID() string { return hex.EncodeToString(s.UUID[:]) }

// ErrOldFormat is opening a device an older zonefold formatted, in an
// on-device format this one does not read.
var ErrOldFormat = errors.New("engine: device formatted by an older zonefold")

// ErrNotFormatted is opening a device without a zonefold superblock.
var ErrNotFormatted = errors.New("engine: device is not formatted by zonefold (run `zonefold format DEVICE`)")

func (s *Superblock) encode(buf []byte) {
	buf = buf[:BlockSize]
	clear(buf)
	le := binary.LittleEndian
	le.PutUint32(buf[0:], superMagic)
	v := s.Version
	if v == 0 {
		// Built without one: the format every zonefold since 2 reads.
		v = superMinVersion
	}
	le.PutUint32(buf[4:], uint32(v))
	copy(buf[8:24], s.UUID[:])
	le.PutUint64(buf[24:], uint64(s.ZoneSize))
	le.PutUint64(buf[32:], uint64(s.ZoneCap))
	le.PutUint32(buf[40:], uint32(s.Zones))
	le.PutUint32(buf[44:], uint32(s.BlockSize))
	le.PutUint32(buf[48:], uint32(s.MetaZones[0]))
	le.PutUint32(buf[52:], uint32(s.MetaZones[1]))
	le.PutUint32(buf[56:], uint32(s.UsedZones))
	le.PutUint32(buf[60:], uint32(s.MetaGroup))
	le.PutUint32(buf[BlockSize-4:], Checksum(buf[:BlockSize-4]))
}

// decodeSuperblock parses a superblock; anything else is ErrNotFormatted.
func decodeSuperblock(buf []byte) (Superblock, error) {
	var s Superblock
	if len(buf) < BlockSize {
		return s, ErrNotFormatted
	}
	le := binary.LittleEndian
	if le.Uint32(buf[0:]) != superMagic {
		return s, ErrNotFormatted
	}
	if Checksum(buf[:BlockSize-4]) != le.Uint32(buf[BlockSize-4:]) {
		return s, fmt.Errorf("%w: superblock checksum mismatch", ErrNotFormatted)
	}
	if v := le.Uint32(buf[4:]); v < superMinVersion {
		return s, fmt.Errorf("%w (on-device format %d; this zonefold reads formats %d to %d, with per-block data checksums): copy its files off with that zonefold, then format the device again", ErrOldFormat, v, superMinVersion, superVersion)
	} else if v > superVersion {
		return s, fmt.Errorf("engine: the device has on-device format %d, from a newer zonefold; this one reads formats %d to %d", v, superMinVersion, superVersion)
	} else {
		s.Version = int(v)
	}
	copy(s.UUID[:], buf[8:24])
	s.ZoneSize = int64(le.Uint64(buf[24:]))
	s.ZoneCap = int64(le.Uint64(buf[32:]))
	s.Zones = int(le.Uint32(buf[40:]))
	s.BlockSize = int(le.Uint32(buf[44:]))
	s.MetaZones[0] = int(le.Uint32(buf[48:]))
	s.MetaZones[1] = int(le.Uint32(buf[52:]))
	s.UsedZones = int(le.Uint32(buf[56:]))
	s.MetaGroup = max(int(le.Uint32(buf[60:])), 1)
	if s.MetaZones[1] != s.MetaZones[0]+s.MetaGroup && s.MetaGroup > 1 {
		return s, fmt.Errorf("engine: superblock metadata halves at zones %v do not hold %d zones each", s.MetaZones, s.MetaGroup)
	}
	if s.UsedZones <= 0 || s.UsedZones > s.Zones {
		return s, fmt.Errorf("engine: superblock uses %d of %d zones", s.UsedZones, s.Zones)
	}
	// Checksummed, but a damaged or crafted one must not send Open
	// indexing past the device (FuzzDecodeSuperblock).
	if s.ZoneSize <= 0 || s.ZoneCap <= 0 || s.ZoneCap > s.ZoneSize {
		return s, fmt.Errorf("engine: superblock has zones of %d bytes with a capacity of %d", s.ZoneSize, s.ZoneCap)
	}
	if lo, hi := min(s.MetaZones[0], s.MetaZones[1]), max(s.MetaZones[0], s.MetaZones[1]); lo+s.MetaGroup > hi || hi+s.MetaGroup > s.UsedZones {
		return s, fmt.Errorf("engine: superblock metadata halves at zones %v, %d zones each, do not fit apart in the %d zones it uses", s.MetaZones, s.MetaGroup, s.UsedZones)
	}
	return s, nil
}

// checkGeometry refuses a device whose geometry differs from the one the
// superblock was written for.
func (s *Superblock) checkGeometry(g zns.Geometry) error {
	if s.ZoneSize != g.ZoneSize || s.ZoneCap != g.ZoneCap || s.Zones != g.Zones || s.BlockSize != BlockSize {
		return fmt.Errorf("engine: device geometry (%d zones of %d bytes, capacity %d) differs from the formatted one (%d zones of %d, capacity %d)",
			g.Zones, g.ZoneSize, g.ZoneCap, s.Zones, s.ZoneSize, s.ZoneCap)
	}
	return nil
}

// isMeta reports whether zone i belongs to a metadata half.
// holdsData says whether zone i, as reported, is one of the file
// system's data zones: within its zones, sequential, not metadata.
func (s *Superblock) holdsData(i int, z zns.Zone) bool {
	return i < s.UsedZones && z.Type != zns.TypeConventional && !s.isMeta(i)
}

func (s *Superblock) isMeta(i int) bool {
	for _, z := range s.MetaZones {
		if i >= z && i < z+s.MetaGroup {
			return true
		}
	}
	return false
}

// metaAt maps offset off of metadata half h's log to a zone and an offset
// in it: the log runs through the half's zones in order.
func (s *Superblock) metaAt(h int, off int64) (int, int64) {
	return s.MetaZones[h] + int(off/s.ZoneCap), off % s.ZoneCap
}

// metaHalfCap is the writable bytes of one metadata half.
func (s *Superblock) metaHalfCap() int64 { return int64(s.MetaGroup) * s.ZoneCap }

func newUUID() ([16]byte, error) {
	var u [16]byte
	if _, err := rand.Read(u[:]); err != nil {
		return u, fmt.Errorf("engine: uuid: %w", err)
	}
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return u, nil
}
