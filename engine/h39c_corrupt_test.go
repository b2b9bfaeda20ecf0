package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zonefold/zonefold/zns"
)

// TestCorruptionAtRest damages an image at rest, one damage at a time,
// and holds zonefold to its promise about media that returns wrong
// bytes: it never returns wrong data silently, never panics or hangs,
// and either opens with correct data, refuses with an error that says
// what is damaged, or fails reads (EIO) of the damaged file range only.
//
// Two golden images (carBuild): one left as a crash leaves it, the log
// after the newest checkpoint still to replay, and one closed cleanly.
// Each region (carRegions) is damaged by each kind (a bit flipped, the
// 4 KiB block zeroed, the block overwritten with random bytes) at
// carSeeds random places; then Fsck, Open, every file read back, Close,
// and a second Open and reads (recovery's checkpoint must not have
// turned damage into wrong bytes). Each outcome is classified
// (carOutcome) and counted; the counts are logged.
//
// ZONEFOLD_CORRUPT_SEEDS=FIRST-LAST runs those seeds instead of the
// default two (one with -short or the race detector).
func TestCorruptionAtRest(t *testing.T) {
	logger := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { slog.SetDefault(logger) })

	seeds := []uint64{1, 2}
	if testing.Short() || raceEnabled {
		seeds = seeds[:1]
	}
	if s := envSeeds(t, "ZONEFOLD_CORRUPT_SEEDS"); s != nil {
		seeds = s
	}
	counts := map[string]int{}
	for _, clean := range []bool{false, true} {
		variant := "crash"
		if clean {
			variant = "clean"
		}
		g := carBuild(t, clean)
		for r := range carRegions {
			if len(g.regions[r]) == 0 {
				t.Logf("%s: region %s is empty in this image", variant, carRegionNames[r])
				continue
			}
			for k := range carKinds {
				for _, seed := range seeds {
					name := fmt.Sprintf("%s/%s/%s/%d", variant, carRegionNames[r], carKindNames[k], seed)
					out := g.run(t, name, r, k, seed)
					counts[carRegionNames[r]+" "+out.class]++
					if out.bad {
						t.Errorf("%s: %s: %s", name, out.class, out.why)
					}
				}
			}
		}
	}
	var keys []string
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %-40s %d", k, counts[k])
	}
	t.Logf("outcomes (region, outcome: count):%s", b.String())
}

// The regions a damage goes to.
const (
	carSuper     = iota // a superblock copy (first block of a half)
	carEmuHeader        // the emu's header slots: zone table, write pointers
	carNewCkpt          // the newest checkpoint record
	carOldCkpt          // an older checkpoint record (the other half)
	carTail             // metadata records after the newest checkpoint
	carOldLog           // metadata records before it (superseded)
	carOldHdrs          // headers of data records the checkpoint maps
	carNewHdrs          // headers of data records after it
	carOldData          // data blocks of records the checkpoint maps
	carNewData          // data blocks of records after it
	carRegions
)

var carRegionNames = [carRegions]string{"superblock", "emu-header", "newest-ckpt", "older-ckpt", "log-tail", "old-log",
	"old-headers", "new-headers", "old-data", "new-data"}

// The kinds of damage.
const (
	carFlip  = iota // one bit flipped
	carZero         // the 4 KiB block zeroed
	carNoise        // the 4 KiB block overwritten with random bytes
	carKinds
)

var carKindNames = [carKinds]string{"flip", "zero", "noise"}

// carPiece is where a range of a file lies on the device (image file
// offsets), as the golden engine mapped it.
type carPiece struct {
	name     string
	off, len int64 // file range
	at       int64 // image file offset of its first byte
	hdr      int64 // image file offset of its record's header
	recLen   int64 // its record's data length
}

type carGolden struct {
	clean   bool
	img     []byte
	dir     string
	files   map[string][]byte
	pieces  []carPiece
	regions [carRegions][]dmgSpan
	dataOff int64 // where the emu's zones start in the image
	report  []zns.Zone
}

