package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/zonefold/zonefold/zns"
)

// FuzzOpenDamagedImage damages a whole engine image and opens it: a real
// emu device, formatted, with files written, fsynced, renamed and removed,
// two checkpoints and a log after the last one (recovery replays it),
// left as a crash leaves it. The input patches bytes of the image file;
// then Open, reads of every file, Close, Fsck and a second Open must
// neither panic nor hang, and nothing read may differ from what was
// acknowledged: damage may lose data (EIO, a file shorter or gone, Open
// refusing the device), never show wrong bytes or a name never made.
//
//	go test -ldflags=-checklinkname=0 -run '^$' -fuzz FuzzOpenDamagedImage -parallel=1 ./engine/
//
// The input is a list of patches, each: a byte choosing the region of
// the image (dmgRegions: the whole file, the superblocks, the metadata
// log, the newest checkpoint, the log after it, the data records'
// headers, those after the checkpoint, the data blocks) and the kind of
// patch (XOR the bytes, write them, or zero the 4 KiB block), a u32
// offset into the region (modulo its length), a length byte and the
// bytes. Regions are found in the golden image's layout, so that an
// input means the same damage whatever UUID or exact placement the
// process's golden image got.
func FuzzOpenDamagedImage(f *testing.F) {
	// A damaged device is warned about, at length: thousands of
	// warnings a second would bury the fuzzer's own output.
	logger := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	f.Cleanup(func() { slog.SetDefault(logger) })

	g := dmgGoldenImage(f)
	for _, seed := range dmgSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		img, changed := g.damage(in)
		cut := g.changedIn(img, dmgTail)
		if err := os.WriteFile(g.path, img, 0o644); err != nil {
			t.Fatal(err)
		}
		devName := "emu:" + g.path
		e, err := h19gOpen(t, devName)
		synced := false
		if err != nil {
			// Refusing a damaged device is allowed: one error, no
			// panic. An undamaged one must open.
			if !changed {
				t.Fatalf("open of the undamaged image: %v", err)
			}
			t.Logf("open refused: %v", err)
		} else {
			g.check(t, e, "first open", !changed, cut, nil)
			// Writes on the recovered file system go where
			// recovery said there is room: they must not land on
			// what it still maps, nor it on them.
			h19gBounded(t, "write", time.Minute, func() { synced = g.writeNew(t, e) })
			g.check(t, e, "after a write", !changed, cut, g.extra)
			h19gBounded(t, "Close", time.Minute, func() {
				if err := e.Close(); err != nil {
					t.Logf("close: %v", err)
					synced = false
				}
			})
		}
		var rep *FsckReport
		var ferr error
		rep, ferr = h19gFsck(t, devName)
		if ferr == nil && !changed && len(rep.Problems) > 0 {
			t.Fatalf("fsck of the undamaged image: %v", rep.Problems)
		}
		if err != nil {
			return
		}
		// Recovery wrote a checkpoint of what it found: it must not
		// have made damage into wrong bytes.
		e2, err := h19gOpen(t, devName)
		if err != nil {
			t.Fatalf("second open, after the first recovered the damaged image: %v", err)
		}
		g.check(t, e2, "second open", !changed, cut, g.extra)
		if synced {
			// fsynced, and closed cleanly: all of it is there.
			h19gBounded(t, "read", time.Minute, func() {
				h, err := e2.Open(dmgNew)
				if err != nil {
					t.Errorf("second open: %q, fsynced, is gone: %v", dmgNew, err)
					return
				}
				defer h.Close()
				if why := g.checkReads("second open", h, g.extra[dmgNew], true); why != "" {
					t.Error(why)
				}
			})
		}
		h19gBounded(t, "Close", time.Minute, func() {
			if err := e2.Close(); err != nil {
				t.Logf("second close: %v", err)
			}
		})
	})
}

// dmgSpan is a range of the image file.
type dmgSpan struct{ lo, hi int64 }

