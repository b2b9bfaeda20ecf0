package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zonefold/zonefold/zns"
)

// The damaged-image model that TestCorruptionAtRest and
// FuzzOpenDamagedImage share: one golden image (dmgBuild: left as a
// crash leaves it, or closed cleanly), its regions (dmgGolden.layout),
// and one run of a damaged copy held to one promise (dmgGolden.run): no
// wrong bytes ever served, no panic or hang; each file is either read
// back as acknowledged, or Open refuses naming the damage, or reads fail
// (EIO) only inside the file ranges the damage hit, as the golden
// engine's extent maps place them; and fsck reports the damage. The
// tests differ only in how they damage the image.

// dmgSpan is a range of the image file.
type dmgSpan struct{ lo, hi int64 }

// The regions of the golden image (dmgGolden.regions).
const (
	regSuper     = iota // a superblock copy (first block of a half)
	regEmuHeader        // the emu's header slots: zone table, write pointers
	regNewCkpt          // the newest checkpoint record
	regOldCkpt          // an older checkpoint record (the other half)
	regTail             // metadata records after the newest checkpoint
	regOldLog           // metadata records before it (superseded)
	regOldHdrs          // headers of data records the checkpoint maps
	regNewHdrs          // headers of data records after it
	regOldData          // data blocks of records the checkpoint maps
	regNewData          // data blocks of records after it
	regions
	// regUnused is no region: bytes past the write pointers. It only
	// names a bit of what a damage touched (dmgGolden.touched).
	regUnused = regions
)

var regionNames = [regions + 1]string{"superblock", "emu-header", "newest-ckpt", "older-ckpt", "log-tail", "old-log",
	"old-headers", "new-headers", "old-data", "new-data", "unused"}

// regBits is the set of regions rs, as dmgGolden.touched reports them.
func regBits(rs ...int) uint {
	var b uint
	for _, r := range rs {
		b |= 1 << r
	}
	return b
}

// dmgPiece is where a range of a file lies on the device (image file
// offsets), as the golden engine mapped it.
type dmgPiece struct {
	name     string
	off, len int64 // file range
	at       int64 // image file offset of its first byte
	hdr      int64 // image file offset of its record's header
}

// dmgGolden is the undamaged image and what it holds.
type dmgGolden struct {
	clean bool
	img   []byte
	path  string            // where each damaged copy goes
	files map[string][]byte // name: acknowledged bytes
	// older: every name a file had since the newest checkpoint, with
	// the acknowledged bytes of each file that had it (checkOlder).
	older   map[string][][]byte
	pieces  []dmgPiece
	regions [regions][]dmgSpan
	// spans: every region's spans, sorted, with their region.
	spans   []dmgRegionSpan
	dataOff int64 // where the emu's zones start in the image
	report  []zns.Zone
}

type dmgRegionSpan struct {
	dmgSpan
	r int
}

// dmgQuiet drops the log until tb ends: a damaged device is warned
// about, at length, and thousands of warnings a second would bury the
// test's own output.
func dmgQuiet(tb testing.TB) {
	logger := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	tb.Cleanup(func() { slog.SetDefault(logger) })
}

