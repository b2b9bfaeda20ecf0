package engine

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/zonefold/zonefold/uring"
	"github.com/zonefold/zonefold/zns"
)

// TestH44bOrphanRecordFromAGCRelocation: the orphan record of h42h, as
// GC's relocation leaves it. On format 3 a deferred create is held for a
// pack; the file's data, written back (not flushed), lands in a zone
// that GC then takes as its victim. The relocation copies the file's
// pieces as GC records and makes them durable with settledFlush, which
// lands nothing held (only an acknowledging flush does, flushAcked);
// the held create is carried only by the next metadata record, the
// victim's reset. A power cut between the two leaves GC records (and
// the data records the flush made durable) of a file no durable create
// names. The test cuts there: the device stops taking writes as the
// reset's record (with the create still held) is about to be written.
//
// After recovery: the synced file that shared the victim reads its
// synced bytes; the held file is gone; its GC records are on the device
// with its id, and recovery hands that id out to no new file (nextID),
// where its checkpoint lands and beside a full read-only half, where it
// does not and the orphan records stay newer than the checkpoint; a new
// file reads as empty (not the orphan's bytes), across a crash too; fsck
// finds the device clean.
func TestH44bOrphanRecordFromAGCRelocation(t *testing.T) {
	h41bFormat(t, superPackVersion)
	for _, c := range orphanCases {
		t.Run(c, func(t *testing.T) {
			devName, cfg, e := orphanCaseEngine(t, c)
			a := "a"
			if c == "checkpoint-lands" {
				mustCreate(t, e, a).Close()
				if err := e.SyncNamespace(); err != nil {
					t.Fatal(err)
				}
			} else {
				// Its log has room for one create: a is a file it
				// holds already (a write logs nothing).
				a = strings.Repeat("n", MaxNameLen-3) + "001"
			}
			want, orphan, hdrs := crashInGCOfHeldCreate(t, e, a)

			e2 := reopenBesideOrphan(t, devName, cfg, orphan, hdrs, KindGC)
			sameBytes(t, "the synced file that shared GC's victim, after the cut", readAll(t, e2, a), want)
			if e2.nextID <= orphan {
				t.Errorf("recovery's next file id is %d, but GC records on the device carry id %d", e2.nextID, orphan)
			}
			// A new file beside the orphan: not its id, not its bytes,
			// now or after a crash; fsck clean.
			h, err := e2.OpenFile("new", OCreate)
			if err != nil {
				e2.crashForTest()
				t.Fatalf("create after recovery: %v", err)
			}
			id := h.f.id
			if err := h.Sync(); err != nil {
				t.Fatalf("sync the new file: %v", err)
			}
			h.Close()
			if id == orphan {
				t.Errorf("the new file took id %d, the orphan GC records'", id)
			}
			if got := readAll(t, e2, "new"); len(got) != 0 {
				t.Errorf("the new file reads %d bytes; want none", len(got))
			}
			e2.crashForTest()
			h41bFsckClean(t, devName)
			e3, err := Open(devName, cfg)
			if err != nil {
				t.Fatalf("reopen after the create: %v", err)
			}
			defer e3.Close()
			if got := readAll(t, e3, "new"); len(got) != 0 {
				t.Errorf("after a crash the new file reads %d bytes; want none", len(got))
			}
			sameBytes(t, "the synced file, after the create and a crash", readAll(t, e3, a), want)
		})
	}
}