// The regions an input's patch chooses from (dmgGolden.regions).
const (
	dmgWhole   = iota // the whole file, the emu's header slots too
	dmgSuper          // the two superblocks
	dmgMeta           // the metadata halves' logs
	dmgCkpt           // the newest checkpoint record
	dmgTail           // the metadata records after it
	dmgHeaders        // every data record's header block
	dmgNewHdrs        // the headers of the data records after the checkpoint
	dmgData           // the data records' data blocks
	dmgRegions
)

// dmgGolden is the undamaged image and what it holds.
type dmgGolden struct {
	img   []byte
	path  string            // where each input's damaged copy goes
	files map[string][]byte // name: acknowledged bytes
	// older: every name a file had since the newest checkpoint, with
	// the acknowledged bytes of each file that had it (see check).
	older map[string][][]byte
	// extra: the file each input writes after Open (dmgNew).
	extra   map[string][]byte
	regions [dmgRegions][]dmgSpan // file ranges, by region
}

// dmgGoldenImage builds the golden image, once per run of the target
// in a process (a fuzz worker runs it once, for all its inputs); its
// directory goes when the target ends.
func dmgGoldenImage(tb testing.TB) *dmgGolden {
	g, err := dmgBuild()
	if g != nil {
		tb.Cleanup(func() { os.RemoveAll(filepath.Dir(g.path)) })
	}
	if err != nil {
		tb.Fatalf("golden image: %v", err)
	}
	return g
}

// dmgBytes is file tag's content from offset off, n bytes: every 8-byte
// word names the file and its offset, so a byte of another file or from
// another place never passes for the right one.
func dmgBytes(tag string, off, n int) []byte { return h19hPattern(tag, off+n)[off:] }