// dmgGoldenImage builds the golden image (clean: closed cleanly, or as
// a crash leaves it); its directory goes when tb ends.
func dmgGoldenImage(tb testing.TB, clean bool) *dmgGolden {
	tb.Helper()
	g, err := dmgBuild(clean)
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
// image. It cannot use a test's helpers (a fuzz target's golden image
// outlives the first input's test), so it returns errors.
func dmgBuild(clean bool) (g *dmgGolden, err error) {
	dir := ""
	if st, serr := os.Stat("/dev/shm"); serr == nil && st.IsDir() {
		dir, _ = os.MkdirTemp("/dev/shm", "zonefold-dmg-")
	}
	if dir == "" {
		if dir, err = os.MkdirTemp("", "zonefold-dmg-"); err != nil {
			return nil, err
		}
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	path := filepath.Join(dir, "golden")
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
	defer func() {
		if err != nil {
			e.crashForTest()
			dev.Close()
		}
	}()
	g = &dmgGolden{clean: clean, path: filepath.Join(dir, "dev"), files: map[string][]byte{}, older: map[string][][]byte{}}

	// A file is an id: its bytes follow it across renames.
	ids := map[string]int{}
	content := map[int][]byte{}
	type nameID struct {
		name string
		id   int
	}
	var since []nameID // names since the newest checkpoint
	write := func(name, tag string, off, n int) error {
		id, ok := ids[name]
		if !ok {
			id = len(content)
			ids[name] = id
			content[id] = nil
		}
		h, err := e.OpenFile(name, OCreate)
		if err != nil {
			return err
		}
		defer h.Close()
		b := dmgBytes(tag, off, n)
		if _, err := h.WriteAt(b, int64(off)); err != nil {
			return err
		}
		if err := h.Sync(); err != nil {
			return err
		}
		cur := content[id]
		if len(cur) < off+n {
			cur = append(cur, make([]byte, off+n-len(cur))...)
		}
		copy(cur[off:], b)
		content[id] = cur
		since = append(since, nameID{name, id})
		return nil
	}
	rename := func(from, to string) error {
		if err := e.Rename(from, to); err != nil {
			return err
		}
		ids[to] = ids[from]
		delete(ids, from)
		since = append(since, nameID{to, ids[to]})
		return nil
	}
	remove := func(name string) error {
		delete(ids, name)
		return e.Remove(name)
	}
	// A create nobody waits for: held for a pack (metaPack), which the
	// next durable operation's record carries.
	deferredCreate := func(name string) error {
		h, err := e.OpenFile(name, OCreate|ODeferSync)
		if err != nil {
			return err
		}
		ids[name] = len(content)
		content[ids[name]] = []byte{}
		since = append(since, nameID{name, ids[name]})
		return h.Close()
	}
	steps := []func() error{
		// Before the first checkpoint: files, one in two pieces, one
		// removed (its records stay on the device), one renamed.
		func() error { return write("a", "fA.", 0, 200<<10) },
		func() error { return write("b", "fB.", 0, 300<<10) },
		func() error { return write("c", "fC.", 0, 96<<10) },
		func() error { return write("d", "fD.", 0, 64<<10) },
		func() error { return write("a", "fA.", 200<<10, 64<<10) },
		func() error { return write("e", "fE.", 0, 100<<10) },
		func() error { return write("x", "fX.", 0, 48<<10) },
		func() error { return write("junk", "fJ.", 0, 1200<<10) },
		func() error { return remove("x") },
		func() error { return rename("c", "c2") },
		e.checkpoint,
		// A zone emptied and collected, an append, then another
		// checkpoint.
		func() error { return remove("junk") },
		func() error {
			for e.gc.reclaim(nil, minGCGain) {
			}
			return nil
		},
		func() error { return write("b", "fB.", 300<<10, 20<<10) },
		e.checkpoint,
		func() error {
			since = since[:0]
			for name, id := range ids {
				since = append(since, nameID{name, id})
			}
			return nil
		},
		// After it, what recovery replays: an overwrite (the older
		// bytes are still on the device: serving them is wrong
		// data), appends, new files, a rename, a remove.
		func() error { return write("a", "oA.", 64<<10, 64<<10) },
		func() error { return write("a", "fA.", 264<<10, 36<<10) },
		func() error { return write("b", "fB.", 320<<10, 80<<10) },
		func() error { return write("f", "fF.", 0, 150<<10) },
		func() error { return deferredCreate("h") },
		func() error { return deferredCreate("i") },
		func() error { return rename("d", "d2") }, // a pack: h, i, the rename
		func() error { return remove("e") },
		func() error { return write("g", "fG.", 0, 40<<10) },
		func() error { return write("c2", "oC.", 0, 8<<10) },
		func() error { return write("c2", "fC.", 96<<10, 4<<10) },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			return nil, fmt.Errorf("step %d: %w", i, err)
		}
	}
	for name, id := range ids {
		g.files[name] = content[id]
	}
	for _, s := range since {
		g.older[s.name] = append(g.older[s.name], content[s.id])
	}

	emu, ok := e.dev.(*zns.Emu)
	if !ok {
		return nil, fmt.Errorf("device is %T", e.dev)
	}
	g.dataOff = emu.FileOffset(0)
	for name, f := range e.byName {
		f.mu.RLock()
		f.ext.each(func(x extent) bool {
			g.pieces = append(g.pieces, dmgPiece{name: name, off: x.off, len: x.len, at: g.dataOff + x.dev, hdr: g.dataOff + x.hdr})
			return true
		})
		f.mu.RUnlock()
	}
	sb := e.sb
	if clean {
		if err := e.Close(); err != nil {
			return nil, err
		}
	} else {
		// A crash: no checkpoint at close, so the log after the last
		// one stays to be replayed; everything the model holds was
		// fsynced.
		e.crashForTest()
		if err := emu.PowerCut(); err != nil {
			return nil, err
		}
	}
	report := make([]zns.Zone, dev.Geometry().Zones)
	n, err := dev.Report(0, report)
	if err != nil {
		return nil, err
	}
	g.report = report[:n]
	if !clean {
		if err := dev.Close(); err != nil {
			return nil, err
		}
	}
	if g.img, err = os.ReadFile(path); err != nil {
		return nil, err
	}
	// Only the damaged copy is a file from here on: a fuzz worker
	// killed at the end of a run leaves no image in /dev/shm.
	if err := os.Remove(path); err != nil {
		return nil, err
	}
	g.layout(sb)
	return g, nil
}

// layout finds the regions in the golden image: the metadata halves'
// records as recovery walks them, and the data zones' records.
func (g *dmgGolden) layout(sb Superblock) {
	zoneAt := func(i int) int64 { return g.dataOff + int64(i)*sb.ZoneSize }
	g.regions[regEmuHeader] = []dmgSpan{{0, g.dataOff}}
	type rec struct {
		sp   dmgSpan
		seq  uint64
		ckpt bool
	}
	var recs []rec
	var newest uint64
	for _, first := range sb.MetaZones {
		g.regions[regSuper] = append(g.regions[regSuper], dmgSpan{zoneAt(first), zoneAt(first) + BlockSize})
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
			g.regions[regNewCkpt] = append(g.regions[regNewCkpt], r.sp)
		case r.ckpt:
			g.regions[regOldCkpt] = append(g.regions[regOldCkpt], r.sp)
		case r.seq > newest:
			g.regions[regTail] = append(g.regions[regTail], r.sp)
		default:
			g.regions[regOldLog] = append(g.regions[regOldLog], r.sp)
		}
	}
	for z := range g.report {
		if z >= sb.UsedZones || sb.isMeta(z) {
			continue
		}
		wp := g.report[z].WP - g.report[z].Start
		for off := int64(0); off+BlockSize <= wp; {
			at := zoneAt(z) + off
			var h RecordHeader
			if err := DecodeHeader(g.img[at:at+BlockSize], &h); err != nil || h.FS != sb.FS() {
				break
			}
			hr, dr := regOldHdrs, regOldData
			if h.Seq > newest {
				hr, dr = regNewHdrs, regNewData
			}
			g.regions[hr] = append(g.regions[hr], dmgSpan{at, at + BlockSize})
			if h.DataLen > 0 {
				g.regions[dr] = append(g.regions[dr], dmgSpan{at + BlockSize, at + BlockSize + int64(h.DataLen)})
			}
			off += BlockSize + int64(h.DataLen)
		}
	}
	for r := range g.regions {
		for _, sp := range g.regions[r] {
			g.spans = append(g.spans, dmgRegionSpan{sp, r})
		}
	}
	sort.Slice(g.spans, func(i, j int) bool { return g.spans[i].lo < g.spans[j].lo })
}

