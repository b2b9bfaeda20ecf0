package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// Packs of namespace operations (metaPack, format 3): several
// operations in one metadata record, one checksum over them all.
// The first tests write packs themselves (h41bLogRecords) and hold
// recovery, fsck and the format checks to what a packing writer needs;
// the later ones pack through the engine's log writer. Each pins the
// format it needs (h41bFormat), whatever Format writes by default.

// h41bFormat makes Format write format v for the rest of the test.
func h41bFormat(t *testing.T, v int) {
	t.Helper()
	old := formatVersion
	formatVersion = v
	t.Cleanup(func() { formatVersion = old })
}

// h41bPackRecord numbers ops (from the engine's counter, as writeOp
// would) and returns their pack's record.
func h41bPackRecord(e *Engine, ops []nsOp) []byte {
	for i := range ops {
		ops[i].seq = e.seq.Add(1)
	}
	payload := encodePack(ops)
	rec := make([]byte, metaRecordLen(len(payload)))
	encodeMeta(rec, e.sb.FS(), metaPack, ops[len(ops)-1].seq, payload)
	return rec
}

// h41bOpRecord numbers op and returns its one-operation record.
func h41bOpRecord(e *Engine, op nsOp) []byte {
	op.seq = e.seq.Add(1)
	payload := encodeOp(op)
	rec := make([]byte, metaRecordLen(len(payload)))
	encodeMeta(rec, e.sb.FS(), metaOp, op.seq, payload)
	return rec
}

// h41bLogRecords writes recs, back to back in one write, at the active
// metadata half's log end, as the engine's writer would (nothing is
// applied in memory: the test crashes the engine and recovery replays
// them), and returns where the first begins (device offset).
func h41bLogRecords(t *testing.T, e *Engine, recs ...[]byte) int64 {
	t.Helper()
	m := e.meta
	e.nsMu.Lock()
	defer e.nsMu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	var all []byte
	for _, r := range recs {
		all = append(all, r...)
	}
	if m.wp+int64(len(all)) > e.sb.metaHalfCap() {
		t.Fatalf("no room in metadata half %d for %d bytes at %d", m.active, len(all), m.wp)
	}
	buf := alignedCopy(t, all)
	z, zoff := e.sb.metaAt(m.active, m.wp)
	if err := e.writeMeta(m.active, m.wp, buf, m.w); err != nil {
		t.Fatal(err)
	}
	m.wp += int64(len(all))
	return int64(z)*e.geo.ZoneSize + zoff
}

func alignedCopy(t *testing.T, p []byte) []byte {
	t.Helper()
	sb, err := newScanBuf(len(p))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sb.close)
	copy(sb.mem, p)
	return sb.mem[:len(p)]
}

// h41bPatch overwrites the emu device file of devName (closed) at
// device offset off with p: damage at rest, or a torn sector.
func h41bPatch(t *testing.T, devName string, off int64, p []byte) {
	t.Helper()
	fh, fo := emuBacking(t, devName, off, os.O_RDWR)
	defer fh.Close()
	if _, err := fh.WriteAt(p, fo); err != nil {
		t.Fatal(err)
	}
}

// emuBacking opens the backing file of emu device devName (closed) with
// flag, and says where device offset off is in it.
func emuBacking(t *testing.T, devName string, off int64, flag int) (*os.File, int64) {
	t.Helper()
	d, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fo := d.(*zns.Emu).FileOffset(off)
	d.Close()
	fh, err := os.OpenFile(strings.TrimPrefix(devName[:strings.IndexByte(devName, '?')], "emu:"), flag, 0)
	if err != nil {
		t.Fatal(err)
	}
	return fh, fo
}

// h41bCrash crashes e and cuts its device's power (a Flush before it
// decides what survives), leaving the device closed.
func h41bCrash(t *testing.T, e *Engine) {
	t.Helper()
	e.crashForTest()
	emu := emuOf(t, e)
	if err := emu.PowerCut(); err != nil {
		t.Fatal(err)
	}
	emu.Close()
}

