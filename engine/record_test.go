package engine

import (
	"errors"
	"slices"
	"testing"
)

func TestRecordHeaderRoundTrip(t *testing.T) {
	h := RecordHeader{Kind: KindData, Seq: 42, File: 7, Size: 123456, DataLen: 3 * BlockSize, Sums: []uint32{1, 0xdeadbeef, 3},
		Extents: []RecordExtent{{FileOff: 0, Len: BlockSize, Version: 42}, {FileOff: 10 * BlockSize, Len: 2 * BlockSize, Version: 42}}}
	buf := make([]byte, BlockSize)
	if err := EncodeHeader(&h, buf); err != nil {
		t.Fatal(err)
	}
	var got RecordHeader
	if err := DecodeHeader(buf, &got); err != nil {
		t.Fatal(err)
	}
	if got.Kind != h.Kind || got.Seq != h.Seq || got.File != h.File || got.Size != h.Size ||
		got.DataLen != h.DataLen || !slices.Equal(got.Sums, h.Sums) || len(got.Extents) != 2 || got.Extents[1] != h.Extents[1] {
		t.Fatalf("decoded %+v, want %+v", got, h)
	}
	for _, tc := range []struct {
		name string
		mut  func([]byte)
		want error
	}{
		{"zeros", func(b []byte) { clear(b) }, ErrNoRecord},
		{"flipped bit", func(b []byte) { b[100] ^= 1 }, ErrCorruptRecord},
		{"torn tail", func(b []byte) { clear(b[2048:]) }, ErrCorruptRecord},
	} {
		b := append([]byte(nil), buf...)
		tc.mut(b)
		if err := DecodeHeader(b, &got); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	bad := h
	bad.DataLen = 5
	if err := EncodeHeader(&bad, buf); err == nil {
		t.Error("header whose extents disagree with its length was encoded")
	}
	bad = h
	bad.Extents = make([]RecordExtent, MaxRecordExtents+1)
	if err := EncodeHeader(&bad, buf); err == nil {
		t.Error("header with too many extents was encoded")
	}
	bad = h
	bad.Sums = bad.Sums[:2]
	if err := EncodeHeader(&bad, buf); err == nil {
		t.Error("header with a checksum missing was encoded")
	}
	// The most extents and blocks a record may have fit the header.
	full := RecordHeader{Kind: KindData, DataLen: MaxRecordBlocks * BlockSize, Sums: make([]uint32, MaxRecordBlocks)}
	for i := range MaxRecordExtents {
		n := uint32(BlockSize)
		if i == 0 {
			n = (MaxRecordBlocks - MaxRecordExtents + 1) * BlockSize
		}
		full.Extents = append(full.Extents, RecordExtent{FileOff: int64(i) << 30, Len: n, Version: 1})
		full.Sums[i] = uint32(i) + 1
	}
	full.Sums[MaxRecordBlocks-1] = 0xfeedf00d
	if err := EncodeHeader(&full, buf); err != nil {
		t.Fatal(err)
	}
	if err := DecodeHeader(buf, &got); err != nil || !slices.Equal(got.Sums, full.Sums) || len(got.Extents) != MaxRecordExtents {
		t.Fatalf("full header: %v, %d extents", err, len(got.Extents))
	}
	bad = full
	bad.DataLen += BlockSize
	bad.Sums = append(bad.Sums, 0)
	bad.Extents = slices.Clone(full.Extents)
	bad.Extents[0].Len += BlockSize
	if err := EncodeHeader(&bad, buf); err == nil {
		t.Error("header with too many blocks was encoded")
	}
}

func FuzzDecodeHeader(f *testing.F) {
	buf := make([]byte, BlockSize)
	h := RecordHeader{Kind: KindGC, Seq: 9, File: 1, Size: SizeUnknown, DataLen: BlockSize,
		Extents: []RecordExtent{{FileOff: BlockSize, Len: BlockSize, Version: 3}}, Sums: []uint32{0xabcd}}
	if err := EncodeHeader(&h, buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf)
	f.Add(make([]byte, BlockSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h RecordHeader
		if err := DecodeHeader(b, &h); err != nil {
			return
		}
		// Whatever decodes must encode back to the same block.
		out := make([]byte, BlockSize)
		if err := EncodeHeader(&h, out); err != nil {
			t.Fatalf("decoded header does not encode: %v", err)
		}
		if got := out[:BlockSize]; string(got) != string(b[:BlockSize]) {
			// Reserved bytes may differ only if the checksum still matched,
			// which a valid decode rules out except for padding; compare
			// decoded fields instead.
			var h2 RecordHeader
			if err := DecodeHeader(out, &h2); err != nil || h2.Seq != h.Seq || len(h2.Extents) != len(h.Extents) || !slices.Equal(h2.Sums, h.Sums) {
				t.Fatalf("re-encoded header differs: %v", err)
			}
		}
	})
}