// spansOf is the spans of regions rs, in image order.
func (g *dmgGolden) spansOf(rs ...int) []dmgSpan {
	var s []dmgSpan
	for _, sp := range g.spans {
		if regBits(rs...)&regBits(sp.r) != 0 {
			s = append(s, sp.dmgSpan)
		}
	}
	return s
}

// dmgAt is the image offset of offset o into spans, modulo their length.
func dmgAt(spans []dmgSpan, o uint64) int64 {
	var total int64
	for _, s := range spans {
		total += s.hi - s.lo
	}
	off := int64(o % uint64(total))
	for _, s := range spans {
		if off < s.hi-s.lo {
			return s.lo + off
		}
		off -= s.hi - s.lo
	}
	panic("unreachable")
}

// changed lists the ranges where img differs from the golden image.
func (g *dmgGolden) changed(img []byte) []dmgSpan {
	var out []dmgSpan
	for blk := int64(0); blk < int64(len(img)); blk += BlockSize {
		end := min(blk+BlockSize, int64(len(img)))
		if bytes.Equal(img[blk:end], g.img[blk:end]) {
			continue
		}
		for i := blk; i < end; i++ {
			if img[i] == g.img[i] {
				continue
			}
			if n := len(out); n > 0 && out[n-1].hi == i {
				out[n-1].hi++
			} else {
				out = append(out, dmgSpan{i, i + 1})
			}
		}
	}
	return out
}

