package engine

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/zonefold/zonefold/zns"
)

// salvageSink collects Salvage's copies in memory.
type salvageSink map[string]*salvageCopy

type salvageCopy struct{ b []byte }

func (c *salvageCopy) WriteAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > int64(len(c.b)) {
		return 0, fmt.Errorf("write past the size: %d+%d > %d", off, len(p), len(c.b))
	}
	return copy(c.b[off:], p), nil
}

func (s salvageSink) create(name string, size int64) (io.WriterAt, error) {
	if s[name] != nil {
		return nil, fmt.Errorf("%q twice", name)
	}
	c := &salvageCopy{b: make([]byte, size)}
	s[name] = c
	return c, nil
}

// salvage runs Salvage on devName (closed) within a bound.
func salvage(t *testing.T, devName string) (*SalvageReport, salvageSink) {
	t.Helper()
	return salvageAfterWalk(t, devName, nil)
}

// salvageAfterWalk is salvage, calling hook (if not nil) with each
// file's name before Salvage creates its copy: after fsck's walk, as
// the media may change under it.
func salvageAfterWalk(t *testing.T, devName string, hook func(name string)) (*SalvageReport, salvageSink) {
	t.Helper()
	sink := salvageSink{}
	create := sink.create
	if hook != nil {
		create = func(name string, size int64) (io.WriterAt, error) {
			hook(name)
			return sink.create(name, size)
		}
	}
	var rep *SalvageReport
	var err error
	h19gBounded(t, "Salvage", time.Minute, func() {
		dev, oerr := zns.Open(devName, zns.Options{})
		if oerr != nil {
			err = oerr
			return
		}
		defer dev.Close()
		rep, err = Salvage(dev, create)
	})
	if err != nil {
		t.Fatalf("salvage: %v", err)
	}
	return rep, sink
}

// salvageFile is the report's entry of name.
func salvageFile(t *testing.T, rep *SalvageReport, name string) SalvagedFile {
	t.Helper()
	for _, f := range rep.Files {
		if f.Name == name {
			return f
		}
	}
	t.Fatalf("salvage did not hand %q to its sink (files %+v)", name, rep.Files)
	return SalvagedFile{}
}

// A healthy device: every file, overwritten, truncated, relocated by
// GC, with names holding '/', is copied byte for byte, and the report is
// complete.
func TestSalvageHealthyDeviceCopiesEveryFileExactly(t *testing.T) {
	devName := emuDevice(t, 20, "1M", "")
	e := formatOpen(t, devName, smallConfig())
	rng := rand.New(rand.NewSource(43))
	want := map[string][]byte{}
	write := func(name string, off int64, n int) { writeSyncedModel(t, e, rng, want, name, off, n) }
	for round := range 3 {
		write("big", 0, 2<<20+777)
		for i := range 20 {
			write(fmt.Sprintf("dir/f%d", i%4), int64(rng.Intn(300))*1000, 1+rng.Intn(30<<10))
		}
		h, err := e.OpenFile("dir/f1", 0)
		if err != nil {
			t.Fatal(err)
		}
		size := int64(rng.Intn(len(want["dir/f1"])))
		if err := h.Truncate(size); err != nil {
			t.Fatal(err)
		}
		h.Close()
		want["dir/f1"] = want["dir/f1"][:size]
		gcThenCheckpoint(t, e, round == 1)
	}
	if _, err := e.Create("empty"); err != nil {
		t.Fatal(err)
	}
	want["empty"] = nil
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	rep, sink := salvage(t, devName)
	if !rep.Complete() {
		t.Errorf("a healthy device's salvage is not complete: problems %q, files %+v", rep.Fsck.Problems, rep.Files)
	}
	checkCopies(t, sink, want)
}

