package engine

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/zonefold/zonefold/zns"
)

// failAppendOnBadMedia creates "a" with 64 KiB synced, then fails the
// next append (an append over bad media) and waits until the engine has
// retired (finished) a's zone. It returns a's content, the zone, and
// where in the device the failed append began: from there to the zone's
// capacity the device holds no record (on null_blk with bad blocks there,
// reads of it fail with EIO, which the caller arranges).
func failAppendOnBadMedia(t *testing.T, e *Engine, emu *zns.Emu) ([]byte, *zone, int64) {
	t.Helper()
	first := pattern(64<<10, 1)
	f := createSynced(t, e, "a", first)
	z := f.f.mru.Load()
	x := devOf(t, e, "a", 0)
	failedAt := x.hdr + BlockSize + int64(len(first))
	emu.FailWrite(1)
	if _, err := f.WriteAt(pattern(64<<10, 2), 64<<10); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err == nil || !errors.Is(err, syscall.EIO) {
		t.Fatalf("fsync over the failed append: %v, want EIO", err)
	}
	for deadline := time.Now().Add(10 * time.Second); z.state.Load() != zoneFull; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("zone %d not retired 10 s after its append failed", z.idx)
		}
	}
	return first, z, failedAt
}

// TestH39dGCReclaimsRetiredZoneWhoseFailedAppendReadsEIO: an append
// fails on bad media; the engine retires the zone (finishes it) and
// writes the data elsewhere. On a real device (null_blk zoned with bad
// blocks, in the VM) the range where the append failed then fails every
// read with EIO. GC must still reclaim the zone: its live records all
// read. Before, GC's header walk read on past the last record into the
// bad range and failed the victim on that EIO, every pass: the zone and
// the live data in it were never reclaimed, though the warning said GC
// collects it.
func TestH39dGCReclaimsRetiredZoneWhoseFailedAppendReadsEIO(t *testing.T) {
	cfg := smallConfig()
	cfg.GC.Disabled = true
	e, bz := openBadZonesN(t, cfg, 16)
	defer e.Close()
	first, victim, failedAt := failAppendOnBadMedia(t, e, bz.Device.(*zns.Emu))
	bz.mu.Lock()
	bz.ranges = append(bz.ranges, [2]int64{failedAt, victim.start + victim.cap})
	bz.mu.Unlock()
	f, err := e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync after the failed append: %v", err)
	}
	// Garbage in the victim: a's first half again, elsewhere.
	over := pattern(32<<10, 3)
	if _, err := f.WriteAt(over, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	want := append(append(append([]byte(nil), over...), first[32<<10:]...), pattern(64<<10, 2)...)
	for i := 0; i < 8 && victim.state.Load() != zoneFree; i++ {
		e.gc.reclaim(nil, minGCGain)
	}
	if victim.state.Load() != zoneFree {
		t.Fatalf("GC did not reclaim the retired zone %d (state %d; victims failed %d)", victim.idx, victim.state.Load(), e.Stats().GCVictimsFailed)
	}
	checkValidCounts(t, e)
	if got := readAll(t, e, "a"); !bytes.Equal(got, want) {
		t.Fatal("a differs after GC of the retired zone")
	}
}

// TestH39dRecoveryAfterFailedAppendOnBadMedia: as above, then the daemon
// is killed before a checkpoint records the retired zone. Recovery scans
// the zone to its write pointer (its capacity: finished), over the range
// where the append failed, whose reads fail with EIO. Open must succeed:
// that range holds no record (nothing follows it), as a torn record's
// tail holds none, and every acknowledged byte is before it. Before, Open
// failed on that read, and no file of the device was reachable.
func TestH39dRecoveryAfterFailedAppendOnBadMedia(t *testing.T) {
	devName := emuDevice(t, 16, "256K", "")
	cfg := smallConfig()
	cfg.GC.Disabled = true
	e := formatOpen(t, devName, cfg)
	emu := emuOf(t, e)
	b := pattern(64<<10, 9)
	createSynced(t, e, "b", b)
	first, z, failedAt := failAppendOnBadMedia(t, e, emu)
	// A real device's finish is durable at once; the emu's table is
	// durable with its next Flush.
	if err := emu.Flush(); err != nil {
		t.Fatal(err)
	}
	e.crashForTest()
	emu.Close()
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	bz := &badZones{Device: dev, bad: map[int]bool{}, ranges: [][2]int64{{failedAt, z.start + z.cap}}}
	e, err = OpenDevice(bz, cfg)
	if err != nil {
		dev.Close()
		t.Fatalf("open after a crash, the failed append's range failing reads: %v", err)
	}
	defer e.Close()
	if got := readAll(t, e, "a"); len(got) < len(first) || !bytes.Equal(got[:len(first)], first) {
		t.Fatal("a's acknowledged bytes differ")
	}
	if got := readAll(t, e, "b"); !bytes.Equal(got, b) {
		t.Fatal("b differs")
	}
}

// TestH39dRecoveryRefusesUnreadableHeaderWithRecordsAfterIt: a record
// header newer than the checkpoint fails to read (media damage), and
// records of the zone follow it. They may be acknowledged, and recovery
// cannot replay the damaged record (its header says what it wrote): Open
// refuses, naming the zone, rather than bring the files back without
// them.
func TestH39dRecoveryRefusesUnreadableHeaderWithRecordsAfterIt(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	cfg.GC.Disabled = true
	e := formatOpen(t, devName, cfg)
	f := createSynced(t, e, "a", pattern(64<<10, 1))
	if _, err := f.WriteAt(pattern(64<<10, 2), 64<<10); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	x, x2 := devOf(t, e, "a", 0), devOf(t, e, "a", 64<<10)
	if x2.hdr <= x.hdr || x2.hdr/e.geo.ZoneSize != x.hdr/e.geo.ZoneSize {
		t.Fatalf("set-up: a's records at %d and %d, want the second after the first in its zone", x.hdr, x2.hdr)
	}
	emu := emuOf(t, e)
	e.crashForTest()
	emu.Close()
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	bz := &badZones{Device: dev, bad: map[int]bool{}, ranges: [][2]int64{{x.hdr, x.hdr + BlockSize}}}
	e, err = OpenDevice(bz, cfg)
	if err == nil {
		e.Close()
		t.Fatal("open succeeded without a's records after the unreadable header")
	}
	dev.Close()
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("open: %v, want an error wrapping EIO", err)
	}
	t.Logf("open: %v", err)
}