// carBuild runs the workload on a fresh emu device and keeps its image.
func carBuild(t *testing.T, clean bool) *carGolden {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "golden")
	devName := fmt.Sprintf("emu:%s?zone_size=1M&zones=16", path)
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Format(dev, FormatOptions{}); err != nil {
		t.Fatal(err)
	}
	e, err := OpenDevice(dev, smallConfig())
	if err != nil {
		t.Fatal(err)
	}
	g := &carGolden{clean: clean, dir: dir, files: map[string][]byte{}}
	write := func(name, tag string, off, n int) {
		t.Helper()
		h, err := e.OpenFile(name, OCreate)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		b := dmgBytes(tag, off, n)
		if _, err := h.WriteAt(b, int64(off)); err != nil {
			t.Fatal(err)
		}
		if err := h.Sync(); err != nil {
			t.Fatal(err)
		}
		cur := g.files[name]
		if len(cur) < off+n {
			cur = append(cur, make([]byte, off+n-len(cur))...)
		}
		copy(cur[off:], b)
		g.files[name] = cur
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	write("a", "fA.", 0, 200<<10)
	write("b", "fB.", 0, 300<<10)
	write("c", "fC.", 0, 96<<10)
	write("d", "fD.", 0, 64<<10)
	write("e", "fE.", 0, 100<<10)
	write("junk", "fJ.", 0, 1200<<10)
	must(e.Remove("junk"))
	delete(g.files, "junk")
	for e.gc.reclaim(nil, minGCGain) {
	}
	must(e.Rename("c", "c2"))
	g.files["c2"] = g.files["c"]
	delete(g.files, "c")
	must(e.checkpoint())
	write("b", "fB.", 300<<10, 20<<10)
	must(e.checkpoint())
	// After the newest checkpoint: an overwrite (older bytes are
	// still on the device: serving them is wrong data), an append, a
	// new file, a rename, a remove.
	write("a", "oA.", 64<<10, 64<<10)
	write("b", "fB.", 320<<10, 80<<10)
	write("f", "fF.", 0, 150<<10)
	must(e.Rename("d", "d2"))
	g.files["d2"] = g.files["d"]
	delete(g.files, "d")
	must(e.Remove("e"))
	delete(g.files, "e")
	write("c2", "oC.", 0, 8<<10)

	emu := e.dev.(*zns.Emu)
	g.dataOff = emu.FileOffset(0)
	for name, f := range e.byName {
		f.mu.RLock()
		f.ext.each(func(x extent) bool {
			g.pieces = append(g.pieces, carPiece{name: name, off: x.off, len: x.len, at: g.dataOff + x.dev, hdr: g.dataOff + x.hdr})
			return true
		})
		f.mu.RUnlock()
	}
	sb := e.sb
	if clean {
		must(e.Close())
	} else {
		e.crashForTest()
		must(emu.PowerCut())
	}
	report := make([]zns.Zone, dev.Geometry().Zones)
	n, err := dev.Report(0, report)
	must(err)
	report = report[:n]
	g.report = report
	if !clean {
		must(dev.Close())
	}
	if g.img, err = os.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	g.layout(t, sb, report)
	for i := range g.pieces {
		p := &g.pieces[i]
		var h RecordHeader
		must(DecodeHeader(g.img[p.hdr:p.hdr+BlockSize], &h))
		p.recLen = int64(h.DataLen)
	}
	return g
}

// layout finds the regions in the golden image: the metadata halves'
// records as recovery walks them, and the data zones' records.
func (g *carGolden) layout(t *testing.T, sb Superblock, report []zns.Zone) {
	zoneAt := func(i int) int64 { return g.dataOff + int64(i)*sb.ZoneSize }
	g.regions[carEmuHeader] = []dmgSpan{{0, g.dataOff}}
	type rec struct {
		sp   dmgSpan
		seq  uint64
		ckpt bool
	}
	var recs []rec
	var newest uint64
	for _, first := range sb.MetaZones {
		g.regions[carSuper] = append(g.regions[carSuper], dmgSpan{zoneAt(first), zoneAt(first) + BlockSize})
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
			r := rec{dmgSpan{off, off + n}, mh.seq, mh.kind == metaCheckpoint}
			recs = append(recs, r)
			if r.ckpt && r.seq > newest {
				newest = r.seq
			}
			off += n
		}
	}
	for _, r := range recs {
		switch {
		case r.ckpt && r.seq == newest:
			g.regions[carNewCkpt] = append(g.regions[carNewCkpt], r.sp)
		case r.ckpt:
			g.regions[carOldCkpt] = append(g.regions[carOldCkpt], r.sp)
		case r.seq > newest:
			g.regions[carTail] = append(g.regions[carTail], r.sp)
		default:
			g.regions[carOldLog] = append(g.regions[carOldLog], r.sp)
		}
	}
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
			hr, dr := carOldHdrs, carOldData
			if h.Seq > newest {
				hr, dr = carNewHdrs, carNewData
			}
			g.regions[hr] = append(g.regions[hr], dmgSpan{at, at + BlockSize})
			if h.DataLen > 0 {
				g.regions[dr] = append(g.regions[dr], dmgSpan{at + BlockSize, at + BlockSize + int64(h.DataLen)})
			}
			off += BlockSize + int64(h.DataLen)
		}
	}
}

