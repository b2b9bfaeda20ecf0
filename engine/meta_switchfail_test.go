package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"
	"testing"
	"time"
)

// metaFault is what the n-th metadata write (writeMeta: an operation's
// record or a checkpoint) after a test arms it does.
type metaFault int

const (
	metaWriteOK      metaFault = iota
	metaWriteFail              // fails with EIO, nothing written (a zone that refuses it)
	metaWriteLand              // written whole, then fails with EIO (the device lost the completion)
	metaWritePart              // all but its last block written, then fails with EIO (a partial write: the write pointer moved)
	metaWriteCut               // the power is cut before it: nothing of it, or after it, reaches the device
	metaWriteTear              // the power is cut during it: all but its last block reach the device
	metaWriteGarbage           // the write pointer moves over it, but what landed fails its checksum, then EIO (a media error)
)

// armMetaFaults makes the metadata writes from now on do what faults
// says, in order (later ones succeed). The hook is removed at cleanup.
func armMetaFaults(t *testing.T, faults ...metaFault) {
	t.Helper()
	n := 0
	testHookMetaWrite = func(e *Engine, h int, off int64, data []byte) error {
		if n >= len(faults) {
			return nil
		}
		f := faults[n]
		n++
		z, zoff := e.sb.metaAt(h, off)
		switch f {
		case metaWriteFail:
		case metaWriteLand, metaWritePart:
			keep := data
			if f == metaWritePart {
				// All but its last block: for a checkpoint of
				// more than one block after the superblock copy,
				// its header and the first of its payload.
				if len(data) <= 2*BlockSize {
					t.Errorf("a %d-byte metadata write leaves no torn record in part", len(data))
					return nil
				}
				keep = data[:len(data)-BlockSize]
			}
			if err := e.writeZone(z, zoff, keep, e.meta.w); err != nil {
				t.Errorf("the faulted write's bytes: %v", err)
			}
		case metaWriteGarbage:
			bad := make([]byte, len(data))
			for i := range bad {
				bad[i] = data[i] ^ 0x5a
			}
			writeRaw(t, e, z, zoff, bad)
		case metaWriteCut:
			if err := e.dev.(interface{ PowerCut() error }).PowerCut(); err != nil {
				t.Errorf("power cut: %v", err)
			}
		case metaWriteTear:
			// The half's reset made durable first (a concurrent
			// operation's flush could): the emulator tears only a
			// write past its zone's flushed write pointer.
			if err := e.dev.Flush(); err != nil {
				t.Errorf("flush: %v", err)
			}
			if err := e.writeZone(z, zoff, data, e.meta.w); err != nil {
				t.Errorf("the torn write: %v", err)
			}
			tear := e.dev.(interface{ TearLastWrite(int64) error })
			if err := tear.TearLastWrite(int64(len(data)) - BlockSize); err != nil {
				t.Errorf("tear: %v", err)
			}
		default:
			return nil
		}
		return fmt.Errorf("metadata write to zone %d at %d (test fault %d): %w", z, zoff, f, syscall.EIO)
	}
	t.Cleanup(func() { testHookMetaWrite = nil })
}

// openWithFileA formats a 16-zone emulated device, opens it and creates
// file a.
func openWithFileA(t *testing.T) (*Engine, string, Config) {
	t.Helper()
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	mustCreate(t, e, "a").Close()
	return e, devName, cfg
}

// exists reports whether name is in e's namespace.
func exists(t *testing.T, e *Engine, name string) bool {
	t.Helper()
	_, err := e.Stat(name)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stat %s: %v", name, err)
	}
	return err == nil
}