// crashInGCOfHeldCreate fills a zone with the synced file a (written,
// then partly overwritten: garbage for GC to gain), then creates "x"
// deferred (its create held for a pack), writes it and writes it back
// (no flush) so that its first record lands in a's zone, filling it. A
// GC pass takes that zone: its relocation copies a's and x's pieces and
// flushes; as the reset's record, which would carry x's create, is
// about to be written, the device stops taking writes. Then e crashes
// and the power is cut. It returns a's synced bytes, x's id and the
// device offsets of the headers of x's GC records.
func crashInGCOfHeldCreate(t *testing.T, e *Engine, a string) ([]byte, uint64, []int64) {
	t.Helper()
	ha, err := e.OpenFile(a, 0)
	if err != nil {
		t.Fatal(err)
	}
	// One class for a and x: x starts in the tail a's zone has left
	// once a is closed (placer.classTailLocked).
	if err := ha.SetWriteLife(LifeMedium); err != nil {
		t.Fatal(err)
	}
	zc := e.placer.zoneCap()
	want := bytes.Repeat([]byte{0xa1}, int(zc/2))
	if _, err := ha.WriteAt(want, 0); err != nil {
		t.Fatal(err)
	}
	if err := ha.Sync(); err != nil {
		t.Fatal(err)
	}
	over := bytes.Repeat([]byte{0xa2}, int(zc/4))
	copy(want, over)
	if _, err := ha.WriteAt(over, 0); err != nil {
		t.Fatal(err)
	}
	if err := ha.Sync(); err != nil {
		t.Fatal(err)
	}
	victim := fileZone(t, e, ha)
	ha.Close()

	f, err := e.OpenFile("x", OCreate|ODeferSync)
	if err != nil {
		t.Fatal(err)
	}
	id := f.f.id
	if err := f.SetWriteLife(LifeMedium); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{0x42}, int(zc/2)), 0); err != nil {
		t.Fatal(err)
	}
	if err := e.wb.FlushFile(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if !e.meta.pending.Load() {
		t.Fatal("set-up: x's create was not held for a pack")
	}
	if z := fileZone(t, e, f); z != victim || victim.state.Load() != zoneFull {
		t.Fatalf("set-up: x's first record is in zone %d, a's in zone %d (state %d); want both in one full zone",
			z.idx, victim.idx, victim.state.Load())
	}

	// x's records before the pass: those at the cut that are not
	// these are GC's.
	was := map[int64]bool{}
	f.f.mu.RLock()
	f.f.ext.t.Ascend(func(x extent) bool {
		was[x.hdr] = true
		return true
	})
	f.f.mu.RUnlock()
	emu := emuOf(t, e)
	var hdrs []int64
	held, cut := false, false
	errCut := errors.New("test: the power is cut")
	testHookMetaWrite = func(e *Engine, _ int, _ int64, _ []byte) error {
		if !cut {
			cut = true
			// Under metaLog.mu (writeMeta's caller holds it).
			for _, op := range e.meta.pend {
				held = held || op.kind == opCreate && op.file == id
			}
			f.f.mu.RLock()
			f.f.ext.t.Ascend(func(x extent) bool {
				if !was[x.hdr] {
					hdrs = append(hdrs, x.hdr)
				}
				return true
			})
			f.f.mu.RUnlock()
			emu.FailWrites(true)
		}
		return errCut
	}
	t.Cleanup(func() { testHookMetaWrite = nil })
	before := e.Stats()
	_, cerr := collectVictim(e, victim)
	testHookMetaWrite = nil
	if d := e.Stats().Sub(before); d.GCCopied == 0 {
		t.Fatalf("set-up: GC copied nothing (collect: %v)", cerr)
	}
	if !cut || !held {
		t.Fatalf("set-up: no metadata write after GC's copy with x's create held (write %v, held %v; collect: %v)", cut, held, cerr)
	}
	if len(hdrs) == 0 {
		t.Fatalf("set-up: x had no GC records at the cut (collect: %v)", cerr)
	}
	if e.zoneAt(devOf(t, e, a, 0).dev) == victim {
		t.Fatalf("set-up: GC left a's synced bytes in the victim (collect: %v)", cerr)
	}
	var zones []string
	for _, h := range hdrs {
		zones = append(zones, fmt.Sprint(e.zoneAt(h).idx))
	}
	t.Logf("x (id %d): GC records in zones %s; collect: %v", id, strings.Join(zones, ","), cerr)
	f.Close()
	crashAndCutFailingWrites(t, e, emu)
	return want, id, hdrs
}

// reopenBesideOrphan opens devName after a crash that left records of
// kind kind of file "x", whose create was lost (orphan, x's id), at the
// device offsets hdrs: it checks that x is gone and that those headers
// read back as such records, and returns the engine (crashed on failure).
func reopenBesideOrphan(t *testing.T, devName string, cfg Config, orphan uint64, hdrs []int64, kind uint16) *Engine {
	t.Helper()
	e, err := Open(devName, cfg)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	if e.byName["x"] != nil {
		e.crashForTest()
		t.Fatal("x's create survived the crash: no orphan record to show")
	}
	hb := alignedCopy(t, make([]byte, BlockSize))
	for _, at := range hdrs {
		var h RecordHeader
		if err := e.readDev(at, hb, uring.NewWaiter()); err != nil {
			e.crashForTest()
			t.Fatal(err)
		}
		if err := DecodeHeader(hb, &h); err != nil || h.FS != e.sb.FS() || h.File != orphan || h.Kind != kind {
			e.crashForTest()
			t.Fatalf("at %d after the crash: header %+v (%v), want a record of kind %d of file %d", at, h, err, kind, orphan)
		}
	}
	return e
}

// orphanCases are where an orphan record is left: a device where
// recovery's checkpoint lands, and one beside a full read-only metadata
// half, where it does not (fullReadOnlyHalfEngine).
var orphanCases = []string{"checkpoint-lands", "full-read-only-half"}

// orphanCaseEngine formats a device for orphan case c and opens an
// engine on it. Where the checkpoint lands, the background collector is
// off: the tests run what GC they need.
func orphanCaseEngine(t *testing.T, c string) (string, Config, *Engine) {
	t.Helper()
	if c == "full-read-only-half" {
		return fullReadOnlyHalfEngine(t)
	}
	devName, cfg := emuDevice(t, 16, "1M", ""), smallConfig()
	cfg.GC.Disabled = true
	return devName, cfg, formatOpen(t, devName, cfg)
}

// crashAndCutFailingWrites crashes e, whose device emu takes no writes
// (FailWrites), so that nothing the crash's stop does reaches it, then
// takes writes again and cuts the power.
func crashAndCutFailingWrites(t *testing.T, e *Engine, emu *zns.Emu) {
	t.Helper()
	e.crashForTest()
	emu.FailWrites(false)
	if err := emu.PowerCut(); err != nil {
		t.Fatal(err)
	}
	emu.Close()
}
