package engine

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzOpenDamagedImage damages a whole engine image and opens it: a real
// emu device, formatted, with files written, overwritten, fsynced,
// renamed and removed, two checkpoints and a log after the last one
// (recovery replays it), left as a crash leaves it (dmgBuild). The input
// patches bytes of the image file; then dmgGolden.run holds zonefold to
// the promise TestCorruptionAtRest holds it to: no panic, no hang, no
// wrong bytes, no name never made; every file reads back as
// acknowledged, or Open refuses naming the damage, or reads fail (EIO)
// only in the file ranges the damage hit, and fsck reports the damage. A
// file shorter or gone is a failure, but for the design limits run
// names (a log cut short, a damaged header passed over), which fsck
// must report.
//
//	go test -ldflags=-checklinkname=0 -run '^$' -fuzz FuzzOpenDamagedImage -parallel=1 ./engine/
//
// The input is a list of patches, each: a byte choosing the region of
// the image (dmgInputs: the whole file, the superblocks, the metadata
// log, the newest checkpoint, the log after it, the data records'
// headers, those after the checkpoint, the data blocks) and the kind of
// patch (XOR the bytes, write them, or zero the 4 KiB block), a u32
// offset into the region (modulo its length), a length byte and the
// bytes. Regions are found in the golden image's layout, so that an
// input means the same damage whatever UUID or exact placement the
// process's golden image got.
func FuzzOpenDamagedImage(f *testing.F) {
	dmgQuiet(f)

	// Built once per run of the target in a process (a fuzz worker
	// runs it once, for all its inputs).
	g := dmgGoldenImage(f, false)
	var inputs [dmgInputs][]dmgSpan
	inputs[dmgWhole] = []dmgSpan{{0, int64(len(g.img))}}
	for r, rs := range dmgInputRegions {
		if r != dmgWhole {
			inputs[r] = g.spansOf(rs...)
		}
		if len(inputs[r]) == 0 {
			f.Fatalf("input region %d of the golden image is empty", r)
		}
	}
	for _, seed := range dmgSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out := g.run(t, "input", dmgDamage(g.img, &inputs, in))
		if out.bad {
			t.Fatalf("%s: %s", out.class, out.why)
		}
		t.Logf("%s", out.class)
	})
}

// The regions an input's patch chooses from.
const (
	dmgWhole   = iota // the whole file, the emu's header slots too
	dmgSuper          // the two superblocks
	dmgMeta           // the metadata halves' logs
	dmgCkpt           // the newest checkpoint record
	dmgTail           // the metadata records after it
	dmgHeaders        // every data record's header block
	dmgNewHdrs        // the headers of the data records after the checkpoint
	dmgData           // the data records' data blocks
	dmgInputs
)

// dmgInputRegions is the golden image's regions each input region
// spans (dmgWhole: all of the file).
var dmgInputRegions = [dmgInputs][]int{
	dmgWhole:   nil,
	dmgSuper:   {regSuper},
	dmgMeta:    {regSuper, regNewCkpt, regOldCkpt, regTail, regOldLog},
	dmgCkpt:    {regNewCkpt},
	dmgTail:    {regTail},
	dmgHeaders: {regOldHdrs, regNewHdrs},
	dmgNewHdrs: {regNewHdrs},
	dmgData:    {regOldData, regNewData},
}

// The kinds of patch.
const (
	dmgXOR  = iota // XOR the bytes in
	dmgSet         // write them
	dmgZero        // zero the 4 KiB block
	dmgKinds
)

// dmgPatch encodes one patch of an input.
func dmgPatch(region, kind int, off uint32, p []byte) []byte {
	b := []byte{byte(kind*dmgInputs + region), 0, 0, 0, 0, byte(len(p))}
	binary.LittleEndian.PutUint32(b[1:], off)
	return append(b, p...)
}

// dmgDamage applies input in to a copy of golden, whose input regions
// are inputs: at most 8 patches, of at most 64 bytes each.
func dmgDamage(golden []byte, inputs *[dmgInputs][]dmgSpan, in []byte) []byte {
	img := bytes.Clone(golden)
	for n := 0; n < 8 && len(in) >= 6; n++ {
		region := int(in[0]) % dmgInputs
		kind := int(in[0]) / dmgInputs % dmgKinds
		at := dmgAt(inputs[region], uint64(binary.LittleEndian.Uint32(in[1:])))
		l := min(int(in[5])%65, len(in)-6)
		p := in[6 : 6+l]
		in = in[6+l:]
		switch kind {
		case dmgXOR:
			for i, b := range p {
				if at+int64(i) < int64(len(img)) {
					img[at+int64(i)] ^= b
				}
			}
		case dmgSet:
			copy(img[at:], p)
		case dmgZero:
			at -= at % BlockSize
			clear(img[at:min(at+BlockSize, int64(len(img)))])
		}
	}
	return img
}

// dmgSeeds are hand-picked damages.
func dmgSeeds() [][]byte {
	one := func(region, kind int, off uint32, p ...byte) []byte { return dmgPatch(region, kind, off, p) }
	return [][]byte{
		nil,                              // undamaged: everything reads back
		one(dmgSuper, dmgXOR, 100, 0x01), // a byte of the first superblock
		one(dmgSuper, dmgXOR, BlockSize+40, 0x10),                        // the second one's zone count
		one(dmgCkpt, dmgXOR, 200, 0x80),                                  // a byte in the newest checkpoint
		one(dmgCkpt, dmgXOR, 8, 0x01),                                    // its header's sequence number
		one(dmgTail, dmgXOR, 0, 0xff),                                    // the first operation after it
		one(dmgNewHdrs, dmgXOR, 60, 0x04),                                // a data record header after it
		one(dmgHeaders, dmgXOR, 0, 0xff),                                 // the first record's magic
		one(dmgData, dmgXOR, 5000, 0x20),                                 // a data block
		one(dmgMeta, dmgZero, 0),                                         // a zeroed metadata block (the superblock)
		one(dmgMeta, dmgZero, BlockSize),                                 // the first metadata record
		one(dmgNewHdrs, dmgSet, 16, 1, 0, 0, 0, 0, 0, 0, 0),              // a header's file id
		append(one(dmgCkpt, dmgZero, 0), one(dmgSuper, dmgXOR, 0, 1)...), // both
		one(dmgWhole, dmgXOR, 0, 0xff, 0xff, 0xff, 0xff),                 // the emu's header slot
	}
}