// TestMetaWriteFailureSwitchesHalvesAndSurvivesPowerCuts: a failed
// write of a namespace operation's record moves the log to the other
// metadata half with a checkpoint, and the operation is logged there
// under a number above the checkpoint's. Whatever the failed write left
// in the old half (nothing, the whole record, the first block of a
// checkpoint) and wherever the power is cut during the switch, recovery
// takes the operation at most once and in order: a rename is either
// undone or done, done if it returned nil, every file acknowledged before
// survives, and the file system goes on (new operations, another power
// cut, fsck clean).
//
// Failed before the fix: the first case's rename and every operation
// after it failed (writeOp wrote the same offset of the same half
// again); with nothing written, a later operation then succeeded there,
// but after a write that landed or moved the write pointer none ever did.
func TestMetaWriteFailureSwitchesHalvesAndSurvivesPowerCuts(t *testing.T) {
	cases := []struct {
		name   string
		faults []metaFault // from the rename's record on
		// renameOK: the rename must succeed (its retry in the other
		// half did); else it may fail, and a create after it must
		// succeed (the next switch did).
		renameOK bool
	}{
		{"record fails", []metaFault{metaWriteFail}, true},
		{"record lands but fails", []metaFault{metaWriteLand}, true},
		{"record fails, cut at the checkpoint", []metaFault{metaWriteFail, metaWriteCut}, false},
		{"record lands, cut at the checkpoint", []metaFault{metaWriteLand, metaWriteCut}, false},
		{"record fails, cut at its retry", []metaFault{metaWriteFail, metaWriteOK, metaWriteCut}, false},
		{"record lands, cut at its retry", []metaFault{metaWriteLand, metaWriteOK, metaWriteCut}, false},
		{"record lands, retry fails too", []metaFault{metaWriteLand, metaWriteOK, metaWriteFail}, false},
		{"record fails, checkpoint written in part", []metaFault{metaWriteFail, metaWritePart}, false},
		{"record fails, checkpoint in part, cut at the next switch", []metaFault{metaWriteFail, metaWritePart, metaWriteCut}, false},
		{"record fails, checkpoint torn by a power cut", []metaFault{metaWriteFail, metaWriteTear}, false},
		{"record lands, checkpoint torn by a power cut", []metaFault{metaWriteLand, metaWriteTear}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			devName := emuDevice(t, 16, "1M", "")
			cfg := smallConfig()
			e := formatOpen(t, devName, cfg)
			// Enough files that a checkpoint spans several blocks (a
			// partial write of one is possible).
			var fillers []string
			for i := range 24 {
				name := fmt.Sprintf("filler-%02d-%s", i, strings.Repeat("n", 200))
				mustCreate(t, e, name).Close()
				fillers = append(fillers, name)
			}
			mustCreate(t, e, "a").Close()
			half := e.meta.active
			armMetaFaults(t, tc.faults...)
			renameErr := e.Rename("a", "b")
			if tc.renameOK {
				if renameErr != nil {
					t.Fatalf("rename with its record's write failing once: %v", renameErr)
				}
				if e.meta.active == half {
					t.Fatalf("the log stayed in metadata half %d after a failed write", half)
				}
			}
			cut := false
			for _, f := range tc.faults {
				cut = cut || f == metaWriteCut || f == metaWriteTear
			}
			cf, createErr := e.Create("c")
			if createErr == nil {
				cf.Close()
			}
			if !cut && renameErr != nil && createErr != nil {
				t.Fatalf("a create after the failed rename (%v) failed too: %v", renameErr, createErr)
			}
			testHookMetaWrite = nil // faults past the two operations are not this case's
			e = powerCutReopen(t, e, devName, cfg)
			a, b := exists(t, e, "a"), exists(t, e, "b")
			if a == b {
				t.Fatalf("after the power cut a exists %v, b exists %v: the rename is half done or done twice", a, b)
			}
			if renameErr == nil && !b {
				t.Fatal("the acknowledged rename was lost to the power cut")
			}
			if createErr == nil && !cut && !exists(t, e, "c") {
				t.Fatal("the acknowledged create of c was lost to the power cut")
			}
			for _, name := range fillers {
				if !exists(t, e, name) {
					t.Fatalf("%s, created before the fault, lost", name[:10])
				}
			}
			// The numbers go on above everything recovered: new
			// operations survive the next power cut.
			from := "a"
			if b {
				from = "b"
			}
			if err := e.Rename(from, "e"); err != nil {
				t.Fatal(err)
			}
			mustCreate(t, e, "d").Close()
			e = powerCutReopen(t, e, devName, cfg)
			if !exists(t, e, "e") || !exists(t, e, "d") || exists(t, e, from) {
				t.Fatalf("after a second power cut: e %v, d %v, %s %v; want true, true, false",
					exists(t, e, "e"), exists(t, e, "d"), from, exists(t, e, from))
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			checkFsck(t, devName)
		})
	}
}

