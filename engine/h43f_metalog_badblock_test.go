package engine

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// h43fOpenBad opens devName through a device whose reads of [lo, hi)
// fail (bad media), returning the engine (closed by the test), the
// device, and Open's error.
func h43fOpenBad(t *testing.T, devName string, lo, hi int64) (*Engine, *h39fBadRead, error) {
	t.Helper()
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := &h39fBadRead{Emu: dev.(*zns.Emu), lo: lo, hi: hi}
	e, err := OpenDevice(d, smallConfig())
	if err != nil {
		dev.Close()
		return nil, d, err
	}
	t.Cleanup(func() { d.Emu.Close() })
	return e, d, nil
}

// h43fMetaDev is the device offset of offset off of metadata half h.
func h43fMetaDev(e *Engine, h int, off int64) int64 {
	z, zoff := e.sb.metaAt(h, off)
	return int64(z)*e.geo.ZoneSize + zoff
}

// TestH43fHiddenLogRecordWithAnUnreadableBlockRefuses: the newest
// checkpoint of the active half fails its checksum, so recovery would
// start from the other half's older one; after it in that half lies a
// pack of creates numbered above the older checkpoint whose header reads
// but whose second block fails to read (bad media). Recovering from the
// older checkpoint loses those creates: Open must refuse, as it does when
// the pack reads whole (checkHiddenLog). laterMeta passed over a record
// whose own read failed, so checkHiddenLog found nothing newer and Open
// went on without the creates, silently (before scanBlocks the read's
// EIO failed Open).
func TestH43fHiddenLogRecordWithAnUnreadableBlockRefuses(t *testing.T) {
	h41bFormat(t, superPackVersion)
	for _, bad := range []bool{false, true} {
		t.Run(fmt.Sprintf("bad=%v", bad), func(t *testing.T) {
			devName := emuDevice(t, 16, "256K", "")
			e := formatOpen(t, devName, smallConfig())
			ckptAt := h43fMetaDev(e, e.meta.active, BlockSize)
			pack, _ := h43fBigPack(e)
			if len(pack) < 2*BlockSize {
				t.Fatalf("set-up: pack of %d bytes, want more than one block", len(pack))
			}
			at := h41bLogRecords(t, e, pack)
			if err := e.dev.Flush(); err != nil {
				t.Fatal(err)
			}
			h41bCrash(t, e)
			h41bPatch(t, devName, ckptAt+8, make([]byte, 8)) // the newest checkpoint fails its checksum
			lo, hi := int64(-1), int64(-1)
			if bad {
				lo, hi = at+BlockSize, at+2*BlockSize
			}
			e, _, err := h43fOpenBad(t, devName, lo, hi)
			if err == nil {
				e.Close()
				t.Fatalf("Open with the newest checkpoint damaged and a pack numbered above the older one after it (bad block in it: %v): no error; its creates are lost", bad)
			}
			t.Logf("Open: %v", err)
			if !strings.Contains(err.Error(), "refusing to open") || !strings.Contains(err.Error(), "fsck") {
				t.Fatalf("Open's refusal does not say why and what to do: %v", err)
			}
		})
	}
}

// TestH43fUnreadableBlockInTheMetaLogWalk: a block of the log recovery
// walks (below where its log ends) fails to read. Open must refuse (what
// is logged from there on may be acknowledged operations), and say what
// failed and what to do: the half, the offset, that the medium failed
// the read, and fsck. It failed with the bare EIO of the read.
func TestH43fUnreadableBlockInTheMetaLogWalk(t *testing.T) {
	devName := emuDevice(t, 16, "256K", "")
	e := formatOpen(t, devName, smallConfig())
	createSynced(t, e, "a", []byte("acked")).Close()
	half := e.meta.active
	off := e.meta.wp
	at := h41bLogRecords(t, e, h41bOpRecord(e, nsOp{kind: opCreate, file: e.nextID, name: "b"}))
	e.nextID++
	if err := e.dev.Flush(); err != nil {
		t.Fatal(err)
	}
	h41bLogRecords(t, e, h41bOpRecord(e, nsOp{kind: opCreate, file: e.nextID, name: "c"}))
	if err := e.dev.Flush(); err != nil {
		t.Fatal(err)
	}
	h41bCrash(t, e)
	e, _, err := h43fOpenBad(t, devName, at, at+BlockSize)
	if err == nil {
		e.Close()
		t.Fatal("Open with an unreadable block inside the metadata log: no error")
	}
	t.Logf("Open: %v", err)
	if !errors.Is(err, syscall.EIO) {
		t.Errorf("Open's error does not wrap EIO: %v", err)
	}
	msg := err.Error()
	for _, want := range []string{fmt.Sprintf("metadata half %d", half), fmt.Sprintf("at %d", off), "medium", "refusing to open", "fsck"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Open's error does not say %q: %v", want, err)
		}
	}
	// fsck sees what Open sees: its recovery is Open's.
	if problems := h43hFsckBad(t, devName, at, at+BlockSize); !strings.Contains(strings.Join(problems, "\n"), "the medium failed the read") {
		t.Errorf("fsck does not report the unreadable block in the log: %q", problems)
	}
}

