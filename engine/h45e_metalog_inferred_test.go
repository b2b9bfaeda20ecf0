package engine

import (
	"fmt"
	"strings"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// TestSalvageLostZoneTableMetaRecordEndingInAZeroBlock: a checkpoint's
// payload ends with the write pointer of the last data zone, 8 zero bytes
// when that zone is empty, so a checkpoint whose last block holds only
// those is a record whose last block is all zeros. Copied with its zero
// blocks made holes (cp --sparse=always, rsync -S) and its zone table
// lost, the emu file's inferred write pointer of that metadata zone
// ends a block short of the record (zns.Emu.inferZones), as
// wholePastInferredWP's data records did (h44j). Here the checkpoint, the
// first record of the half the switch made active, ends exactly at its
// first zone's capacity, and the log goes on in the half's next zone: a
// create and its data. The zone reads as written up to a block short
// of its capacity, which ended the half there (halfEnd), the checkpoint
// taken for torn and everything after it lost: the salvage must copy
// every file, the created one too, and report nothing but the lost
// table. With nothing after the checkpoint (the log ends with it), the
// salvage must copy every file all the same.
func TestSalvageLostZoneTableMetaRecordEndingInAZeroBlock(t *testing.T) {
	for _, after := range []bool{true, false} {
		t.Run(fmt.Sprintf("log_after=%v", after), func(t *testing.T) { h45eMetaZeroBlock(t, after) })
	}
}

func h45eMetaZeroBlock(t *testing.T, after bool) {
	devName := emuDevice(t, 64, "64K", "")
	e := formatOpen(t, devName, smallConfig())
	path := emuOf(t, e).Path()
	if e.sb.MetaGroup < 2 {
		t.Fatalf("set-up: metadata halves of %d zones", e.sb.MetaGroup)
	}
	// encodeCheckpoint of empty files: 20 bytes, each file 24 and
	// its name, the count of zones 4 and each data zone 12. The record
	// (header 32 bytes, then the payload) after the half's superblock
	// block must end 8 bytes into its zone's last block: exactly the
	// last data zone's write pointer, 0, is in that block.
	nz := 0
	for _, z := range e.zones {
		if z != nil {
			nz++
		}
	}
	need := int(e.sb.ZoneCap) - 2*BlockSize + 8 - metaHdrLen - 20 - 4 - 12*nz
	want := map[string][]byte{}
	create := func(name string) {
		f, err := e.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		want[name] = []byte{}
	}
	for i := 0; need-24-230 >= 24+25; i++ {
		name := fmt.Sprintf("%04d-%s", i, strings.Repeat("n", 225))
		create(name)
		need -= 24 + len(name)
	}
	create(strings.Repeat("l", need-24))
	e.nsMu.Lock()
	err := e.checkpoint()
	e.nsMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if e.meta.wp != e.sb.ZoneCap {
		t.Fatalf("set-up: the checkpoint ends at %d of its half, want its first zone's capacity %d", e.meta.wp, e.sb.ZoneCap)
	}
	half := e.meta.active
	if after {
		data := []byte("logged after the checkpoint, in the half's next zone")
		createSynced(t, e, "after", data).Close()
		want["after"] = data
		if e.meta.wp <= e.sb.ZoneCap {
			t.Fatalf("set-up: the create after the checkpoint is not in the half's next zone (log at %d)", e.meta.wp)
		}
	}
	if err := e.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.crashForTest()
	emuOf(t, e).Close()
	h44hZeroTable(t, path)
	h44jDigHoles(t, path)
	inferred := h44hReport(t, devName, zns.Options{Existing: true, InferLostTable: true})
	first := inferred[e.sb.MetaZones[half]]
	if first.WP-first.Start != e.sb.ZoneCap-BlockSize {
		t.Fatalf("set-up: the inferred write pointer of the half's first zone is at %d, want a block short of its capacity %d (the checkpoint's last block all zeros, a hole)", first.WP-first.Start, e.sb.ZoneCap)
	}
	rep, sink := h44hSalvageLost(t, devName, path)
	h44jAllWhole(t, rep)
	if len(rep.Fsck.Problems) != 1 {
		t.Errorf("problems beside the lost table: %q", rep.Fsck.Problems[1:])
	}
	checkCopies(t, sink, want)
}

// TestSalvageLostZoneTablePackEndingInAZeroBlock: an operation ends with
// its size, zone and name's length, all zeros for a truncate to 0, so a
// pack whose last block holds only those ends in an all-zero block. The
// pack last in the log, its zero block made a hole and the zone table
// lost, the inferred write pointer ends a block short of it, and the
// metadata log's scan took it for torn: its creates were lost, silently.
// The salvage must copy every file it created.
func TestSalvageLostZoneTablePackEndingInAZeroBlock(t *testing.T) {
	h41bFormat(t, superPackVersion)
	devName := emuDevice(t, 64, "64K", "")
	e := formatOpen(t, devName, smallConfig())
	path := emuOf(t, e).Path()
	createSynced(t, e, "before", []byte("before the pack")).Close()
	want := map[string][]byte{"before": []byte("before the pack")}
	// A pack: its count (4 bytes), then each operation's number,
	// length (12 bytes) and encodeOp (25 bytes and the name). The
	// record (header 32 bytes, the payload) must end 16 bytes into its
	// last block: the truncate's size, zone and name length.
	need := 2*BlockSize + 16 - metaHdrLen - 4 - (12 + 25) // the truncate
	var ops []nsOp
	for i := 0; need > 0; i++ {
		l := min(200, need-(12+25))
		if rest := need - (12 + 25 + l); rest > 0 && rest < 12+25+1 {
			l -= 12 + 25 + 1 - rest // leave room for one more create
		}
		name := fmt.Sprintf("p%03d-%s", i, strings.Repeat("x", l-5))
		ops = append(ops, nsOp{kind: opCreate, file: e.nextID, name: name})
		e.nextID++
		want[name] = []byte{}
		need -= 12 + 25 + len(name)
	}
	if need != 0 {
		t.Fatalf("set-up: %d bytes short of the pack's size", -need)
	}
	ops = append(ops, nsOp{kind: opTruncate, file: ops[len(ops)-1].file})
	pack := h41bPackRecord(e, ops)
	if len(pack) != 3*BlockSize || !isZero(pack[2*BlockSize:]) {
		t.Fatalf("set-up: a pack of %d bytes, its last block zeros: %v", len(pack), isZero(pack[len(pack)-BlockSize:]))
	}
	at := h41bLogRecords(t, e, pack)
	if err := e.dev.Flush(); err != nil {
		t.Fatal(err)
	}
	if z := at / e.geo.ZoneSize; (at+int64(len(pack))-1)/e.geo.ZoneSize != z {
		t.Fatalf("set-up: the pack at %d crosses into the next zone", at)
	}
	e.crashForTest()
	emuOf(t, e).Close()
	h44hZeroTable(t, path)
	h44jDigHoles(t, path)
	rz := h44hReport(t, devName, zns.Options{Existing: true, InferLostTable: true})[at/e.geo.ZoneSize]
	if end := at + int64(len(pack)); rz.WP != end-BlockSize {
		t.Fatalf("set-up: the inferred write pointer of the pack's zone is at %d, want a block short of the pack's end %d", rz.WP, end)
	}
	rep, sink := h44hSalvageLost(t, devName, path)
	h44jAllWhole(t, rep)
	if len(rep.Fsck.Problems) != 1 {
		t.Errorf("problems beside the lost table: %q", rep.Fsck.Problems[1:])
	}
	checkCopies(t, sink, want)
}