// dmgBuild runs the golden workload on a fresh device and keeps its
// image. It cannot use a test's helpers (it outlives the first input's
// test), so it returns errors.
func dmgBuild() (g *dmgGolden, err error) {
	dir := ""
	if st, serr := os.Stat("/dev/shm"); serr == nil && st.IsDir() {
		dir, _ = os.MkdirTemp("/dev/shm", "zonefold-dmgfuzz-")
	}
	if dir == "" {
		if dir, err = os.MkdirTemp("", "zonefold-dmgfuzz-"); err != nil {
			return nil, err
		}
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	// The directory outlives every input's test (each writes its
	// damaged copy there); dmgGoldenImage removes it.
	path := filepath.Join(dir, "dev")
	devName := fmt.Sprintf("emu:%s?zone_size=1M&zones=16", path)
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		return nil, err
	}
	if _, err := Format(dev, FormatOptions{}); err != nil {
		dev.Close()
		return nil, err
	}
	e, err := OpenDevice(dev, smallConfig())
	if err != nil {
		dev.Close()
		return nil, err
	}
	g = &dmgGolden{path: path, files: map[string][]byte{}, older: map[string][][]byte{},
		extra: map[string][]byte{dmgNew: dmgBytes("nw.", 0, 320<<10)}}
	defer func() {
		if err != nil {
			e.crashForTest()
			dev.Close()
		}
	}()
	// tag of each live name: its content (dmgBytes) follows the file
	// across renames.
	tags := map[string]string{}
	ntags := 0
	sizes := map[string]int{}
	tagSize := map[string]int{}
	// names since the newest checkpoint: name, tag pairs.
	var since [][2]string
	mark := func() {
		since = since[:0]
		for name, tag := range tags {
			since = append(since, [2]string{name, tag})
		}
	}
	write := func(name string, size int) error {
		tag, ok := tags[name]
		if !ok {
			tag = fmt.Sprintf("f%c.", 'A'+ntags)
			ntags++
			tags[name] = tag
		}
		h, err := e.OpenFile(name, OCreate)
		if err != nil {
			return err
		}
		defer h.Close()
		from := sizes[name]
		if _, err := h.WriteAt(dmgBytes(tag, from, size-from), int64(from)); err != nil {
			return err
		}
		if err := h.Sync(); err != nil {
			return err
		}
		sizes[name], tagSize[tag] = size, size
		since = append(since, [2]string{name, tag})
		return nil
	}
	rename := func(from, to string) error {
		if err := e.Rename(from, to); err != nil {
			return err
		}
		tags[to], sizes[to] = tags[from], sizes[from]
		since = append(since, [2]string{to, tags[to]})
		delete(tags, from)
		delete(sizes, from)
		return nil
	}
	remove := func(name string) error {
		delete(tags, name)
		delete(sizes, name)
		return e.Remove(name)
	}
	steps := []func() error{
		// Before the first checkpoint: files, two of them in
		// pieces, one removed, one renamed.
		func() error { return write("a", 200<<10) },
		func() error { return write("b", 300<<10) },
		func() error { return write("c", 96<<10) },
		func() error { return write("d", 64<<10) },
		func() error { return write("a", 264<<10) },
		func() error { return write("e", 500<<10) },
		func() error { return write("junk", 1200<<10) },
		func() error { return remove("b") },
		func() error { return rename("c", "c2") },
		e.checkpoint,
		// A zone emptied and collected, then another checkpoint.
		func() error { return remove("junk") },
		func() error {
			for e.gc.reclaim(nil, minGCGain) {
			}
			return nil
		},
		e.checkpoint,
		func() error { mark(); return nil },
		// After it: what recovery replays.
		func() error { return write("a", 300<<10) },
		func() error { return write("f", 150<<10) },
		func() error { return rename("d", "d2") },
		func() error { return remove("e") },
		func() error { return write("g", 40<<10) },
		func() error { return write("c2", 100<<10) },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			return nil, fmt.Errorf("step %d: %w", i, err)
		}
	}
	final := map[string][]byte{}
	for name, tag := range tags {
		g.files[name] = dmgBytes(tag, 0, sizes[name])
		final[tag] = g.files[name]
	}
	for _, nt := range since {
		// A file removed since is in none of the final names: its
		// bytes are what it was written (every write was fsynced).
		b, ok := final[nt[1]]
		if !ok {
			b = dmgBytes(nt[1], 0, tagSize[nt[1]])
		}
		g.older[nt[0]] = append(g.older[nt[0]], b)
	}
	// A crash: no checkpoint at close, so the log after the last one
	// stays to be replayed; everything the model holds was fsynced.
	sb, ckptSeq := e.sb, e.ckptSeq
	emu, ok := e.dev.(*zns.Emu)
	if !ok {
		return nil, fmt.Errorf("device is %T", e.dev)
	}
	e.crashForTest()
	if err := emu.PowerCut(); err != nil {
		return nil, err
	}
	report := make([]zns.Zone, dev.Geometry().Zones)
	n, err := dev.Report(0, report)
	if err != nil {
		return nil, err
	}
	report = report[:n]
	base := emu.FileOffset(0)
	if err := dev.Close(); err != nil {
		return nil, err
	}
	if g.img, err = os.ReadFile(path); err != nil {
		return nil, err
	}
	g.layout(sb, ckptSeq, report, base)
	for r, spans := range g.regions {
		if len(spans) == 0 {
			return nil, fmt.Errorf("region %d of the golden image is empty", r)
		}
	}
	return g, nil
}