// TestH43fFailedCheckpointKeepsATruncatesKind: a truncate whose flush
// failed sets Engine.unlogged outside every lock (cutAndLog), so a
// checkpoint can run between its kind (unloggedWhat) and unlogged. One
// that began with unlogged clear took the truncate's kind and, failing,
// gave back only what unlogged said it took: nothing. unlogged, set
// just after, stood for no kind, and once a pack failed too the settle's
// error named only the pack, as before TestH43bSettleNamesPackAndTruncate.
func TestH43fFailedCheckpointKeepsATruncatesKind(t *testing.T) {
	e, _ := nothingOwedBesideReadOnlyHalf(t)
	cerr := h43fCheckpointInSetUnlogged(t, e)
	e.setUnlogged(unloggedTruncate) // as cutAndLog after its failed flush
	if *cerr == nil {
		t.Fatal("set-up: the checkpoint beside a read-only half did not fail")
	}
	e.setUnlogged(unloggedPack)
	if text := e.unloggedText(); !strings.Contains(text, "truncate") || !strings.Contains(text, "pack") {
		t.Fatalf("a truncate whose record failed, a failed checkpoint in between, and a failed pack: %q does not name both", text)
	}
}

// nothingOwedBesideReadOnlyHalf is heldPackBesideReadOnlyHalf with
// nothing owed yet: checkpoints fail (the other half is read-only).
func nothingOwedBesideReadOnlyHalf(t *testing.T) (*Engine, *File) {
	t.Helper()
	e, x := heldPackBesideReadOnlyHalf(t)
	if e.unlogged.Load() || e.unloggedWhat.Load() != 0 {
		t.Fatalf("set-up: unlogged %v (%d) before anything failed", e.unlogged.Load(), e.unloggedWhat.Load())
	}
	return e, x
}

// TestH43fCheckpointBetweenKindAndUnloggedTakesBoth pins setUnlogged's
// order (kind, then unlogged) against writeCheckpoint's (unlogged, then
// kinds): a checkpoint that lands between them holds the change, so a
// kind left behind would later name a failure already durable. Set the
// other way round, the pack's kind outlived the checkpoint that held it
// and a later truncate's failure named the pack too.
func TestH43fCheckpointBetweenKindAndUnloggedTakesBoth(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	e := formatOpen(t, devName, smallConfig())
	t.Cleanup(func() { e.Close() })
	cerr := h43fCheckpointInSetUnlogged(t, e)
	e.setUnlogged(unloggedPack) // as writeOp's failed pack
	if *cerr != nil {
		t.Fatalf("set-up: checkpoint: %v", *cerr)
	}
	e.setUnlogged(unloggedTruncate)
	if text := e.unloggedText(); strings.Contains(text, "pack") || !strings.Contains(text, "truncate") {
		t.Fatalf("a pack a checkpoint held, then a truncate whose record failed: %q", text)
	}
}

// TestH43fCutLogNumbersAboveARecordItCannotReadWhole: the log of the
// half recovery starts from is cut by a record that fails its checksum,
// and after it lies a pack whose header reads and whose second block
// fails to read (bad media). Recovery's checkpoint must be numbered
// above the pack: when the block reads again, a later Open finds the
// pack whole after the cut, and one numbered above the newest
// checkpoint makes it refuse the device (checkHiddenLog). laterMeta
// passed over the pack, so checkCutLog's number did not count it.
func TestH43fCutLogNumbersAboveARecordItCannotReadWhole(t *testing.T) {
	h41bFormat(t, superPackVersion)
	devName := emuDevice(t, 16, "256K", "")
	e := formatOpen(t, devName, smallConfig())
	createSynced(t, e, "a", []byte("acked")).Close()
	at := h41bLogRecords(t, e, h41bOpRecord(e, nsOp{kind: opCreate, file: e.nextID, name: "bad"}))
	e.nextID++
	if err := e.dev.Flush(); err != nil {
		t.Fatal(err)
	}
	pack, ops := h43fBigPack(e)
	packAt := h41bLogRecords(t, e, pack)
	if err := e.dev.Flush(); err != nil {
		t.Fatal(err)
	}
	h41bCrash(t, e)
	h41bPatch(t, devName, at+8, make([]byte, 8)) // "bad" fails its checksum
	e, d, err := h43fOpenBad(t, devName, packAt+BlockSize, packAt+2*BlockSize)
	if err != nil {
		t.Fatalf("first open, the log cut with a pack after it that fails to read whole: %v", err)
	}
	if len(e.damage) == 0 {
		t.Errorf("no damage reported")
	}
	e.crashForTest()
	if err := d.Emu.PowerCut(); err != nil {
		t.Fatal(err)
	}
	d.Emu.Close()
	e, _, err = h43fOpenBad(t, devName, -1, -1) // the block reads again
	if err != nil {
		t.Fatalf("open after a crash, the pack now whole: %v", err)
	}
	h41bWant(t, "after a crash", h41bHas(t, e, "a", "bad", ops[0].name), []string{"a"}, []string{"bad", ops[0].name})
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	h41bFsckClean(t, devName)
}

// h43fCheckpointInSetUnlogged makes e's next setUnlogged run a
// checkpoint between its kind and unlogged (as one by another goroutine
// can, cutAndLog's holding no lock); the checkpoint's error is returned.
func h43fCheckpointInSetUnlogged(t *testing.T, e *Engine) *error {
	t.Helper()
	var cerr error
	testHookSetUnlogged = func() {
		testHookSetUnlogged = nil
		e.nsMu.Lock()
		cerr = e.checkpoint()
		e.nsMu.Unlock()
	}
	t.Cleanup(func() { testHookSetUnlogged = nil })
	return &cerr
}

// h43fBigPack numbers 30 creates with long names and returns their
// pack's record (several blocks) and the creates.
func h43fBigPack(e *Engine) ([]byte, []nsOp) {
	var ops []nsOp
	for i := range 30 {
		ops = append(ops, nsOp{kind: opCreate, file: e.nextID, name: fmt.Sprintf("%03d-%s", i, strings.Repeat("x", 200))})
		e.nextID++
	}
	return h41bPackRecord(e, ops), ops
}