// The newest checkpoint is damaged (a flipped byte: its checksum fails)
// with the log after it, holding a remove of "a", the reset GC logged of
// a's zones and the create of "b", whose data then filled those zones:
// Open refuses. Salvage starts from the older checkpoint, which still
// maps "a" in the zones b reused: it copies "keep" whole, reports every
// range of a whose record is gone, and never fills a with b's bytes.
func TestSalvageDamagedNewestCheckpointNeverServesAReusedZone(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	e := formatOpen(t, devName, smallConfig())
	keep := bytes.Repeat([]byte("keep...."), 4<<10)
	createSynced(t, e, "keep", keep).Close()
	dataA := bytes.Repeat([]byte{0xaa}, 3<<20)
	createSynced(t, e, "a", dataA).Close()
	var aExt []extent
	e.byName["a"].ext.each(func(x extent) bool { aExt = append(aExt, x); return true })
	if err := e.checkpoint(); err != nil { // the older checkpoint
		t.Fatal(err)
	}
	if err := e.checkpoint(); err != nil { // the newest
		t.Fatal(err)
	}
	newest := int64(e.sb.MetaZones[e.meta.active])*e.geo.ZoneSize + BlockSize
	if err := e.Remove("a"); err != nil {
		t.Fatal(err)
	}
	resets := e.Stats().GCResets
	for range 8 {
		if moved, err := e.gc.pass(gcUrgent); err != nil || !moved {
			break
		}
	}
	if e.Stats().GCResets == resets {
		t.Fatal("set-up: GC reset none of a's zones")
	}
	// The zones GC reset are taken first (the pool is FIFO; the test
	// saves filling the device to reach them).
	e.placer.mu.Lock()
	var reset, rest []*zone
	for _, z := range e.placer.free {
		if slicesHasZone(aExt, e, z) {
			reset = append(reset, z)
		} else {
			rest = append(rest, z)
		}
	}
	e.placer.free = append(reset, rest...)
	e.placer.mu.Unlock()
	dataB := bytes.Repeat([]byte{0xbb}, 3<<20)
	createSynced(t, e, "b", dataB).Close()
	e.crashForTest()
	emuOf(t, e).Close()

	// a's old records' places hold b's now.
	reused := false
	for _, x := range aExt {
		reused = reused || bytes.Equal(salvageRaw(t, devName, x.dev, BlockSize), dataB[:BlockSize])
	}
	if !reused {
		t.Fatal("set-up: b's data did not land where a's was")
	}
	salvageFlip(t, devName, newest+metaHdrLen+4) // in the newest checkpoint's payload
	if _, err := h19gOpen(t, devName); err == nil || !strings.Contains(err.Error(), "refusing to open") {
		t.Fatalf("Open with the newest checkpoint damaged: %v, want a refusal", err)
	}

	rep, sink := salvage(t, devName)
	if rep.Complete() {
		t.Error("salvage past a damaged checkpoint says it recovered everything")
	}
	if !strings.Contains(strings.Join(rep.Fsck.Problems, "\n"), "salvaged past a refusal") {
		t.Errorf("the report does not say what salvage went past: %q", rep.Fsck.Problems)
	}
	if c := sink["keep"]; c == nil || !bytes.Equal(c.b, keep) {
		t.Errorf("keep, in both checkpoints, not copied whole (%v)", salvageFile(t, rep, "keep"))
	}
	if sink["b"] != nil {
		t.Errorf("b, created after the damaged checkpoint, copied")
	}
	a := sink["a"]
	if a == nil {
		t.Fatal("a, in the older checkpoint, not handed to the sink")
	}
	fa := salvageFile(t, rep, "a")
	if len(fa.Holes) == 0 {
		t.Fatalf("a's records in the reused zones reported as recovered: %+v", fa)
	}
	inHole := func(off int64) bool {
		for _, h := range fa.Holes {
			if off >= h.Off && off < h.Off+h.Len {
				return true
			}
		}
		return false
	}
	for off, c := range a.b {
		switch {
		case c == 0xbb:
			t.Fatalf("a's copy holds b's bytes at %d", off)
		case inHole(int64(off)) && c != 0:
			t.Fatalf("a's copy has %#x at %d, inside a reported hole", c, off)
		case !inHole(int64(off)) && c != dataA[off]:
			t.Fatalf("a's copy has %#x at %d, outside the holes, want %#x", c, off, dataA[off])
		}
	}
	for _, h := range fa.Holes {
		if !strings.Contains(h.Why, "no record") {
			t.Errorf("a's hole %+v: why does not say no record carries it", h)
		}
	}
}

