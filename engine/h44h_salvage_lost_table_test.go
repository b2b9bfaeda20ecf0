package engine

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/uring"
	"github.com/zonefold/zonefold/zns"
)

// An emu device whose zone table is lost (both header slots zeros, its
// zones holding a file system) opens for fsck --copy-to's salvage with
// the table inferred from the data (zns.Options.InferLostTable), read
// only: Salvage copies every synced file byte for byte, says first that
// the table was inferred, reports a file whose zone's data is gone as
// holes (zeros), never as other bytes, and leaves the file as it was.
// Without the option, Open refuses it (ErrLostZoneTable) and its
// message names fsck --copy-to.

// h44hFileSum is the emu file's size and SHA-256.
func h44hFileSum(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d %x", len(b), sha256.Sum256(b))
}

// h44hZeroTable zeroes the header area of the emu file at path (both
// slots, up to the first zone at 1 MiB): its zone table is lost.
func h44hZeroTable(t *testing.T, path string) {
	t.Helper()
	h44hZeroRange(t, path, 0, 1<<20)
}

// h44hZeroRange writes n zeros at off of the file at path.
func h44hZeroRange(t *testing.T, path string, off, n int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteAt(make([]byte, n), off)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

// h44hReport is the zone report of devName opened with opts.
func h44hReport(t *testing.T, devName string, opts zns.Options) []zns.Zone {
	t.Helper()
	dev, err := zns.Open(devName, opts)
	if err != nil {
		t.Fatalf("open %s: %v", devName, err)
	}
	defer dev.Close()
	rz := make([]zns.Zone, dev.Geometry().Zones)
	n, err := dev.Report(0, rz)
	if err != nil {
		t.Fatal(err)
	}
	return rz[:n]
}

// h44hSalvageLost checks that devName, its table lost, is refused
// without InferLostTable, then salvages it with the option and checks
// that the file at path did not change: the report and copies.
func h44hSalvageLost(t *testing.T, devName, path string) (*SalvageReport, salvageSink) {
	t.Helper()
	before := h44hFileSum(t, path)
	_, err := zns.Open(devName, zns.Options{Existing: true})
	if !errors.Is(err, zns.ErrLostZoneTable) || !strings.Contains(err.Error(), "fsck DEVICE --copy-to DIR") {
		t.Fatalf("Open of a lost table: %v, want ErrLostZoneTable naming fsck --copy-to", err)
	}
	dev, err := zns.Open(devName, zns.Options{Existing: true, InferLostTable: true})
	if err != nil {
		t.Fatalf("Open with InferLostTable: %v", err)
	}
	// The inferred device takes no write.
	var rz [1]zns.Zone
	if _, err := dev.Report(2, rz[:]); err != nil {
		t.Fatal(err)
	}
	if err := dev.Write(2, rz[0].WP, [][]byte{make([]byte, BlockSize)}, uring.NewWaiter()); !errors.Is(err, zns.ErrReadOnly) {
		t.Fatalf("write to a zone of an inferred table: %v, want ErrReadOnly", err)
	}
	for what, op := range map[string]func(int) error{"reset": dev.ResetZone, "finish": dev.FinishZone, "open": dev.OpenZone} {
		if err := op(2); !errors.Is(err, zns.ErrReadOnly) {
			t.Errorf("%s of a zone of an inferred table: %v, want ErrReadOnly", what, err)
		}
	}
	sink := salvageSink{}
	rep, err := Salvage(dev, sink.create)
	if cerr := dev.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("salvage: %v", err)
	}
	if after := h44hFileSum(t, path); after != before {
		t.Errorf("salvage changed the emu file: %s, was %s", after, before)
	}
	if len(rep.Fsck.Problems) == 0 || !strings.Contains(rep.Fsck.Problems[0], "zone table is lost") || !strings.Contains(rep.Fsck.Problems[0], "inferred") {
		t.Errorf("the report does not say first that the zone table was inferred: %q", rep.Fsck.Problems)
	}
	if rep.Complete() {
		t.Error("the salvage of a device whose zone table is lost says it is complete")
	}
	return rep, sink
}

func TestSalvageLostZoneTableCopiesEverySyncedFile(t *testing.T) {
	// As the device left the file, and copied with every block
	// allocated (cp --sparse=never, dd; a file system without hole
	// reporting): no hole tells where a zone's data ends, so every zone
	// reads as written to its capacity, and salvage still copies every
	// file whole.
	for _, noHoles := range []bool{false, true} {
		t.Run(fmt.Sprintf("noHoles=%v", noHoles), func(t *testing.T) { h44hSalvageEverySyncedFile(t, noHoles) })
	}
}