// carOutcome is what one damage came to.
type carOutcome struct {
	class string // correct, refused, eio-in-range, ...
	bad   bool   // the promise is broken
	why   string
}

// run damages a copy of the golden image (region r, kind k, seed) and
// checks what zonefold makes of it.
func (g *carGolden) run(t *testing.T, name string, r, k int, seed uint64) (out carOutcome) {
	rng := rand.New(rand.NewPCG(seed, uint64(r*carKinds+k)<<32|0x39c))
	img := bytes.Clone(g.img)
	var total int64
	for _, s := range g.regions[r] {
		total += s.hi - s.lo
	}
	o := rng.Int64N(total)
	var at int64
	for _, s := range g.regions[r] {
		if o < s.hi-s.lo {
			at = s.lo + o
			break
		}
		o -= s.hi - s.lo
	}
	dlo, dhi := at, at+1
	switch k {
	case carFlip:
		img[at] ^= 1 << rng.IntN(8)
	case carZero, carNoise:
		dlo = at - at%BlockSize
		dhi = min(dlo+BlockSize, int64(len(img)))
		if k == carZero {
			clear(img[dlo:dhi])
		} else {
			for i := dlo; i < dhi; i++ {
				img[i] = byte(rng.Uint32())
			}
		}
	}
	if bytes.Equal(img, g.img) {
		return carOutcome{class: "no change"}
	}
	path := filepath.Join(g.dir, "dev")
	if err := os.WriteFile(path, img, 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(path)
	devName := "emu:" + path
	where := fmt.Sprintf("image bytes [%d,%d)", dlo, dhi)

	// Which file ranges the damage may cost: data blocks in the
	// damaged range, or every block of a record whose header is.
	var hit []carPiece
	for _, p := range g.pieces {
		switch {
		case p.at < dhi && dlo < p.at+p.len:
			hit = append(hit, p)
		case p.hdr < dhi && dlo < p.hdr+BlockSize:
			hit = append(hit, p)
		}
	}

	// The emu keeps one checksum of the data its last Flush claimed
	// per zone, and takes the zone back to the Flush before when it
	// fails (a power cut during the flush's one sync): damage there is
	// indistinguishable from that, and the device itself forgets the
	// last fsync's records. A limit of the emulator, not of the engine
	// (a zoned drive keeps its write pointers itself); counted apart.
	rolledBack := false
	if dev, err := zns.Open(devName, zns.Options{}); err == nil {
		report := make([]zns.Zone, len(g.report))
		if n, err := dev.Report(0, report); err == nil {
			for i := range report[:n] {
				if report[i].WP < g.report[i].WP && report[i].Cond != zns.CondOffline {
					rolledBack = true
				}
			}
		}
		dev.Close()
	}

	rep, ferr := h19gFsck(t, devName)
	fsckDamage := ferr != nil || len(rep.Problems) > 0
	var e *Engine
	var err error
	var panicked any
	h19gBounded(t, name+": Open", time.Minute, func() {
		defer func() { panicked = recover() }()
		e, err = Open(devName, smallConfig())
	})
	if panicked != nil {
		return carOutcome{"PANIC", true, fmt.Sprintf("Open panicked at %s: %v", where, panicked)}
	}
	if err != nil {
		msg := err.Error()
		if !fsckDamage {
			return carOutcome{"refused, fsck clean", true, fmt.Sprintf("Open refused (%v) at %s but fsck reports nothing", err, where)}
		}
		if !carClear(msg) {
			return carOutcome{"refused, unclear error", true, fmt.Sprintf("Open at %s: %v", where, err)}
		}
		if r != carNewCkpt && r != carSuper && r != carEmuHeader && r != carTail {
			t.Logf("%s: refused at %s: %v", name, where, err)
			return carOutcome{class: "refused (whole FS)", bad: r == carOldData || r == carNewData || r == carOldCkpt || r == carOldLog,
				why: fmt.Sprintf("whole file system refused for damage at %s: %v", where, err)}
		}
		t.Logf("%s: refused at %s: %v", name, where, err)
		return carOutcome{class: "refused"}
	}
	lost, why := g.check(t, e, hit)
	h19gBounded(t, name+": Close", time.Minute, func() {
		if err := e.Close(); err != nil {
			t.Logf("%s: close: %v", name, err)
		}
	})
	if why != "" && rolledBack {
		return carOutcome{class: "emu took back its last flush (emu limit)"}
	}
	if why != "" && r == carTail && fsckDamage {
		// The walk of the log recovery starts from ends at a record
		// that fails its checksum (checkCutLog): a design limit, which
		// fsck reports.
		return carOutcome{class: "log cut short, fsck reports it (design limit)"}
	}
	if why != "" && r == carNewHdrs && fsckDamage && carZoneLogCut(rep) {
		// The header of a record newer than the checkpoint fails its
		// checksum and no longer starts as one: no byte tells that
		// from the range of an append whose failure came after a
		// flush made it durable (damagedHeader), so recovery goes on
		// past it: a design limit, which fsck reports.
		return carOutcome{class: "record passed over, fsck reports it (design limit)"}
	}
	if why != "" {
		return carOutcome{"WRONG or LOST", true, fmt.Sprintf("damage at %s (fsck problems %v): %s", where, fsckProblems(rep, ferr), why)}
	}
	e2, err := h19gOpen(t, devName)
	if err != nil {
		return carOutcome{"second open refused", true, fmt.Sprintf("damage at %s: the second Open refuses: %v", where, err)}
	}
	lost2, why := g.check(t, e2, hit)
	h19gBounded(t, name+": Close", time.Minute, func() { e2.Close() })
	if why != "" {
		return carOutcome{"WRONG or LOST after recovery", true, fmt.Sprintf("damage at %s, second open: %s", where, why)}
	}
	switch {
	case lost || lost2:
		if !fsckDamage {
			return carOutcome{"eio, fsck clean", true, fmt.Sprintf("damage at %s fails reads but fsck reports nothing", where)}
		}
		return carOutcome{class: "eio in the damaged range"}
	case fsckDamage:
		return carOutcome{class: "correct, fsck reports damage"}
	}
	return carOutcome{class: "correct"}
}

// carZoneLogCut reports whether fsck reported a record header that fails
// its checksum and that recovery passed over (damagedHeader).
func carZoneLogCut(rep *FsckReport) bool {
	if rep == nil {
		return false
	}
	for _, p := range rep.Problems {
		if strings.Contains(p, "does not read as a header numbered above checkpoint") {
			return true
		}
	}
	return false
}

func fsckProblems(rep *FsckReport, err error) any {
	if err != nil {
		return err
	}
	return rep.Problems
}

// carClear says whether a refusal says what is damaged: a metadata half,
// a zone, a superblock, a checkpoint or the device's zone table.
func carClear(msg string) bool {
	for _, w := range []string{"metadata", "zone", "superblock", "checkpoint", "header slot", "checksum"} {
		if strings.Contains(msg, w) {
			return true
		}
	}
	return false
}

// check reads every file of the golden image through e: every byte must
// be the acknowledged one; a read may fail with EIO only inside the
// pieces hit lists; no file may be missing, shorter or new. It reports
// whether some read failed, and what broke the promise ("": nothing).
func (g *carGolden) check(t *testing.T, e *Engine, hit []carPiece) (lost bool, why string) {
	h19gBounded(t, "reads", time.Minute, func() {
		for _, fi := range e.List() {
			if _, ok := g.files[fi.Name]; !ok {
				why = fmt.Sprintf("file %q (%d bytes) is listed; it was removed or never made", fi.Name, fi.Size)
				return
			}
		}
		var names []string
		for name := range g.files {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			want := g.files[name]
			h, err := e.Open(name)
			if err != nil {
				why = fmt.Sprintf("open %q: %v", name, err)
				return
			}
			if h.Size() != int64(len(want)) {
				why = fmt.Sprintf("%q has %d bytes, %d acknowledged", name, h.Size(), len(want))
				h.Close()
				return
			}
			buf := make([]byte, BlockSize)
			for off := int64(0); off < int64(len(want)); off += BlockSize {
				n, err := h.ReadAt(buf, off)
				if err != nil && !(errors.Is(err, io.EOF) && off+int64(n) == int64(len(want))) {
					if !errors.Is(err, syscall.EIO) {
						why = fmt.Sprintf("read %q at %d: %v", name, off, err)
						h.Close()
						return
					}
					if !carInHit(hit, name, off) {
						why = fmt.Sprintf("read %q at %d fails (%v), outside the damaged range", name, off, err)
						h.Close()
						return
					}
					lost = true
					continue
				}
				if !bytes.Equal(buf[:n], want[off:off+int64(n)]) {
					why = fmt.Sprintf("%q at %d reads %q, acknowledged %q", name, off, buf[:16], want[off:off+16])
					h.Close()
					return
				}
			}
			h.Close()
		}
	})
	return lost, why
}

// carInHit says whether block off of file name lies in a damaged piece's
// record.
func carInHit(hit []carPiece, name string, off int64) bool {
	for _, p := range hit {
		if p.name == name && off+BlockSize > p.off && off < p.off+p.len {
			return true
		}
	}
	return false
}