// layout finds the regions in the image: base is where the device's
// offset 0 is in the file.
func (g *dmgGolden) layout(sb Superblock, ckptSeq uint64, report []zns.Zone, base int64) {
	g.regions[dmgWhole] = []dmgSpan{{0, int64(len(g.img))}}
	zoneAt := func(i int) int64 { return base + int64(i)*sb.ZoneSize }
	var newest dmgSpan
	var newestSeq uint64
	for h, first := range sb.MetaZones {
		g.regions[dmgSuper] = append(g.regions[dmgSuper], dmgSpan{zoneAt(first), zoneAt(first) + BlockSize})
		for z := first; z < first+sb.MetaGroup; z++ {
			if wp := report[z].WP - report[z].Start; wp > 0 {
				g.regions[dmgMeta] = append(g.regions[dmgMeta], dmgSpan{zoneAt(z), zoneAt(z) + wp})
			}
		}
		// The half's records, as recovery walks them (the zones of
		// a half are consecutive, each to capacity: the emu's
		// capacity is its zone size).
		start := zoneAt(first)
		end := start + int64(sb.MetaGroup)*sb.ZoneSize
		for off := start + BlockSize; off+BlockSize <= end; {
			mh, err := decodeMetaHeader(g.img[off : off+BlockSize])
			if err != nil || mh.fs != sb.FS() {
				break
			}
			n := metaRecordLen(mh.length)
			if off+n > end {
				break
			}
			sp := dmgSpan{off, off + n}
			switch {
			case mh.kind == metaCheckpoint && mh.seq > newestSeq:
				newest, newestSeq = sp, mh.seq
			case mh.seq > ckptSeq:
				g.regions[dmgTail] = append(g.regions[dmgTail], sp)
			}
			off += n
			_ = h
		}
	}
	g.regions[dmgCkpt] = []dmgSpan{newest}
	for z := range report {
		if z >= sb.UsedZones || sb.isMeta(z) {
			continue
		}
		wp := report[z].WP - report[z].Start
		for off := int64(0); off+BlockSize <= wp; {
			at := zoneAt(z) + off
			var h RecordHeader
			if err := DecodeHeader(g.img[at:at+BlockSize], &h); err != nil || h.FS != sb.FS() {
				break
			}
			g.regions[dmgHeaders] = append(g.regions[dmgHeaders], dmgSpan{at, at + BlockSize})
			if h.Seq > ckptSeq {
				g.regions[dmgNewHdrs] = append(g.regions[dmgNewHdrs], dmgSpan{at, at + BlockSize})
			}
			if h.DataLen > 0 {
				g.regions[dmgData] = append(g.regions[dmgData], dmgSpan{at + BlockSize, at + BlockSize + int64(h.DataLen)})
			}
			off += BlockSize + int64(h.DataLen)
		}
	}
}

// changedIn says whether img differs from the golden image in region r.
func (g *dmgGolden) changedIn(img []byte, r int) bool {
	for _, sp := range g.regions[r] {
		if !bytes.Equal(img[sp.lo:sp.hi], g.img[sp.lo:sp.hi]) {
			return true
		}
	}
	return false
}

// at is the file offset of offset off into region r, modulo its length.
func (g *dmgGolden) at(r int, off uint32) int64 {
	var total int64
	for _, s := range g.regions[r] {
		total += s.hi - s.lo
	}
	o := int64(off) % total
	for _, s := range g.regions[r] {
		if o < s.hi-s.lo {
			return s.lo + o
		}
		o -= s.hi - s.lo
	}
	panic("unreachable")
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
	b := []byte{byte(kind*dmgRegions + region), 0, 0, 0, 0, byte(len(p))}
	binary.LittleEndian.PutUint32(b[1:], off)
	return append(b, p...)
}