func h44hSalvageEverySyncedFile(t *testing.T, noHoles bool) {
	devName := emuDevice(t, 20, "1M", "")
	e := formatOpen(t, devName, smallConfig())
	path := emuOf(t, e).Path()
	rng := rand.New(rand.NewSource(44))
	want := map[string][]byte{}
	write := func(name string, off int64, n int) { writeSyncedModel(t, e, rng, want, name, off, n) }
	resets := e.Stats().GCResets
	for round := range 4 {
		write("big", 0, 2<<20+777) // overwritten whole each round: zones GC empties
		for i := range 20 {
			write(fmt.Sprintf("dir/f%d", i%4), int64(rng.Intn(300))*1000, 1+rng.Intn(30<<10))
		}
		gcThenCheckpoint(t, e, round == 1)
	}
	if e.Stats().GCResets == resets {
		t.Fatal("set-up: GC reset no zone")
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	real := h44hReport(t, devName, zns.Options{})
	h44hZeroTable(t, path)
	if noHoles {
		h44jFillHoles(t, path)
	}
	inferred := h44hReport(t, devName, zns.Options{Existing: true, InferLostTable: true})
	for i, z := range real {
		if noHoles && inferred[i].WP-inferred[i].Start != inferred[i].Cap {
			t.Errorf("set-up: zone %d inferred written to %d, not its capacity, in a file with no holes", i, inferred[i].WP-inferred[i].Start)
		}
		// Never below the real write pointer of a zone not finished
		// (a finished one's unwritten rest reads as zeros either
		// way): that would hide records.
		w := inferred[i].WP
		if inferred[i].Cond != zns.CondReadOnly || (z.Cond != zns.CondFull && w < z.WP) {
			t.Errorf("zone %d: inferred write pointer %d (%s), the real one is %d (%s)", i, w-z.Start, inferred[i].Cond, z.WP-z.Start, z.Cond)
		}
	}

	rep, sink := h44hSalvageLost(t, devName, path)
	for _, f := range rep.Files {
		if len(f.Holes) > 0 || f.Err != nil {
			t.Errorf("%s: not recovered whole: %+v", f.Name, f)
		}
	}
	checkCopies(t, sink, want)
}

// A zone whose data is gone too (zeros written over it, or punched out):
// the file that had data there gets holes there, reported, and its other
// bytes; every other file is copied whole.
func TestSalvageLostZoneTableZoneGoneIsNotRecovered(t *testing.T) {
	for _, how := range []string{"zeros", "punched"} {
		t.Run(how, func(t *testing.T) {
			devName := emuDevice(t, 16, "1M", "")
			e := formatOpen(t, devName, smallConfig())
			emu := emuOf(t, e)
			path := emu.Path()
			keep := bytes.Repeat([]byte("keep...."), 5<<10)
			createSynced(t, e, "keep", keep).Close()
			gone := make([]byte, 3<<20)
			rand.New(rand.NewSource(7)).Read(gone)
			createSynced(t, e, "gone", gone).Close()
			after := bytes.Repeat([]byte("after..."), 3<<10)
			createSynced(t, e, "after", after).Close()
			if err := e.checkpoint(); err != nil {
				t.Fatal(err)
			}
			// A zone only gone maps data in.
			owner := map[*zone]map[string]bool{}
			for name, f := range e.byName {
				f.ext.each(func(x extent) bool {
					z := e.zoneAt(x.dev)
					if owner[z] == nil {
						owner[z] = map[string]bool{}
					}
					owner[z][name] = true
					return true
				})
			}
			var lost *zone
			for z, names := range owner {
				if len(names) == 1 && names["gone"] && (lost == nil || z.idx < lost.idx) {
					lost = z
				}
			}
			if lost == nil {
				t.Fatalf("set-up: no zone holds only gone's data (%v)", owner)
			}
			var lostOff, lostLen int64 // gone's bytes in it
			e.byName["gone"].ext.each(func(x extent) bool {
				if e.zoneAt(x.dev) == lost {
					if lostLen == 0 {
						lostOff = x.off
					}
					lostLen = x.off + x.len - lostOff
				}
				return true
			})
			at, n := emu.FileOffset(lost.start), e.geo.ZoneSize
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			h44hZeroTable(t, path)
			if how == "zeros" {
				h44hZeroRange(t, path, at, n)
			} else {
				h44hPunch(t, path, at, n)
			}

			rep, sink := h44hSalvageLost(t, devName, path)
			for name, b := range map[string][]byte{"keep": keep, "after": after} {
				if c := sink[name]; c == nil || !bytes.Equal(c.b, b) || len(salvageFile(t, rep, name).Holes) > 0 {
					t.Errorf("%s not copied whole: %+v", name, salvageFile(t, rep, name))
				}
			}
			c := sink["gone"]
			if c == nil || len(c.b) != len(gone) {
				t.Fatalf("gone not copied at its size: %+v", salvageFile(t, rep, "gone"))
			}
			holes := salvageFile(t, rep, "gone").Holes
			inHole := func(off int64) bool {
				for _, h := range holes {
					if off >= h.Off && off < h.Off+h.Len {
						return true
					}
				}
				return false
			}
			for off := lostOff; off < lostOff+lostLen; off += BlockSize {
				if !inHole(off) {
					t.Fatalf("gone's bytes at %d, in the zone whose data is gone, not reported as a hole (holes %+v)", off, holes)
				}
			}
			for off, b := range c.b {
				switch {
				case inHole(int64(off)) && b != 0:
					t.Fatalf("gone's copy has %#x at %d, inside a reported hole", b, off)
				case !inHole(int64(off)) && b != gone[off]:
					t.Fatalf("gone's copy has %#x at %d, outside the holes, want %#x", b, off, gone[off])
				}
			}
		})
	}
}

// h44hPunch punches a hole of n bytes at off of the file at path.
func h44hPunch(t *testing.T, path string, off, n int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n); err != nil {
		t.Fatalf("punch: %v", err)
	}
}