// TestMetaLogFailsWithEIOWhileNeitherHalfTakesWrites: a device that takes
// no write at all fails namespace operations with ErrMetaLog (EIO), at
// once and without changing the namespace; once it takes writes again
// the next operation switches halves and succeeds, and a power cut keeps
// exactly what was acknowledged.
//
// Failed before the fix: the error was the device's own (no ErrMetaLog),
// and after the device recovered the log stayed where the failed writes
// left it (it happened to work on the emulator, which writes nothing on a
// failed write).
func TestMetaLogFailsWithEIOWhileNeitherHalfTakesWrites(t *testing.T) {
	e, devName, cfg := openWithFileA(t)
	emu := emuOf(t, e)
	emu.FailWrites(true)
	for _, op := range []struct {
		name string
		do   func() error
	}{
		{"create", func() error { _, err := e.Create("b"); return err }},
		{"remove", func() error { return e.Remove("a") }},
		{"rename", func() error { return e.Rename("a", "b") }},
		{"create again", func() error { _, err := e.Create("b"); return err }},
	} {
		err := op.do()
		if !errors.Is(err, ErrMetaLog) || !errors.Is(err, syscall.EIO) {
			t.Fatalf("%s with no metadata half taking writes: %v; want ErrMetaLog (EIO)", op.name, err)
		}
	}
	if !exists(t, e, "a") || exists(t, e, "b") {
		t.Fatal("failed operations changed the namespace")
	}
	emu.FailWrites(false)
	e.meta.backoffOver() // the switches failed: the next waits
	mustCreate(t, e, "c").Close()
	e = powerCutReopen(t, e, devName, cfg)
	if !exists(t, e, "a") || exists(t, e, "b") || !exists(t, e, "c") {
		t.Fatalf("after a power cut: a %v, b %v, c %v; want true, false, true", exists(t, e, "a"), exists(t, e, "b"), exists(t, e, "c"))
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	checkFsck(t, devName)
}

// TestDeadMetaLogFailsFastWithoutACheckpointPerOp: while the device
// takes no write, namespace operations fail with ErrMetaLog (EIO), and
// after the first failed switch the next ones fail at once, within the
// switch's backoff, instead of each trying a whole checkpoint again (a
// quiesce of every append and a device flush per operation). Once the
// backoff has passed and the device takes writes, an operation switches
// halves and succeeds.
//
// Failed before the fix: every one of the 20 operations tried a
// checkpoint (20 or more device flushes).
func TestDeadMetaLogFailsFastWithoutACheckpointPerOp(t *testing.T) {
	longSwitchBackoff(t)
	e, _, _ := openWithFileA(t)
	defer e.Close()
	emu := emuOf(t, e)
	emu.FailWrites(true)
	before := e.Stats()
	const ops = 20
	for i := range ops {
		_, err := e.Create(fmt.Sprintf("b%d", i))
		if !errors.Is(err, ErrMetaLog) || !errors.Is(err, syscall.EIO) {
			t.Fatalf("create %d with no metadata half taking writes: %v; want ErrMetaLog (EIO)", i, err)
		}
	}
	d := e.Stats().Sub(before)
	if d.Flushes > 2 {
		t.Fatalf("%d failing namespace operations cost %d device flushes (a checkpoint each); want at most 2 (one switch tried, then the backoff)", ops, d.Flushes)
	}
	emu.FailWrites(false)
	e.meta.backoffOver()
	mustCreate(t, e, "c").Close()
	if !exists(t, e, "c") || exists(t, e, "b0") {
		t.Fatalf("after the device recovered: c %v, b0 %v; want true, false", exists(t, e, "c"), exists(t, e, "b0"))
	}
}

// TestMetaRecordsFailingFailFastThoughCheckpointsLand: the metadata
// half's checkpoints land but every operation record fails (off 0 of a
// half is a checkpoint, any other offset a record). Each operation
// switched halves with a checkpoint that worked, then failed its record
// there: a checkpoint per operation, as with a dead log. The switch
// backs off from the second such failure in a row as well.
//
// Failed before the fix: 20 failing creates wrote 39 checkpoints (3 now).
func TestMetaRecordsFailingFailFastThoughCheckpointsLand(t *testing.T) {
	longSwitchBackoff(t)
	e, _, _ := openWithFileA(t)
	defer e.Close()
	testHookMetaWrite = func(e *Engine, h int, off int64, data []byte) error {
		if off == 0 {
			return nil
		}
		return fmt.Errorf("test: metadata record at %d of half %d: %w", off, h, syscall.EIO)
	}
	defer func() { testHookMetaWrite = nil }()
	before := e.Stats()
	const ops = 20
	for i := range ops {
		_, err := e.Create(fmt.Sprintf("b%d", i))
		if !errors.Is(err, ErrMetaLog) || !errors.Is(err, syscall.EIO) {
			t.Fatalf("create %d with every metadata record failing: %v; want ErrMetaLog (EIO)", i, err)
		}
	}
	if d := e.Stats().Sub(before); d.Checkpoints > 4 {
		t.Fatalf("%d failing namespace operations wrote %d checkpoints; want at most 4 (the first two operations' switches, two each at most; then the backoff)", ops, d.Checkpoints)
	}
	testHookMetaWrite = nil
	e.meta.backoffOver()
	mustCreate(t, e, "c").Close()
	if !exists(t, e, "c") || exists(t, e, "b0") {
		t.Fatalf("after the records land again: c %v, b0 %v; want true, false", exists(t, e, "c"), exists(t, e, "b0"))
	}
}

// longSwitchBackoff makes the metadata half switch's backoff an hour
// until the test ends: within a test it never passes by itself.
func longSwitchBackoff(t *testing.T) {
	oldMin, oldMax := switchBackoffMin, switchBackoffMax
	switchBackoffMin, switchBackoffMax = time.Hour, time.Hour
	t.Cleanup(func() { switchBackoffMin, switchBackoffMax = oldMin, oldMax })
}

// backoffOver ends the wait before the next metadata half switch (as
// if switchBackoff had passed).
func (m *metaLog) backoffOver() {
	m.mu.Lock()
	m.switchRetryAt = time.Time{}
	m.mu.Unlock()
}

// TestMetaHalfGoneReadOnlyOpensAndFillsWithEIO: with a zone of one
// metadata half read-only for good, the file system opens on the other
// half (its closing checkpoint has nowhere to go), takes operations until
// that half fills, then fails creates with ErrMetaLog (EIO) at once, not
// a hang, while the room kept for shrinking operations still takes a
// remove; a power cut keeps every acknowledged operation.
//
// Failed before the fix: the create that met the read-only zone failed,
// and so did every one after it; with the switch alone, Open then failed
// (recovery's checkpoint could not reset the read-only half).
func TestMetaHalfGoneReadOnlyOpensAndFillsWithEIO(t *testing.T) {
	for _, active := range []bool{true, false} {
		t.Run(fmt.Sprintf("active zone %v", active), func(t *testing.T) { metaHalfGoneReadOnly(t, active) })
	}
}

// metaHalfGoneReadOnly makes the active metadata zone read-only (if
// active; else the other half's, finished, zone) and checks what
// TestMetaHalfGoneReadOnlyOpensAndFillsWithEIO says.
func metaHalfGoneReadOnly(t *testing.T, active bool) {
	e, devName, cfg := openWithFileA(t)
	ro := e.meta.active
	z, _ := e.sb.metaAt(ro, e.meta.wp)
	if !active {
		ro = 1 - ro
		z = e.sb.MetaZones[ro]
	}
	if err := emuOf(t, e).ZoneReadOnly(z); err != nil {
		t.Fatal(err)
	}
	// Its flush makes the read-only zone durable (and it switches
	// halves, if the log's zone went read-only).
	mustCreate(t, e, "b").Close()
	e = powerCutReopen(t, e, devName, cfg)
	if e.meta.active == ro {
		t.Fatal("the log went to the read-only half")
	}
	var made []string
	var err error
	for i := range 2000 {
		name := fmt.Sprintf("f%04d", i)
		var f *File
		if f, err = e.Create(name); err != nil {
			break
		}
		f.Close()
		made = append(made, name)
	}
	if !errors.Is(err, ErrMetaLog) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("create %d with the log's half full and the other read-only: %v; want ErrMetaLog (EIO)", len(made), err)
	}
	t.Logf("%d creates before the half filled: %v", len(made), err)
	if len(made) < 10 {
		t.Fatalf("only %d creates before the half filled", len(made))
	}
	if err := e.Remove(made[0]); err != nil {
		t.Fatalf("remove with only the shrink room left: %v", err)
	}
	e = powerCutReopen(t, e, devName, cfg)
	defer e.Close()
	if exists(t, e, made[0]) {
		t.Fatal("the acknowledged remove was lost to the power cut")
	}
	for _, name := range append(made[1:], "a", "b") {
		if !exists(t, e, name) {
			t.Fatalf("%s, created and acknowledged, lost to the power cut", name)
		}
	}
}