// h41bNames says which of names e has.
func h41bHas(t *testing.T, e *Engine, names ...string) map[string]bool {
	t.Helper()
	got := map[string]bool{}
	for _, n := range names {
		_, err := e.Stat(n)
		switch {
		case err == nil:
			got[n] = true
		case errors.Is(err, fs.ErrNotExist):
		default:
			t.Fatalf("stat %s: %v", n, err)
		}
	}
	return got
}

func h41bWant(t *testing.T, when string, got map[string]bool, have, lack []string) {
	t.Helper()
	for _, n := range have {
		if !got[n] {
			t.Errorf("%s: %s is missing", when, n)
		}
	}
	for _, n := range lack {
		if got[n] {
			t.Errorf("%s: %s exists", when, n)
		}
	}
}

// h41bPackOps are a create of b and c, a rename of b to d and a remove
// of a (id aID), ids from e's next.
func h41bPackOps(e *Engine, aID uint64) []nsOp {
	b, c := e.nextID, e.nextID+1
	return []nsOp{
		{kind: opCreate, file: b, name: "b"},
		{kind: opCreate, file: c, name: "c"},
		{kind: opRename, file: b, name: "d"},
		{kind: opRemove, file: aID},
	}
}

// A durable pack replays whole after a power cut, on a format-3 device,
// and the engine appends to the log after it: its operations in order,
// in one record. Fsck finds nothing wrong.
func TestH41bPackReplaysAfterPowerCut(t *testing.T) {
	h41bFormat(t, superPackVersion)
	devName := emuDevice(t, 16, "256K", "")
	e := formatOpen(t, devName, smallConfig())
	if e.sb.Version != superPackVersion {
		t.Fatalf("format %d, want %d", e.sb.Version, superPackVersion)
	}
	createSynced(t, e, "a", []byte("acked")).Close()
	aID := e.byName["a"].id
	ops := h41bPackOps(e, aID)
	rec := h41bPackRecord(e, ops)
	if len(rec) != BlockSize {
		t.Fatalf("a pack of %d operations takes %d bytes", len(ops), len(rec))
	}
	h41bLogRecords(t, e, rec)
	if err := e.dev.Flush(); err != nil {
		t.Fatal(err)
	}
	h41bCrash(t, e)

	e = reopen(t, devName, smallConfig())
	h41bWant(t, "after the pack", h41bHas(t, e, "a", "b", "c", "d"), []string{"c", "d"}, []string{"a", "b"})
	// The log goes on after recovery: a durable create, then a crash.
	mustCreate(t, e, "e").Close()
	h41bCrash(t, e)
	e = reopen(t, devName, smallConfig())
	h41bWant(t, "after a create logged after it", h41bHas(t, e, "a", "b", "c", "d", "e"), []string{"c", "d", "e"}, []string{"a", "b"})
	if got := e.nextID; got <= ops[1].file {
		t.Errorf("next file id %d hands out the pack's id %d again", got, ops[1].file)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	h41bFsckClean(t, devName)
}

func h41bFsckClean(t *testing.T, devName string) {
	t.Helper()
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	rep, err := Fsck(dev)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) > 0 {
		t.Fatalf("fsck: %v", rep.Problems)
	}
}