// slicesHasZone: one of xs lies in zone z.
func slicesHasZone(xs []extent, e *Engine, z *zone) bool {
	for _, x := range xs {
		if e.zoneAt(x.dev) == z {
			return true
		}
	}
	return false
}

// salvageOneFile formats a device holding file "f", 64 KiB of pattern
// in one record, and closes it: f's data, and its extent.
func salvageOneFile(t *testing.T, pattern string) (string, []byte, extent) {
	t.Helper()
	devName := emuDevice(t, 16, "1M", "")
	e := formatOpen(t, devName, smallConfig())
	data := bytes.Repeat([]byte(pattern), 64<<10/len(pattern))
	createSynced(t, e, "f", data).Close()
	var x extent
	e.byName["f"].ext.each(func(y extent) bool { x = y; return false })
	if n := e.byName["f"].ext.count(); n != 1 {
		t.Fatalf("f has %d extents, want 1", n)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	return devName, data, x
}

// A data block whose checksum fails: the file gets a hole of that block
// (zeros), the report names it, and the rest is copied.
func TestSalvageDamagedDataBlockIsAHole(t *testing.T) {
	devName, data, x := salvageOneFile(t, "salvage.")
	salvageFlip(t, devName, x.dev+3*BlockSize+10) // in f's fourth block
	rep, sink := salvage(t, devName)
	if rep.Complete() {
		t.Error("salvage with a damaged block says it recovered everything")
	}
	f := salvageFile(t, rep, "f")
	want := append([]byte(nil), data...)
	clear(want[x.off+3*BlockSize : x.off+4*BlockSize])
	if len(f.Holes) != 1 || f.Holes[0].Off != x.off+3*BlockSize || f.Holes[0].Len != BlockSize {
		t.Errorf("holes %+v, want the one block at %d", f.Holes, x.off+3*BlockSize)
	}
	if c := sink["f"]; c == nil || !bytes.Equal(c.b, want) {
		t.Errorf("f's copy is not the data with the damaged block zeroed")
	}
}

// salvageRaw reads n bytes of emu device devName (closed) at device
// offset off, from its backing file.
func salvageRaw(t *testing.T, devName string, off int64, n int) []byte {
	t.Helper()
	fh, fo := emuBacking(t, devName, off, os.O_RDONLY)
	defer fh.Close()
	p := make([]byte, n)
	if _, err := fh.ReadAt(p, fo); err != nil {
		t.Fatal(err)
	}
	return p
}

// salvageFlip flips the bits of the byte at device offset off of emu
// device devName (closed): damage at rest.
func salvageFlip(t *testing.T, devName string, off int64) {
	t.Helper()
	b := salvageRaw(t, devName, off, 1)
	h41bPatch(t, devName, off, []byte{^b[0]})
}

// A block damaged after fsck's walk checked it (between the walk and the
// copy: the media changed under salvage) is not copied: Salvage checks
// each block it copies against its record's checksum again.
func TestSalvageRechecksWhatItCopies(t *testing.T) {
	devName, data, x := salvageOneFile(t, "recheck.")
	rep, sink := salvageAfterWalk(t, devName, func(string) {
		salvageFlip(t, devName, x.dev+5*BlockSize+1) // after the walk
	})
	f := salvageFile(t, rep, "f")
	if len(f.Holes) != 1 || f.Holes[0].Off != x.off+5*BlockSize || f.Holes[0].Len != BlockSize || !strings.Contains(f.Holes[0].Why, "no longer matches") {
		t.Fatalf("holes %+v, want block 5, no longer matching its checksum", f.Holes)
	}
	want := append([]byte(nil), data...)
	clear(want[x.off+5*BlockSize : x.off+6*BlockSize])
	if !bytes.Equal(sink["f"].b, want) {
		t.Errorf("f's copy is not the data with the block damaged after the walk zeroed")
	}
	if rep.Complete() {
		t.Error("the report is complete with a hole")
	}
}

// salvageImage is a hash of emu device devName's (closed) whole backing
// file: its zone table (write pointers, conditions, flush checksums) and
// every zone's bytes.
func salvageImage(t *testing.T, devName string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(strings.TrimPrefix(devName[:strings.IndexByte(devName, '?')], "emu:"))
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// Salvage past a damaged newest checkpoint, on a device whose recovery
// would write if it could (a remove logged after the checkpoint leaves
// dead zones to reset, zones left open by a crash to finish, a
// checkpoint to write, GC's work), changes nothing on it: the backing
// file, zone table and data, is the same byte for byte after.
func TestSalvageNeverWritesTheDevice(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	e := formatOpen(t, devName, smallConfig())
	createSynced(t, e, "keep", bytes.Repeat([]byte("keep...."), 4<<10)).Close()
	createSynced(t, e, "a", bytes.Repeat([]byte{0xaa}, 3<<20)).Close()
	if err := e.checkpoint(); err != nil { // the older checkpoint
		t.Fatal(err)
	}
	if err := e.checkpoint(); err != nil { // the newest
		t.Fatal(err)
	}
	newest := int64(e.sb.MetaZones[e.meta.active])*e.geo.ZoneSize + BlockSize
	if err := e.Remove("a"); err != nil { // its zones: dead at recovery
		t.Fatal(err)
	}
	createSynced(t, e, "b", bytes.Repeat([]byte{0xbb}, 1<<20+333)).Close()
	h, err := e.Create("c") // not synced: a zone left open
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.WriteAt(bytes.Repeat([]byte{0xcc}, 40<<10), 0); err != nil {
		t.Fatal(err)
	}
	h.Close()
	e.crashForTest()
	emuOf(t, e).Close()
	salvageFlip(t, devName, newest+metaHdrLen+4) // in the newest checkpoint's payload
	if _, err := h19gOpen(t, devName); err == nil || !strings.Contains(err.Error(), "refusing to open") {
		t.Fatalf("Open with the newest checkpoint damaged: %v, want a refusal", err)
	}
	before := salvageImage(t, devName)
	rep, sink := salvage(t, devName)
	if !strings.Contains(strings.Join(rep.Fsck.Problems, "\n"), "salvaged past a refusal") {
		t.Fatalf("set-up: salvage did not go past a refusal: %q", rep.Fsck.Problems)
	}
	if sink["keep"] == nil {
		t.Fatalf("set-up: keep not copied: %+v", rep.Files)
	}
	if after := salvageImage(t, devName); after != before {
		t.Fatal("salvage changed the device: its backing file differs after")
	}
	// And on a healthy device, whose recovery writes a checkpoint when
	// Open recovers it.
	devName2, _, _ := salvageOneFile(t, "healthy.")
	before = salvageImage(t, devName2)
	salvage(t, devName2)
	if after := salvageImage(t, devName2); after != before {
		t.Fatal("salvage changed a healthy device")
	}
}

// Files whose sizes are not whole blocks, truncated to the middle of a
// block and written past the cut again, some only in the log after the
// last checkpoint (replayed): each copy is exactly the file, its length
// the recovered size, the bytes past a cut zeros, and no hole.
func TestSalvageUnalignedSizesAndCutsCopyExactly(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	e := formatOpen(t, devName, smallConfig())
	rng := rand.New(rand.NewSource(4343))
	want := map[string][]byte{}
	write := func(name string, off int64, n int) { writeSyncedModel(t, e, rng, want, name, off, n) }
	cut := func(name string, size int64) {
		h, err := e.OpenFile(name, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		if err := h.Truncate(size); err != nil {
			t.Fatal(err)
		}
		if err := h.Sync(); err != nil {
			t.Fatal(err)
		}
		b := want[name]
		if size < int64(len(b)) {
			b = b[:size]
		} else {
			b = append(b, make([]byte, size-int64(len(b)))...)
		}
		want[name] = b
	}
	for i := range 6 {
		name := fmt.Sprintf("u%d", i)
		write(name, 0, 3*BlockSize+1+rng.Intn(BlockSize-2))
		cut(name, int64(BlockSize+1+rng.Intn(BlockSize-2)))
		write(name, int64(2*BlockSize+100+rng.Intn(3000)), 1+rng.Intn(BlockSize))
		if i == 2 {
			if err := e.checkpoint(); err != nil {
				t.Fatal(err)
			}
		}
	}
	write("tiny", 0, 1)
	write("grown", 5, 10)
	cut("grown", 3*BlockSize+7) // a size set by a cut alone
	e.crashForTest()
	emuOf(t, e).Close()
	rep, sink := salvage(t, devName)
	for name, b := range want {
		c := sink[name]
		f := salvageFile(t, rep, name)
		if c == nil || f.Size != int64(len(b)) || len(c.b) != len(b) {
			t.Errorf("%q: copied size %d (report %d), want %d", name, len(c.b), f.Size, len(b))
			continue
		}
		if len(f.Holes) > 0 || f.Err != nil {
			t.Errorf("%q: holes %+v err %v on a healthy device", name, f.Holes, f.Err)
		}
		if !bytes.Equal(c.b, b) {
			t.Errorf("%q: copy differs from the file", name)
		}
	}
	if !rep.Complete() {
		t.Errorf("not complete: %q", rep.Fsck.Problems)
	}
}

// The media changed after fsck's walk so that where f's record was
// there is now another whole, valid record (g's, its header and data):
// the recheck reads a header that decodes and blocks that match its
// sums, but they are g's. f's copy must not hold g's bytes.
func TestSalvageRecheckRefusesAnotherFilesRecord(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	e := formatOpen(t, devName, smallConfig())
	dataF := bytes.Repeat([]byte("ffffffff"), 8<<10)
	dataG := bytes.Repeat([]byte("gggggggg"), 8<<10)
	createSynced(t, e, "f", dataF).Close()
	createSynced(t, e, "g", dataG).Close()
	var xf, xg extent
	e.byName["f"].ext.each(func(y extent) bool { xf = y; return false })
	e.byName["g"].ext.each(func(y extent) bool { xg = y; return false })
	if e.byName["f"].ext.count() != 1 || e.byName["g"].ext.count() != 1 || xf.dev-xf.hdr != xg.dev-xg.hdr {
		t.Fatalf("set-up: f and g are not one record each of the same shape: %+v %+v", xf, xg)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	recLen := int(xg.dev - xg.hdr + xg.len)
	g := salvageRaw(t, devName, xg.hdr, recLen)
	rep, sink := salvageAfterWalk(t, devName, func(name string) {
		if name == "f" { // after the walk
			h41bPatch(t, devName, xf.hdr, g)
		}
	})
	if c := sink["f"]; c == nil || bytes.Contains(c.b, []byte("gggg")) {
		t.Fatalf("f's copy holds g's bytes (holes %+v)", salvageFile(t, rep, "f").Holes)
	}
	if f := salvageFile(t, rep, "f"); len(f.Holes) != 1 || f.Holes[0].Len != int64(len(dataF)) {
		t.Errorf("f's holes %+v, want the whole file", f.Holes)
	}
	if rep.Complete() {
		t.Error("complete with f not recovered")
	}
}
