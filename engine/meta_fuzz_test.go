package engine

import (
	"encoding/binary"
	"reflect"
	"testing"
)

// The metadata parsers read what the device holds: a damaged or crafted
// device must get an error from them, never a panic, and whatever they
// accept must be what Open can use. Run one with
// `go test -ldflags=-checklinkname=0 -run X -fuzz FuzzDecodeOp ./engine`.

// FuzzDecodeOp: an operation record's payload decodes or fails; one that
// decodes encodes back to the same operation.
func FuzzDecodeOp(f *testing.F) {
	for _, op := range []nsOp{
		{kind: opCreate, file: 7, name: "a"},
		{kind: opRename, file: 3, name: "dir/b"},
		{kind: opVoid, voids: []uint64{1, 2, 90}},
		{kind: opZoneReset, zone: 12},
	} {
		f.Add(uint64(5), encodeOp(op))
	}
	f.Fuzz(func(t *testing.T, seq uint64, p []byte) {
		op, err := decodeOp(seq, p)
		if err != nil {
			return
		}
		again, err := decodeOp(seq, encodeOp(op))
		if err != nil {
			t.Fatalf("%+v encodes to a payload that does not decode: %v", op, err)
		}
		if !reflect.DeepEqual(op, again) {
			t.Fatalf("round trip changed the operation: %+v, then %+v", op, again)
		}
	})
}

// FuzzDecodeCheckpoint: a checkpoint's payload decodes or fails; one
// that decodes encodes back to the same checkpoint.
func FuzzDecodeCheckpoint(f *testing.F) {
	f.Add(encodeCheckpoint(&checkpointState{seq: 9, nextID: 3, zoneWP: map[int]int64{4: 8192},
		files: []ckptFile{{id: 1, name: "a", size: 100, ext: []extent{{off: 0, len: 100, dev: 8192, ver: 2, hdr: 4096}}}}}))
	f.Add(encodeCheckpoint(&checkpointState{seq: 1, nextID: 1, zoneWP: map[int]int64{}}))
	f.Fuzz(func(t *testing.T, p []byte) {
		c, err := decodeCheckpoint(p)
		if err != nil {
			return
		}
		again, err := decodeCheckpoint(encodeCheckpoint(c))
		if err != nil {
			t.Fatalf("a decoded checkpoint encodes to a payload that does not decode: %v", err)
		}
		if !reflect.DeepEqual(c, again) {
			t.Fatalf("round trip changed the checkpoint: %+v, then %+v", c, again)
		}
	})
}

// FuzzDecodeMetaRecord: any block read from a metadata half is a record
// header or not, and a header's record verifies or not.
func FuzzDecodeMetaRecord(f *testing.F) {
	rec := make([]byte, metaRecordLen(3))
	encodeMeta(rec, 42, metaOp, 7, []byte("abc"))
	f.Add(rec)
	f.Add(make([]byte, BlockSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeMetaHeader(b)
		if err != nil {
			return
		}
		if p, err := verifyMeta(b, h); err == nil && len(p) != h.length {
			t.Fatalf("verified payload of %d bytes, header says %d", len(p), h.length)
		}
	})
}

// FuzzDecodeSuperblock: a superblock whose checksum holds (the fuzzer
// chooses the fields, the checksum is made to match) decodes only if
// Open can lay the file system out from it: two metadata halves of
// MetaGroup zones each, apart, inside the zones it uses, inside the
// device; a zone capacity within the zone size.
func FuzzDecodeSuperblock(f *testing.F) {
	f.Add(int64(1<<20), int64(1<<20), uint32(16), uint32(0), uint32(1), uint32(16), uint32(1))
	f.Add(int64(4<<20), int64(3<<20), uint32(512), uint32(0), uint32(4), uint32(500), uint32(4))
	f.Fuzz(func(t *testing.T, zoneSize, zoneCap int64, zones, meta0, meta1, used, group uint32) {
		buf := make([]byte, BlockSize)
		sb := Superblock{ZoneSize: zoneSize, ZoneCap: zoneCap, Zones: int(zones), BlockSize: BlockSize,
			MetaZones: [2]int{int(meta0), int(meta1)}, UsedZones: int(used), MetaGroup: int(group)}
		sb.encode(buf)
		binary.LittleEndian.PutUint32(buf[BlockSize-4:], Checksum(buf[:BlockSize-4]))
		s, err := decodeSuperblock(buf)
		if err != nil {
			return
		}
		if s.ZoneSize <= 0 || s.ZoneCap <= 0 || s.ZoneCap > s.ZoneSize || s.Zones <= 0 {
			t.Fatalf("accepted zones of %d bytes, capacity %d, %d zones", s.ZoneSize, s.ZoneCap, s.Zones)
		}
		if s.MetaGroup < 1 || s.UsedZones > s.Zones {
			t.Fatalf("accepted a metadata group of %d, %d of %d zones used", s.MetaGroup, s.UsedZones, s.Zones)
		}
		lo, hi := min(s.MetaZones[0], s.MetaZones[1]), max(s.MetaZones[0], s.MetaZones[1])
		if lo < 0 || lo+s.MetaGroup > hi || hi+s.MetaGroup > s.UsedZones {
			t.Fatalf("accepted metadata halves at zones %v of %d zones each, %d zones used", s.MetaZones, s.MetaGroup, s.UsedZones)
		}
	})
}
