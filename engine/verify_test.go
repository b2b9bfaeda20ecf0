package engine

import (
	"bytes"
	"errors"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// flipByte changes one byte of the device's medium behind the engine's
// back, at device offset dev.
func flipByte(t *testing.T, devName string, dev int64) {
	t.Helper()
	d, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	at := d.(*zns.Emu).FileOffset(dev)
	d.Close()
	flipFileByte(t, devName, at)
}

// flipFileByte changes the byte at offset at of the emu device devName's
// backing file.
func flipFileByte(t *testing.T, devName string, at int64) {
	t.Helper()
	path := strings.TrimPrefix(devName[:strings.IndexByte(devName, '?')], "emu:")
	fh, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	b := []byte{0}
	if _, err := fh.ReadAt(b, at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := fh.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
}

// devOf is where file offset off of name lives on the device.
func devOf(t *testing.T, e *Engine, name string, off int64) extent {
	t.Helper()
	f := e.byName[name]
	var got extent
	found := false
	f.mu.RLock()
	f.ext.lookup(off, 1, func(x extent) { got, found = x, true })
	f.mu.RUnlock()
	if !found {
		t.Fatalf("%s: nothing mapped at %d", name, off)
	}
	return got
}

func pattern(n int, seed byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = seed + byte(i/BlockSize) + byte(i*7)
	}
	return p
}

// readBlock reads the 4 KiB block of name at off with a cold cache for
// that block.
func readBlock(e *Engine, name string, off int64) ([]byte, error) {
	h, err := e.Open(name)
	if err != nil {
		return nil, err
	}
	// Forget is final for the file's cache state (the engine's remove);
	// the live file's next access makes a new, empty one.
	e.cache.Forget(h.f.id)
	h.f.cached.Store(nil)
	p := make([]byte, BlockSize)
	_, err = h.ReadAt(p, off)
	return p, err
}

// reopenWithFlippedByte formats an emu device, writes want (at least
// 12 KiB) synced to file "a", flips one byte in a's block at 8 KiB on
// the device and reopens: the engine it returns reads that block's
// checksum failing and the rest of a intact. The caller closes it.
func reopenWithFlippedByte(t *testing.T, want []byte) (*Engine, string) {
	t.Helper()
	devName := emuDevice(t, 16, "1M", "")
	e := formatOpen(t, devName, smallConfig())
	createSynced(t, e, "a", want)
	bad := devOf(t, e, "a", 8192).dev + 100
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	flipByte(t, devName, bad)
	return reopen(t, devName, smallConfig()), devName
}

// A flipped data byte is EIO to the reader, counted in the stats, and
// damage to fsck; the blocks around it read back intact.
func TestReadOfAFlippedByteIsEIO(t *testing.T) {
	want := pattern(64<<10, 1)
	e, devName := reopenWithFlippedByte(t, want)
	defer e.Close()
	for _, off := range []int64{0, 4096, 12288, 60 << 10} {
		got, err := readBlock(e, "a", off)
		if err != nil || !bytes.Equal(got, want[off:off+BlockSize]) {
			t.Fatalf("block at %d: %v (intact %v)", off, err, bytes.Equal(got, want[off:off+BlockSize]))
		}
	}
	for range 2 { // not cached: every read checks again
		_, err := readBlock(e, "a", 8192)
		if !errors.Is(err, syscall.EIO) || !errors.Is(err, ErrChecksum) {
			t.Fatalf("read of the flipped block: %v, want EIO (checksum)", err)
		}
	}
	// A read that covers it fails whole.
	h, _ := e.Open("a")
	if _, err := h.ReadAt(make([]byte, 64<<10), 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read of the whole file: %v, want EIO", err)
	}
	st := e.Stats()
	if st.ChecksumErrs < 3 || st.ReadErrs != 0 {
		t.Fatalf("stats: %d checksum errors, %d read errors; want >= 3 and 0", st.ChecksumErrs, st.ReadErrs)
	}
	e.crashForTest()
	emuOf(t, e).Close()
	rep := fsckOf(t, devName)
	if !strings.Contains(strings.Join(rep.Problems, "\n"), "checksum fails") {
		t.Fatalf("fsck: problems %v", rep.Problems)
	}
}

// Records of one shared zone stream: a, then b.
func twoFilesOneZone(t *testing.T, devName string, cfg Config) (*Engine, []byte, []byte) {
	t.Helper()
	e := formatOpen(t, devName, cfg)
	a, b := pattern(64<<10, 1), pattern(96<<10, 2)
	createSynced(t, e, "a", a)
	createSynced(t, e, "b", b)
	if za, zb := e.zoneAt(devOf(t, e, "a", 0).dev), e.zoneAt(devOf(t, e, "b", 0).dev); za != zb {
		t.Fatalf("a in zone %d, b in zone %d: want one zone", za.idx, zb.idx)
	}
	return e, a, b
}

// A block that went bad in the middle of a zone's log does not end
// recovery's scan there: the acknowledged record behind it is replayed
// (before, recovery called the record torn and lost b), and the bad
// block still reads EIO.
func TestRecoveryReplaysPastABadBlock(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	cfg.Policy = PolicyNone
	e, a, b := twoFilesOneZone(t, devName, cfg)
	bad := devOf(t, e, "a", 4096).dev + 7
	e.crashForTest() // no checkpoint: recovery replays both records
	emuOf(t, e).Close()
	flipByte(t, devName, bad)
	e = reopen(t, devName, cfg)
	defer e.Close()
	if got := readAll(t, e, "b"); !bytes.Equal(got, b) {
		t.Fatal("b, behind the bad block in its zone, came back wrong")
	}
	if got, err := readBlock(e, "a", 0); err != nil || !bytes.Equal(got, a[:BlockSize]) {
		t.Fatalf("a's first block: %v", err)
	}
	if _, err := readBlock(e, "a", 4096); !errors.Is(err, ErrChecksum) {
		t.Fatalf("a's bad block: %v, want a checksum error", err)
	}
}

// GC moves a bad block with the checksum it was written with: it reads
// EIO after the move as before (it is not laundered into a good one), and
// the rest of the file moves intact.
func TestGCKeepsABadBlockBad(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	cfg.Policy = PolicyNone
	cfg.GC.Disabled = true
	e, a, _ := twoFilesOneZone(t, devName, cfg)
	bad := devOf(t, e, "a", 4096).dev + 7
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	flipByte(t, devName, bad)
	e = reopen(t, devName, cfg)
	victim := e.zoneAt(devOf(t, e, "a", 0).dev)
	gen := victim.gen.Load()
	if err := e.Remove("b"); err != nil {
		t.Fatal(err)
	}
	// Collect a's zone as a GC pass would.
	victim.state.Store(zoneGC)
	if ok, err := e.gc.collect(victim, minGCGain); err != nil || !ok {
		t.Fatalf("collect: %v, %v", ok, err)
	}
	if victim.gen.Load() == gen {
		t.Fatal("the reset zone kept its generation: cached sums of it would be used again")
	}
	check := func(when string) {
		t.Helper()
		if z := e.zoneAt(devOf(t, e, "a", 0).dev); z == victim {
			t.Fatalf("%s: a still in the victim", when)
		}
		for off := int64(0); off < int64(len(a)); off += BlockSize {
			got, err := readBlock(e, "a", off)
			if off == 4096 {
				if !errors.Is(err, ErrChecksum) {
					t.Fatalf("%s: the moved bad block: %v, want a checksum error", when, err)
				}
				continue
			}
			if err != nil || !bytes.Equal(got, a[off:off+BlockSize]) {
				t.Fatalf("%s: a at %d: %v", when, off, err)
			}
		}
	}
	check("after GC")
	e.crashForTest()
	emuOf(t, e).Close()
	rep := fsckOf(t, devName)
	if !strings.Contains(strings.Join(rep.Problems, "\n"), "checksum fails") {
		t.Fatalf("fsck after GC moved the bad block: problems %v", rep.Problems)
	}
	e = reopen(t, devName, cfg)
	defer e.Close()
	check("after recovery")
}

// The block sums of a record read once are kept: another block of the
// same record needs no second header read.
func TestSumCacheSavesHeaderReads(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	// Readahead's read of the record would race the first read's for
	// its header: each misses the sums the other is about to put.
	cfg.ReadaheadMax = -1
	e := formatOpen(t, devName, cfg)
	defer e.Close()
	want := pattern(64<<10, 3)
	createSynced(t, e, "a", want)
	before := e.Stats().SumReads
	for _, off := range []int64{0, 4096, 32768, 0} {
		if got, err := readBlock(e, "a", off); err != nil || !bytes.Equal(got, want[off:off+BlockSize]) {
			t.Fatalf("read at %d: %v", off, err)
		}
	}
	if n := e.Stats().SumReads - before; n != 1 {
		t.Fatalf("%d header reads for four reads of one record, want 1", n)
	}
}

func TestSumCache(t *testing.T) {
	c := newSumCache(2 * sumWays * sumEntryBytes) // two sets of four
	sums := make([]uint32, 40)                    // three chunks
	for i := range sums {
		sums[i] = uint32(1000 + i)
	}
	dst := make([]uint32, 20)
	if c.get(4096, 0, 0, dst) {
		t.Fatal("hit in an empty cache")
	}
	c.put(4096, 0, sums)
	if !c.get(4096, 0, 10, dst) || !slices.Equal(dst, sums[10:30]) {
		t.Fatalf("get across chunks: %v", dst)
	}
	if !c.get(4096, 0, 38, dst[:2]) || dst[0] != 1038 || dst[1] != 1039 {
		t.Fatalf("get of the last, short chunk: %v", dst[:2])
	}
	if c.get(4096, 1, 0, dst) {
		t.Fatal("hit for another generation of the zone")
	}
	if c.get(4096, 0, 30, dst) {
		t.Fatal("hit for blocks past the record")
	}
	// Filling past capacity evicts the least recently used.
	for i := range int64(16) {
		c.put((i+2)*BlockSize, 0, sums[:4])
	}
	hits := 0
	for i := range int64(16) {
		if c.get((i+2)*BlockSize, 0, 0, dst[:4]) {
			hits++
		}
	}
	if hits == 0 || hits > 8 {
		t.Fatalf("%d of 16 entries in an 8-entry cache", hits)
	}
}

// A device formatted by the zonefold before per-block checksums is
// refused with the way out, not misread.
func TestOldFormatIsRefused(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	e := formatOpen(t, devName, smallConfig())
	mz := e.sb.MetaZones
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	rewriteSuperblocks(t, devName, mz, func(_ int, blk []byte) {
		sb, err := decodeSuperblock(blk)
		if err != nil {
			t.Fatal(err)
		}
		sb.encode(blk)
		blk[4] = 1 // format 1
		binaryPutCRC(blk)
	})
	_, err := Open(devName, smallConfig())
	if !errors.Is(err, ErrOldFormat) || !strings.Contains(err.Error(), "format the device again") {
		t.Fatalf("open of a format-1 device: %v", err)
	}
}

func binaryPutCRC(blk []byte) {
	c := Checksum(blk[:BlockSize-4])
	blk[BlockSize-4], blk[BlockSize-3], blk[BlockSize-2], blk[BlockSize-1] = byte(c), byte(c>>8), byte(c>>16), byte(c>>24)
}
