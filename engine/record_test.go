package engine

import (
	"errors"
	"testing"
)

func TestRecordHeaderRoundTrip(t *testing.T) {
	h := RecordHeader{Kind: KindData, Seq: 42, File: 7, Size: 123456, DataLen: 3 * BlockSize, DataCRC: 0xdeadbeef,
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
		got.DataLen != h.DataLen || got.DataCRC != h.DataCRC || len(got.Extents) != 2 || got.Extents[1] != h.Extents[1] {
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
}

func FuzzDecodeHeader(f *testing.F) {
	buf := make([]byte, BlockSize)
	h := RecordHeader{Kind: KindGC, Seq: 9, File: 1, Size: SizeUnknown, DataLen: BlockSize,
		Extents: []RecordExtent{{FileOff: BlockSize, Len: BlockSize, Version: 3}}}
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
			if err := DecodeHeader(out, &h2); err != nil || h2.Seq != h.Seq || len(h2.Extents) != len(h.Extents) {
				t.Fatalf("re-encoded header differs: %v", err)
			}
		}
	})
}