// touched is the set of regions (regBits, regUnused for bytes in none)
// the damaged ranges lie in.
func (g *dmgGolden) touched(damaged []dmgSpan) uint {
	var b uint
	for _, d := range damaged {
		for i := d.lo; i < d.hi; i++ {
			j := sort.Search(len(g.spans), func(j int) bool { return g.spans[j].hi > i })
			if j < len(g.spans) && g.spans[j].lo <= i {
				b |= regBits(g.spans[j].r)
				i = min(d.hi, g.spans[j].hi) - 1
			} else {
				b |= regBits(regUnused)
			}
		}
	}
	return b
}

// hit lists the file ranges the damage may cost: data blocks in the
// damaged ranges, or every block of a record whose header is.
func (g *dmgGolden) hit(damaged []dmgSpan) []dmgPiece {
	var hit []dmgPiece
	for _, p := range g.pieces {
		for _, d := range damaged {
			if p.at < d.hi && d.lo < p.at+p.len || p.hdr < d.hi && d.lo < p.hdr+BlockSize {
				hit = append(hit, p)
				break
			}
		}
	}
	return hit
}

// dmgOutcome is what one damage came to.
type dmgOutcome struct {
	class string // correct, refused, eio in the damaged range, ...
	bad   bool   // the promise is broken
	why   string
}

// dmgNew is the file each run writes once the damaged image is open:
// writes on the recovered file system go where recovery said there is
// room, and must not land on what it still maps, nor it on them.
const dmgNew = "new"

var dmgNewBytes = dmgBytes("nw.", 0, 320<<10)

// The states of dmgNew a check holds e to.
const (
	newNone   = iota // not written: it must not be listed
	newTried         // written, not all of it acknowledged: absent or a prefix
	newSynced        // written and fsynced: all of it, as written
)