// damage applies input in to a copy of the image: at most 8 patches, of
// at most 64 bytes each. It reports whether a byte changed.
func (g *dmgGolden) damage(in []byte) ([]byte, bool) {
	img := bytes.Clone(g.img)
	for n := 0; n < 8 && len(in) >= 6; n++ {
		region := int(in[0]) % dmgRegions
		kind := int(in[0]) / dmgRegions % dmgKinds
		at := g.at(region, binary.LittleEndian.Uint32(in[1:]))
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
	return img, !bytes.Equal(img, g.img)
}

// check holds e to what was acknowledged: no name never made, and every
// byte read the acknowledged one (a read may fail, a file may be shorter
// or gone: damage loses data). whole: nothing was damaged, so nothing
// may be lost either. cut: the damage is in the log after the newest
// checkpoint, so the namespace may be as of any point since it (older).
//
// That is a design limit, not a bug: the walk of the half recovery
// starts from ends at a record whose checksum fails, and what follows
// it is not replayed. Whole records after an unreadable one there can be
// failed appends that were never acknowledged (metaLog.strayFrom: every
// ack fails until a checkpoint supersedes them), which no byte tells
// from acknowledged operations after a damaged one; replaying them
// would bring back what was never acknowledged. So damage there loses
// the operations logged after it: a file removed since comes back, a
// renamed one under its old name, one created since is gone.
func (g *dmgGolden) check(t *testing.T, e *Engine, when string, whole, cut bool, extra map[string][]byte) {
	t.Helper()
	h19gBounded(t, when+": reads", time.Minute, func() {
		seen := map[string]bool{}
		for _, fi := range e.List() {
			seen[fi.Name] = true
			var cands [][]byte
			if want, ok := g.files[fi.Name]; ok {
				cands = append(cands, want)
			}
			if cut {
				cands = append(cands, g.older[fi.Name]...)
			}
			if want, ok := extra[fi.Name]; ok {
				cands = append(cands, want)
			}
			if len(cands) == 0 {
				t.Errorf("%s: file %q (id %d, %d bytes) was never made (files: %v)", when, fi.Name, fi.ID, fi.Size, g.names())
				continue
			}
			h, err := e.Open(fi.Name)
			if err != nil {
				if whole {
					t.Errorf("%s: open %q: %v", when, fi.Name, err)
				}
				continue
			}
			var why string
			for _, want := range cands {
				if why = g.checkReads(when, h, want, whole); why == "" {
					break
				}
			}
			if why != "" {
				t.Error(why)
			}
			h.Close()
		}
		if whole {
			for name := range g.files {
				if !seen[name] {
					t.Errorf("%s: %q is gone from an undamaged image", when, name)
				}
			}
		}
	})
}

// dmgNew is the file each input writes once the damaged image is open.
const dmgNew = "new"

// writeNew writes dmgNew, 320 KiB in two writes, and fsyncs it; it
// reports whether every step succeeded (a damaged device may refuse).
func (g *dmgGolden) writeNew(t *testing.T, e *Engine) bool {
	h, err := e.Create(dmgNew)
	if err != nil {
		t.Logf("create %q: %v", dmgNew, err)
		return false
	}
	defer h.Close()
	want := g.extra[dmgNew]
	for _, r := range [][2]int{{0, 128 << 10}, {128 << 10, len(want)}} {
		if _, err := h.WriteAt(want[r[0]:r[1]], int64(r[0])); err != nil {
			t.Logf("write %q: %v", dmgNew, err)
			return false
		}
	}
	if err := h.Sync(); err != nil {
		t.Logf("fsync %q: %v", dmgNew, err)
		return false
	}
	return true
}

// checkReads reads h in 64 KiB pieces and compares every byte returned
// with want; it says what differs ("": nothing).
func (g *dmgGolden) checkReads(when string, h *File, want []byte, whole bool) string {
	size := h.Size()
	if size > int64(len(want)) || whole && size != int64(len(want)) {
		return fmt.Sprintf("%s: %q has %d bytes; %d were written", when, h.Name(), size, len(want))
	}
	buf := make([]byte, 64<<10)
	for off := int64(0); off < size; off += int64(len(buf)) {
		n, err := h.ReadAt(buf, off)
		for i := range n {
			at := off + int64(i)
			if at >= int64(len(want)) || buf[i] != want[at] {
				end := min(n, i+16)
				wantEnd := min(int64(len(want)), off+int64(end))
				return fmt.Sprintf("%s: %q at %d reads %q, written %q", when, h.Name(), at, buf[i:end], want[min(at, wantEnd):wantEnd])
			}
		}
		switch {
		case err == nil, errors.Is(err, io.EOF) && off+int64(n) >= size:
		case errors.Is(err, syscall.EIO) && !whole:
			// Damage found: the bytes are lost, not wrong.
		default:
			return fmt.Sprintf("%s: read %q at %d: %d bytes, %v", when, h.Name(), off, n, err)
		}
	}
	return ""
}

func (g *dmgGolden) names() []string {
	var s []string
	for name := range g.files {
		s = append(s, name)
	}
	sort.Strings(s)
	return s
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