// checkCopies checks that sink holds the files of want, byte for byte.
func checkCopies(t *testing.T, sink salvageSink, want map[string][]byte) {
	t.Helper()
	if len(sink) != len(want) {
		t.Errorf("salvage copied %d files, want %d", len(sink), len(want))
	}
	for name, b := range want {
		c := sink[name]
		if c == nil {
			t.Errorf("%s not copied", name)
			continue
		}
		if !bytes.Equal(c.b, b) {
			t.Errorf("%s: copy of %d bytes, want %d, first difference at %d", name, len(c.b), len(b), firstDiff(c.b, b))
		}
	}
}

// gcThenCheckpoint runs up to 4 urgent GC passes, while they move data,
// then a checkpoint if ckpt.
func gcThenCheckpoint(t *testing.T, e *Engine, ckpt bool) {
	t.Helper()
	for range 4 {
		if moved, err := e.gc.pass(gcUrgent); err != nil || !moved {
			break
		}
	}
	if ckpt {
		if err := e.checkpoint(); err != nil {
			t.Fatal(err)
		}
	}
}

// A crash (after a sync) with the metadata log part way into a zone of
// its half, which spans 3 zones of 64 KiB, and a file whose data ends
// in zeros written last: the salvage replays the whole log (the file
// under its last name), copies both files whole and reports nothing but
// the lost table. A write pointer inferred at a zone's capacity rather than where
// its data ends read the active metadata zone's zeros as a damaged log.
func TestSalvageLostZoneTableAfterACrashMidMetadataZone(t *testing.T) {
	// The emu file as the device left it; copied with every block
	// allocated (cp --sparse=never, dd: every zone with data reads as
	// written to its capacity); and with its zero blocks made holes (cp
	// --sparse=always, rsync -S, a file system storing zero blocks as
	// holes: zero-tail's record runs past where its zone's data ends,
	// which recovery and fsck took for a torn last write, and the file
	// was copied as 0 bytes, silently).
	for _, layout := range []string{"as-written", "no-holes", "zero-blocks-dug-as-holes"} {
		t.Run(layout, func(t *testing.T) { h44hSalvageAfterACrashMidMetadataZone(t, layout) })
	}
}

func h44hSalvageAfterACrashMidMetadataZone(t *testing.T, layout string) {
	devName := emuDevice(t, 64, "64K", "")
	e := formatOpen(t, devName, smallConfig())
	path := emuOf(t, e).Path()
	if e.sb.MetaGroup < 2 {
		t.Fatalf("set-up: metadata halves of %d zones", e.sb.MetaGroup)
	}
	name := func(i int) string { return fmt.Sprintf("some/longish/name/number/%04d", i) }
	data := []byte("renamed 450 times")
	createSynced(t, e, name(0), data).Close()
	for i := range 450 {
		if err := e.Rename(name(i), name(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	// Last, a file whose last 60 KiB are zeros: its record's blocks
	// end the zone's data as zeros, and a write pointer inferred where
	// the zone's non-zero bytes end would cut it short (torn: the file
	// lost, silently).
	tail := append(bytes.Repeat([]byte("z"), 4<<10), make([]byte, 60<<10)...)
	createSynced(t, e, "zero-tail", tail).Close()
	if err := e.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.crashForTest()
	emuOf(t, e).Close()
	partWay := false
	for _, z := range h44hReport(t, devName, zns.Options{})[:2*e.sb.MetaGroup] {
		partWay = partWay || (z.Cond.Active() && z.WP > z.Start)
	}
	if !partWay {
		t.Fatal("set-up: no metadata zone is written part way")
	}
	h44hZeroTable(t, path)
	switch layout {
	case "no-holes":
		h44jFillHoles(t, path)
	case "zero-blocks-dug-as-holes":
		h44jDigHoles(t, path)
	}
	rep, sink := h44hSalvageLost(t, devName, path)
	h44jAllWhole(t, rep)
	if len(rep.Fsck.Problems) != 1 {
		t.Errorf("problems beside the lost table: %q", rep.Fsck.Problems[1:])
	}
	checkCopies(t, sink, map[string][]byte{name(450): data, "zero-tail": tail})
}