// run opens img, a damaged copy of the golden image, and holds zonefold
// to its promise: Fsck, Open, every file read back, dmgNew written and
// read back, Close, Fsck, a second Open (recovery's checkpoint must not
// have turned damage into wrong bytes, nor the write into lost ones) and
// reads. It classifies the outcome (dmgOutcome).
func (g *dmgGolden) run(t *testing.T, name string, img []byte) dmgOutcome {
	damaged := g.changed(img)
	touched := g.touched(damaged)
	in := func(rs ...int) bool { return touched&regBits(rs...) != 0 }
	hit := g.hit(damaged)
	where := dmgWhere(damaged)

	if err := os.WriteFile(g.path, img, 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(g.path)
	devName := "emu:" + g.path

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
		return dmgOutcome{"PANIC", true, fmt.Sprintf("Open panicked at %s: %v", where, panicked)}
	}
	if err != nil {
		if !fsckDamage {
			return dmgOutcome{"refused, fsck clean", true, fmt.Sprintf("Open refused (%v) at %s but fsck reports nothing", err, where)}
		}
		if !dmgClear(err.Error()) {
			return dmgOutcome{"refused, unclear error", true, fmt.Sprintf("Open at %s: %v", where, err)}
		}
		t.Logf("%s: refused at %s: %v", name, where, err)
		if in(regNewCkpt, regSuper, regEmuHeader, regTail) {
			return dmgOutcome{class: "refused"}
		}
		// Refusing the whole file system for a damaged header is
		// allowed; for damaged data or superseded metadata it is not.
		return dmgOutcome{class: "refused (whole FS)", bad: !in(regOldHdrs, regNewHdrs),
			why: fmt.Sprintf("whole file system refused for damage at %s: %v", where, err)}
	}
	closeBounded := func(e *Engine) bool {
		ok := true
		h19gBounded(t, name+": Close", time.Minute, func() {
			if err := e.Close(); err != nil {
				t.Logf("%s: close: %v", name, err)
				ok = false
			}
		})
		return ok
	}
	// check holds an engine to the promise, or to what a design limit
	// leaves of it (limit).
	limit, class := dmgStrict, ""
	check := func(e *Engine, state int) (bool, string) {
		if limit == dmgCutLog {
			return false, g.checkOlder(t, e, state)
		}
		return g.check(t, e, hit, state, limit == dmgPassedOver)
	}
	lost, why := check(e, newNone)
	if why != "" {
		switch {
		case rolledBack:
			closeBounded(e)
			return dmgOutcome{class: "emu took back its last flush (emu limit)"}
		case in(regTail) && fsckDamage:
			// The walk of the log recovery starts from ends at a
			// record that fails its checksum (checkCutLog): a
			// design limit, which fsck reports. What follows it is
			// lost, so the namespace may be as of any point since
			// the checkpoint; still no wrong bytes (checkOlder).
			limit, class = dmgCutLog, "log cut short, fsck reports it (design limit)"
			lost, why = check(e, newNone)
		case in(regNewHdrs) && fsckDamage && dmgZoneLogCut(rep):
			// The header of a record newer than the checkpoint
			// fails its checksum and no longer starts as one: no
			// byte tells that from the range of an append whose
			// failure came after a flush made it durable
			// (damagedHeader), so recovery goes on past it, and its
			// range reads as before it: a design limit, which fsck
			// reports. Only that record's range may read so.
			limit, class = dmgPassedOver, "record passed over, fsck reports it (design limit)"
			lost, why = check(e, newNone)
		}
	}
	if why != "" {
		closeBounded(e)
		return dmgOutcome{"WRONG or LOST", true, fmt.Sprintf("damage at %s (fsck problems %v): %s", where, dmgFsckProblems(rep, ferr), why)}
	}
	state := newNone
	h19gBounded(t, name+": write", time.Minute, func() { state = g.writeNew(t, e) })
	if _, why := check(e, state); why != "" {
		closeBounded(e)
		return dmgOutcome{"WRONG or LOST after a write", true, fmt.Sprintf("damage at %s, after a write on the recovered device: %s", where, why)}
	}
	if !closeBounded(e) && state == newSynced {
		state = newTried
	}
	// Fsck of what recovery and the write left: no panic, no hang.
	if rep, err := h19gFsck(t, devName); err == nil && len(damaged) == 0 && len(rep.Problems) > 0 {
		return dmgOutcome{"fsck of the undamaged image after Open", true, fmt.Sprintf("%v", rep.Problems)}
	}
	e2, err := h19gOpen(t, devName)
	if err != nil {
		return dmgOutcome{"second open refused", true, fmt.Sprintf("damage at %s: the second Open refuses: %v", where, err)}
	}
	lost2, why := check(e2, state)
	closeBounded(e2)
	if why != "" {
		return dmgOutcome{"WRONG or LOST after recovery", true, fmt.Sprintf("damage at %s, second open: %s", where, why)}
	}
	switch {
	case class != "":
		return dmgOutcome{class: class}
	case lost || lost2:
		if !fsckDamage {
			return dmgOutcome{"eio, fsck clean", true, fmt.Sprintf("damage at %s fails reads but fsck reports nothing", where)}
		}
		return dmgOutcome{class: "eio in the damaged range"}
	case fsckDamage:
		return dmgOutcome{class: "correct, fsck reports damage"}
	}
	return dmgOutcome{class: "correct"}
}

// What a run holds the engine to (dmgGolden.run).
const (
	dmgStrict     = iota // the promise (dmgGolden.check)
	dmgCutLog            // a log cut short (dmgGolden.checkOlder)
	dmgPassedOver        // a damaged record passed over (dmgGolden.check)
)

// dmgWhere names the damaged ranges.
func dmgWhere(damaged []dmgSpan) string {
	if len(damaged) == 0 {
		return "no image bytes (undamaged)"
	}
	var b strings.Builder
	b.WriteString("image bytes")
	for i, d := range damaged {
		if i == 8 {
			fmt.Fprintf(&b, " and %d more ranges", len(damaged)-i)
			break
		}
		fmt.Fprintf(&b, " [%d,%d)", d.lo, d.hi)
	}
	return b.String()
}