// A pack the power cut took before a flush made it durable is lost
// whole; one after a flush survives whole; a cut that keeps the first
// of two packs (the drive wrote some of its cache) keeps exactly its
// operations, none of the second's.
func TestH41bPowerCutAroundPacks(t *testing.T) {
	h41bFormat(t, superPackVersion)
	for _, c := range []string{"before-flush", "after-flush", "keeps-first-of-two"} {
		t.Run(c, func(t *testing.T) {
			devName := emuDevice(t, 16, "256K", "")
			e := formatOpen(t, devName, smallConfig())
			createSynced(t, e, "a", []byte("acked")).Close()
			aID := e.byName["a"].id
			first := h41bPackRecord(e, h41bPackOps(e, aID))
			e.nextID += 2
			second := h41bPackRecord(e, []nsOp{
				{kind: opCreate, file: e.nextID, name: "f"},
				{kind: opRename, file: e.nextID - 1, name: "g"}, // c, from the first pack
			})
			mz := e.sb.MetaZones[e.meta.active]
			start := h41bLogRecords(t, e, first)
			h41bLogRecords(t, e, second)
			zone := int(start / e.geo.ZoneSize)
			if zone < mz || zone >= mz+e.sb.MetaGroup {
				t.Fatalf("the packs went to zone %d, not metadata half %d", zone, e.meta.active)
			}
			e.crashForTest()
			emu := emuOf(t, e)
			var err error
			switch c {
			case "before-flush":
				err = emu.PowerCut()
			case "after-flush":
				if err = emu.Flush(); err == nil {
					err = emu.PowerCut()
				}
			case "keeps-first-of-two":
				err = emu.PowerCutKeeping(func(z int, n int64) int64 {
					if z == zone {
						return n - BlockSize // all but the second pack
					}
					return 0
				})
			}
			if err != nil {
				t.Fatal(err)
			}
			emu.Close()
			e = reopen(t, devName, smallConfig())
			got := h41bHas(t, e, "a", "b", "c", "d", "f", "g")
			switch c {
			case "before-flush":
				h41bWant(t, c, got, []string{"a"}, []string{"b", "c", "d", "f", "g"})
			case "after-flush":
				h41bWant(t, c, got, []string{"d", "f", "g"}, []string{"a", "b", "c"})
			case "keeps-first-of-two":
				h41bWant(t, c, got, []string{"c", "d"}, []string{"a", "b", "f", "g"})
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			h41bFsckClean(t, devName)
		})
	}
}

// A pack torn by the power cut (its write kept only its first block, a
// two-block pack: the record runs past the write pointer) is a torn
// write: none of its operations is replayed, what came before it is,
// and it is not damage.
func TestH41bTornPackIsNotReplayed(t *testing.T) {
	h41bFormat(t, superPackVersion)
	devName := emuDevice(t, 16, "256K", "")
	e := formatOpen(t, devName, smallConfig())
	createSynced(t, e, "a", []byte("acked")).Close()
	aID := e.byName["a"].id
	var ops []nsOp
	for i := range 80 { // more than a block of creates, then the remove
		ops = append(ops, nsOp{kind: opCreate, file: e.nextID + uint64(i), name: "long-name-of-a-packed-create-" + string(rune('A'+i%26)) + strings.Repeat("x", i)})
	}
	ops = append(ops, nsOp{kind: opRemove, file: aID})
	rec := h41bPackRecord(e, ops)
	if len(rec) < 2*BlockSize {
		t.Fatalf("the pack takes %d bytes, want two blocks or more", len(rec))
	}
	h41bLogRecords(t, e, rec)
	e.crashForTest()
	emu := emuOf(t, e)
	if err := emu.TearLastWrite(BlockSize); err != nil {
		t.Fatal(err)
	}
	emu.Close()
	e = reopen(t, devName, smallConfig())
	got := h41bHas(t, e, "a", ops[0].name, ops[1].name)
	h41bWant(t, "after the torn pack", got, []string{"a"}, []string{ops[0].name, ops[1].name})
	if len(e.damage) > 0 {
		t.Errorf("a torn pack reported as damage: %v", e.damage)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	h41bFsckClean(t, devName)
}

// h41bDamagedAfterLater logs the records of front (numbered already),
// bad (the record the test damages) and a create of "after" (the next
// file id, numbered here), flushes, then logs a create of "later" under
// a flush of its own, so that damage done to bad is to what an older
// flush made durable (the emu takes back what fails the last flush's
// checksum, as a cut during it), and crashes e. It returns where bad
// begins on the device.
func h41bDamagedAfterLater(t *testing.T, e *Engine, front [][]byte, bad []byte) int64 {
	t.Helper()
	after := h41bOpRecord(e, nsOp{kind: opCreate, file: e.nextID, name: "after"})
	for _, r := range front {
		h41bLogRecords(t, e, r)
	}
	at := h41bLogRecords(t, e, bad)
	h41bLogRecords(t, e, after)
	if err := e.dev.Flush(); err != nil {
		t.Fatal(err)
	}
	e.nextID++
	h41bLogRecords(t, e, h41bOpRecord(e, nsOp{kind: opCreate, file: e.nextID, name: "later"}))
	if err := e.dev.Flush(); err != nil {
		t.Fatal(err)
	}
	h41bCrash(t, e)
	return at
}

// A pack block that fails its checksum below the write pointer (a
// sector of it lost, or bits flipped at rest) is all or nothing: none
// of its operations is replayed, nor what follows it; the operations
// before it are, and recovery and fsck report the cut log. One whose
// checksum holds but that does not decode (operations out of order) is
// damage too, reported as such.
func TestH41bDamagedPack(t *testing.T) {
	h41bFormat(t, superPackVersion)
	for _, c := range []string{"torn-sector", "undecodable"} {
		t.Run(c, func(t *testing.T) {
			devName := emuDevice(t, 16, "256K", "")
			e := formatOpen(t, devName, smallConfig())
			createSynced(t, e, "a", []byte("acked")).Close()
			aID := e.byName["a"].id
			before := h41bOpRecord(e, nsOp{kind: opCreate, file: e.nextID, name: "before"})
			e.nextID++
			ops := h41bPackOps(e, aID)
			// Names long enough that the pack spans the block's first
			// sectors: the torn one (the second) is in its payload,
			// which the checksum covers (not the padding after it).
			for i := range 4 {
				ops = append(ops, nsOp{kind: opCreate, file: e.nextID + 2 + uint64(i), name: strings.Repeat(string(rune('k'+i)), 200)})
			}
			rec := h41bPackRecord(e, ops)
			if n := metaHdrLen + len(encodePack(ops)); n < 1024 || n > BlockSize {
				t.Fatalf("the pack takes %d bytes of its block", n)
			}
			if c == "undecodable" {
				ops[0].seq, ops[1].seq = ops[1].seq, ops[0].seq
				payload := encodePack(ops)
				encodeMeta(rec, e.sb.FS(), metaPack, ops[len(ops)-1].seq, payload)
			}
			e.nextID += 6
			at := h41bDamagedAfterLater(t, e, [][]byte{before}, rec)
			if c == "torn-sector" {
				h41bPatch(t, devName, at+512, make([]byte, 512))
			}
			// Fsck first: the device as the damage left it.
			dev, err := zns.Open(devName, zns.Options{})
			if err != nil {
				t.Fatal(err)
			}
			rep, err := Fsck(dev)
			dev.Close()
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Problems) == 0 {
				t.Errorf("%s: fsck finds nothing wrong", c)
			}
			t.Logf("fsck: %v", rep.Problems)
			e = reopen(t, devName, smallConfig())
			got := h41bHas(t, e, "a", "before", "b", "c", "d", "after", "later")
			h41bWant(t, c, got, []string{"a", "before"}, []string{"b", "c", "d", "after", "later"})
			if len(e.damage) == 0 {
				t.Errorf("%s: recovery reports no damage", c)
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A device of format 2 (every device formatted before packs) opens,
// recovers and takes operations as before, and keeps its format: every
// superblock copy written since says 2, so that a zonefold of format 2
// still reads it. A pack in its log is damage there (no writer of
// format 2 wrote one), not replayed.
func TestH41bFormat2DeviceStaysFormat2(t *testing.T) {
	h41bFormat(t, superMinVersion)
	devName := emuDevice(t, 16, "256K", "")
	e := formatOpen(t, devName, smallConfig())
	if e.sb.Version != 2 {
		t.Fatalf("format %d, want 2", e.sb.Version)
	}
	createSynced(t, e, "a", []byte("acked")).Close()
	mustCreate(t, e, "b").Close()
	if err := e.Rename("b", "c"); err != nil {
		t.Fatal(err)
	}
	h41bCrash(t, e)
	e = reopen(t, devName, smallConfig())
	h41bWant(t, "format 2 after a crash", h41bHas(t, e, "a", "b", "c"), []string{"a", "c"}, []string{"b"})
	// Enough checkpoints that both halves' superblocks were written
	// since (recovery's is one).
	for range 3 {
		if err := e.checkpoint(); err != nil {
			t.Fatal(err)
		}
	}
	aID := e.byName["a"].id
	h41bLogRecords(t, e, h41bPackRecord(e, []nsOp{{kind: opRemove, file: aID}, {kind: opCreate, file: e.nextID, name: "p"}}))
	if err := e.dev.Flush(); err != nil {
		t.Fatal(err)
	}
	mz := e.sb.MetaZones
	h41bCrash(t, e)
	rewriteSuperblocks(t, devName, mz, func(i int, blk []byte) {
		sb, err := decodeSuperblock(blk)
		if err != nil {
			t.Fatalf("superblock copy %d: %v", i, err)
		}
		if sb.Version != 2 {
			t.Errorf("superblock copy %d says format %d, want 2", i, sb.Version)
		}
	})
	e = reopen(t, devName, smallConfig())
	h41bWant(t, "a pack on format 2", h41bHas(t, e, "a", "c", "p"), []string{"a", "c"}, []string{"p"})
	if len(e.damage) == 0 || !strings.Contains(strings.Join(e.damage, "\n"), "format 2") {
		t.Errorf("a pack on a format-2 device not reported as damage: %v", e.damage)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}

// A superblock of a format above the newest this zonefold reads is
// refused, naming it: the check a zonefold of format 2 makes of a
// format-3 device (its superVersion is 2), which it would otherwise
// read with packs as the log's end.
func TestH41bNewerFormatIsRefused(t *testing.T) {
	h41bFormat(t, superPackVersion) // packs, whatever Format writes
	devName := emuDevice(t, 16, "256K", "")
	e := formatOpen(t, devName, smallConfig())
	mz := e.sb.MetaZones
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	rewriteSuperblocks(t, devName, mz, func(_ int, blk []byte) {
		blk[4] = superVersion + 1
		binaryPutCRC(blk)
	})
	_, err := Open(devName, smallConfig())
	if err == nil || !strings.Contains(err.Error(), "from a newer zonefold") {
		t.Fatalf("open of a format-%d device: %v", superVersion+1, err)
	}
}

func TestH41bPackCodec(t *testing.T) {
	h41bFormat(t, superPackVersion) // packs, whatever Format writes
	ops := []nsOp{
		{seq: 5, kind: opCreate, file: 3, name: "x"},
		{seq: 7, kind: opTruncate, file: 3, size: 4096},
		{seq: 9, kind: opVoid, voids: []uint64{1, 2}},
	}
	p := encodePack(ops)
	got, err := decodePack(9, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ops) || got[0].name != "x" || got[1].size != 4096 || got[2].voids[1] != 2 || got[2].seq != 9 {
		t.Fatalf("decoded %+v", got)
	}
	n := 4
	for _, op := range ops {
		n += packLen(op)
	}
	if n != len(p) {
		t.Fatalf("packLen sums to %d, the pack is %d bytes", n, len(p))
	}
	for name, bad := range map[string]struct {
		seq uint64
		p   []byte
	}{
		"header number above the last": {10, p},
		"header number below the last": {8, p},
		"trailing bytes":               {9, append(append([]byte(nil), p...), 0)},
		"cut short":                    {9, p[:len(p)-1]},
		"empty":                        {9, encodePack(nil)},
		"out of order":                 {9, encodePack([]nsOp{ops[1], ops[0], ops[2]})},
		"repeated number":              {9, encodePack([]nsOp{ops[0], ops[0], ops[2]})},
	} {
		if _, err := decodePack(bad.seq, bad.p); !errors.Is(err, errCorruptMeta) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// h41bOpBlocks is the metadata log blocks operation records took since
// s0 (checkpoints not counted).
func h41bOpBlocks(e *Engine, s0 Stats) int64 {
	d := e.Stats().Sub(s0)
	return (d.DevMeta - d.DevCheckpoint) / BlockSize
}

// A burst of deferred creates (each its own 4 KiB log block before
// packs), from several goroutines, then SyncNamespace, writes a block
// per pack, not per create; every one survives a power cut after the
// sync. On a format-2 device the same burst still takes a block each.
func TestH41bBurstOfDeferredCreatesPacks(t *testing.T) {
	const g, per = 8, 125
	for _, v := range []int{superPackVersion, superMinVersion} {
		h41bFormat(t, v)
		devName := emuDevice(t, 32, "1M", "")
		e := formatOpen(t, devName, smallConfig())
		s0 := e.Stats()
		errs := make(chan error, g)
		for w := range g {
			go func() {
				for i := range per {
					f, err := e.OpenFile(h41bName(w, i), OCreate|ODeferSync)
					if err != nil {
						errs <- err
						return
					}
					f.Close()
				}
				errs <- nil
			}()
		}
		for range g {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		if err := e.SyncNamespace(); err != nil {
			t.Fatal(err)
		}
		blocks := h41bOpBlocks(e, s0)
		t.Logf("format %d: %d deferred creates took %d metadata log blocks", v, g*per, blocks)
		switch {
		case v == superPackVersion && blocks > g*per/10:
			t.Errorf("format %d: %d deferred creates took %d log blocks, want at most %d", v, g*per, blocks, g*per/10)
		case v == superMinVersion && blocks < g*per:
			t.Errorf("format %d: %d deferred creates took %d log blocks: packed on a device that holds no packs", v, g*per, blocks)
		}
		h41bCrash(t, e)
		e = reopen(t, devName, smallConfig())
		for w := range g {
			for i := range per {
				if _, err := e.Stat(h41bName(w, i)); err != nil {
					t.Fatalf("format %d: %s after SyncNamespace and a power cut: %v", v, h41bName(w, i), err)
				}
			}
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		h41bFsckClean(t, devName)
	}
}

func h41bName(w, i int) string { return fmt.Sprintf("burst-%d-%d", w, i) }

// Held operations (deferred creates and removes) land with the next
// record that is not held, in one pack, before its flush: a durable
// rename acknowledged after them keeps them after a power cut. Ones
// nothing acknowledged are lost whole to the cut, never a later one
// without an earlier one.
func TestH41bHeldOpsLandWithTheNextDurableOp(t *testing.T) {
	h41bFormat(t, superPackVersion) // packs, whatever Format writes
	devName := emuDevice(t, 16, "256K", "")
	e := formatOpen(t, devName, smallConfig())
	createSynced(t, e, "x", []byte("acked")).Close()
	for _, n := range []string{"a", "b"} {
		f, err := e.OpenFile(n, OCreate|ODeferSync)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if err := e.RemoveDeferred("x"); err != nil {
		t.Fatal(err)
	}
	if !e.meta.pending.Load() {
		t.Fatal("the deferred operations were not held for a pack")
	}
	s0 := e.Stats()
	if err := e.Rename("a", "c"); err != nil {
		t.Fatal(err)
	}
	if blocks := h41bOpBlocks(e, s0); blocks != 1 {
		t.Errorf("the rename and three held operations took %d log blocks, want 1", blocks)
	}
	// Held again, and never acknowledged: lost whole.
	f, err := e.OpenFile("late", OCreate|ODeferSync)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	e = powerCutReopen(t, e, devName, smallConfig())
	h41bWant(t, "after the cut", h41bHas(t, e, "x", "a", "b", "c", "late"), []string{"b", "c"}, []string{"x", "a", "late"})
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	h41bFsckClean(t, devName)
}

// An fsync of any file lands what is held (an fsync makes the deferred
// creates and removes of every file durable), and the record of held
// operations that failed leaves them applied, made durable by the
// checkpoint the next acknowledging flush owes (unlogged): never an ack
// that a power cut undoes.
func TestH41bHeldOpsFailedRecordIsCheckpointed(t *testing.T) {
	h41bFormat(t, superPackVersion) // packs, whatever Format writes
	devName := emuDevice(t, 16, "256K", "")
	e := formatOpen(t, devName, smallConfig())
	h := createSynced(t, e, "x", []byte("acked"))
	f, err := e.OpenFile("held", OCreate|ODeferSync)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	failed := 0
	testHookMetaWrite = func(e *Engine, half int, off int64, data []byte) error {
		if failed == 0 && len(data) == BlockSize && binary.LittleEndian.Uint16(data[6:]) == metaOp {
			failed++
			return fmt.Errorf("injected: %w", syscall.EIO)
		}
		return nil
	}
	t.Cleanup(func() { testHookMetaWrite = nil })
	if err := h.Sync(); err != nil {
		t.Fatalf("fsync after the held record failed: %v", err)
	}
	if failed != 1 {
		t.Fatalf("%d held records failed, want 1", failed)
	}
	h.Close()
	e = powerCutReopen(t, e, devName, smallConfig())
	h41bWant(t, "after the cut", h41bHas(t, e, "x", "held"), []string{"x", "held"}, nil)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}

// A log cut by damage in the half recovery starts from (a record that
// fails its checksum, or a pack that does not decode, with whole records
// after it) loses what follows, reported; recovery's checkpoint must
// still be numbered above those records. Numbered below them (5c0e926
// too, with one-operation records), a crash before the next checkpoint
// left the damaged half holding whole records above the newest
// checkpoint behind a damaged one, and the next Open refused the
// device (checkHiddenLog).
func TestH41bCutLogRecoveryNumbersAboveWhatFollows(t *testing.T) {
	h41bFormat(t, superPackVersion) // packs, whatever Format writes
	for _, c := range []string{"checksum", "undecodable-pack"} {
		t.Run(c, func(t *testing.T) {
			devName := emuDevice(t, 16, "256K", "")
			e := formatOpen(t, devName, smallConfig())
			createSynced(t, e, "a", []byte("acked")).Close()
			var bad []byte
			if c == "checksum" {
				bad = h41bOpRecord(e, nsOp{kind: opCreate, file: e.nextID, name: "bad"})
			} else {
				ops := []nsOp{{kind: opCreate, file: e.nextID, name: "bad"}, {kind: opCreate, file: e.nextID + 1, name: "bad2"}}
				bad = h41bPackRecord(e, ops)
				ops[0].seq, ops[1].seq = ops[1].seq, ops[0].seq
				encodeMeta(bad, e.sb.FS(), metaPack, ops[0].seq, encodePack(ops))
			}
			e.nextID += 2
			at := h41bDamagedAfterLater(t, e, nil, bad)
			if c == "checksum" {
				h41bPatch(t, devName, at+8, make([]byte, 8))
			}
			e = reopen(t, devName, smallConfig())
			if len(e.damage) == 0 {
				t.Errorf("no damage reported")
			}
			h41bCrash(t, e)
			e = reopen(t, devName, smallConfig())
			h41bWant(t, "after a second crash", h41bHas(t, e, "a", "bad", "after", "later"), []string{"a"}, []string{"bad", "after", "later"})
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			h41bFsckClean(t, devName)
		})
	}
}