// writeNew writes dmgNew, 320 KiB in two writes, and fsyncs it; it
// reports how far it got (a damaged device may refuse).
func (g *dmgGolden) writeNew(t *testing.T, e *Engine) int {
	h, err := e.Create(dmgNew)
	if err != nil {
		t.Logf("create %q: %v", dmgNew, err)
		return newTried
	}
	defer h.Close()
	for _, r := range [][2]int{{0, 128 << 10}, {128 << 10, len(dmgNewBytes)}} {
		if _, err := h.WriteAt(dmgNewBytes[r[0]:r[1]], int64(r[0])); err != nil {
			t.Logf("write %q: %v", dmgNew, err)
			return newTried
		}
	}
	if err := h.Sync(); err != nil {
		t.Logf("fsync %q: %v", dmgNew, err)
		return newTried
	}
	return newSynced
}

// dmgZoneLogCut reports whether fsck reported a record header that fails
// its checksum and that recovery passed over (damagedHeader).
func dmgZoneLogCut(rep *FsckReport) bool {
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

func dmgFsckProblems(rep *FsckReport, err error) any {
	if err != nil {
		return err
	}
	return rep.Problems
}

// dmgClear says whether a refusal says what is damaged: a metadata half,
// a zone, a superblock, a checkpoint or the device's zone table.
func dmgClear(msg string) bool {
	for _, w := range []string{"metadata", "zone", "superblock", "checkpoint", "header slot", "checksum"} {
		if strings.Contains(msg, w) {
			return true
		}
	}
	return false
}

// check reads every file of the golden image through e: every byte must
// be the acknowledged one; a read may fail with EIO only inside the
// pieces hit lists; no file may be missing, shorter or new. passedOver:
// recovery went on past a damaged record header (damagedHeader), so
// inside the pieces hit lists a file may also read other (older) bytes,
// or end early; outside them, the promise stands. dmgNew is held to
// state. It reports whether some read failed, and what broke the
// promise ("": nothing).
func (g *dmgGolden) check(t *testing.T, e *Engine, hit []dmgPiece, state int, passedOver bool) (lost bool, why string) {
	h19gBounded(t, "reads", time.Minute, func() {
		for _, fi := range e.List() {
			if _, ok := g.files[fi.Name]; !ok && !(fi.Name == dmgNew && state != newNone) {
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
			inHit := func(off int64) bool { return dmgInHit(hit, name, off) }
			h, err := e.Open(name)
			if err != nil {
				why = fmt.Sprintf("open %q: %v", name, err)
				return
			}
			if size := h.Size(); size != int64(len(want)) {
				if !passedOver || size > int64(len(want)) || !dmgAllIn(inHit, size, int64(len(want))) {
					why = fmt.Sprintf("%q has %d bytes, %d acknowledged", name, size, len(want))
				}
				want = want[:min(size, int64(len(want)))]
			}
			if why == "" {
				var l bool
				l, why = dmgReads(h, want, inHit, passedOver)
				lost = lost || l
			}
			h.Close()
			if why != "" {
				return
			}
		}
		switch state {
		case newSynced:
			h, err := e.Open(dmgNew)
			if err != nil {
				why = fmt.Sprintf("%q, fsynced: %v", dmgNew, err)
				return
			}
			defer h.Close()
			if h.Size() != int64(len(dmgNewBytes)) {
				why = fmt.Sprintf("%q, fsynced, has %d bytes, %d written", dmgNew, h.Size(), len(dmgNewBytes))
				return
			}
			_, why = dmgReads(h, dmgNewBytes, func(int64) bool { return false }, false)
		case newTried:
			if h, err := e.Open(dmgNew); err == nil {
				why = dmgPrefix(h, dmgNewBytes)
				h.Close()
			}
		}
	})
	return lost, why
}

// dmgAllIn says whether every block of [lo, hi) is one in says.
func dmgAllIn(in func(off int64) bool, lo, hi int64) bool {
	for b := lo - lo%BlockSize; b < hi; b += BlockSize {
		if !in(b) {
			return false
		}
	}
	return true
}

// dmgReads reads h, whose size is len(want), and compares every byte;
// a read may fail with EIO only where mayFail says (and, if differ, read
// other bytes there too). It reads 64 KiB at a time, and a piece whose
// read fails or differs again block by block. It reports whether a read
// failed, and what broke the promise.
func dmgReads(h *File, want []byte, mayFail func(off int64) bool, differ bool) (lost bool, why string) {
	size := int64(len(want))
	buf := make([]byte, 64<<10)
	for off := int64(0); off < size; off += int64(len(buf)) {
		end := min(off+int64(len(buf)), size)
		n, err := h.ReadAt(buf, off)
		if off+int64(n) == end && (err == nil || errors.Is(err, io.EOF)) {
			if bytes.Equal(buf[:n], want[off:end]) {
				continue
			}
			if !differ {
				return lost, dmgDiffers(h.Name(), off, buf[:n], want[off:end])
			}
		}
		for b := off; b < end; b += BlockSize {
			n, err := h.ReadAt(buf[:BlockSize], b)
			if err != nil && !(errors.Is(err, io.EOF) && b+int64(n) == size) {
				if !errors.Is(err, syscall.EIO) {
					return lost, fmt.Sprintf("read %q at %d: %v", h.Name(), b, err)
				}
				if !mayFail(b) {
					return lost, fmt.Sprintf("read %q at %d fails (%v), outside the damaged range", h.Name(), b, err)
				}
				lost = true
				continue
			}
			if int64(n) != min(BlockSize, size-b) {
				return lost, fmt.Sprintf("read %q at %d: %d bytes, %v", h.Name(), b, n, err)
			}
			if !bytes.Equal(buf[:n], want[b:b+int64(n)]) && !(differ && mayFail(b)) {
				return lost, dmgDiffers(h.Name(), b, buf[:n], want[b:b+int64(n)])
			}
		}
	}
	return lost, ""
}

// dmgDiffers says where got, read at off, first differs from want.
func dmgDiffers(name string, off int64, got, want []byte) string {
	i := 0
	for i < len(got) && got[i] == want[i] {
		i++
	}
	end := min(len(got), i+16)
	return fmt.Sprintf("%q at %d reads %q, acknowledged %q", name, off+int64(i), got[i:end], want[i:end])
}

// dmgPrefix reads h and compares every byte returned with want, of
// which h may hold only a prefix; reads may fail. It says what differs.
func dmgPrefix(h *File, want []byte) string {
	size := h.Size()
	if size > int64(len(want)) {
		return fmt.Sprintf("%q has %d bytes; %d were written", h.Name(), size, len(want))
	}
	buf := make([]byte, 64<<10)
	for off := int64(0); off < size; off += int64(len(buf)) {
		n, err := h.ReadAt(buf, off)
		n = int(min(int64(n), size-off))
		if !bytes.Equal(buf[:n], want[off:off+int64(n)]) {
			return dmgDiffers(h.Name(), off, buf[:n], want[off:off+int64(n)])
		}
		switch {
		case err == nil, errors.Is(err, io.EOF) && off+int64(n) >= size:
		case errors.Is(err, syscall.EIO):
			// Damage found: the bytes are lost, not wrong.
		default:
			return fmt.Sprintf("read %q at %d: %d bytes, %v", h.Name(), off, n, err)
		}
	}
	return ""
}

// checkOlder holds e to what a log cut short after the checkpoint may
// leave: no name never made, and every byte read the acknowledged one
// of a file that had that name since the checkpoint (a read may fail, a
// file may be shorter or gone).
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
func (g *dmgGolden) checkOlder(t *testing.T, e *Engine, state int) (why string) {
	h19gBounded(t, "reads", time.Minute, func() {
		for _, fi := range e.List() {
			var cands [][]byte
			if want, ok := g.files[fi.Name]; ok {
				cands = append(cands, want)
			}
			cands = append(cands, g.older[fi.Name]...)
			if fi.Name == dmgNew && state != newNone {
				cands = append(cands, dmgNewBytes)
			}
			if len(cands) == 0 {
				why = fmt.Sprintf("file %q (%d bytes) was never made", fi.Name, fi.Size)
				return
			}
			h, err := e.Open(fi.Name)
			if err != nil {
				continue
			}
			for _, want := range cands {
				if why = dmgPrefix(h, want); why == "" {
					break
				}
			}
			h.Close()
			if why != "" {
				return
			}
		}
	})
	return why
}

// dmgInHit says whether block off of file name lies in a damaged piece.
func dmgInHit(hit []dmgPiece, name string, off int64) bool {
	for _, p := range hit {
		if p.name == name && off+BlockSize > p.off && off < p.off+p.len {
			return true
		}
	}
	return false
}
