package engine

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zonefold/zonefold/zns"
)

// reportCounting is badZones that counts the device's zone reports.
type reportCounting struct {
	*badZones
	reports atomic.Int64
}

func (d *reportCounting) Report(first int, zones []zns.Zone) (int, error) {
	d.reports.Add(1)
	return d.badZones.Report(first, zones)
}

// h34cReopenCounting writes file "a" (data) and "b" (other, in another
// zone), closes the engine and opens it again through reportCounting:
// nothing is cached, so reads go to the device.
func h34cReopenCounting(t *testing.T) (e *Engine, dev *reportCounting, devName string, data, other []byte) {
	t.Helper()
	devName = emuDevice(t, 16, "1M", "&max_open=4&max_active=4")
	cfg := smallConfig()
	e = formatOpen(t, devName, cfg)
	data = bytes.Repeat([]byte("bad block "), 20000)
	createSynced(t, e, "a", data).Close()
	other = bytes.Repeat([]byte("other file "), 30000)
	createSynced(t, e, "b", other).Close()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dev = &reportCounting{badZones: &badZones{Device: raw, bad: map[int]bool{}}}
	e, err = OpenDevice(dev, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e, dev, devName, data, other
}

// h34cBadFirstBlock makes the device fail (EIO) every read of a's first
// block and opens a: it returns the handle and the block's zone.
func h34cBadFirstBlock(t *testing.T, e *Engine, dev *reportCounting) (*File, *zone) {
	t.Helper()
	x := devOf(t, e, "a", 0)
	dev.mu.Lock()
	dev.ranges = append(dev.ranges, [2]int64{x.dev, x.dev + BlockSize})
	dev.mu.Unlock()
	h, err := e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	return h, e.zoneAt(x.dev)
}

// TestFailedReadsInALoopDoNotReportZonesEach: a client reads a bad
// block (EIO) in a loop. Every failed device read kicks the offline
// watcher, which asks the device for a report of all its zones; a burst
// of failed reads must not cost a report each: at most one per
// offlineReportEvery, and one owed.
func TestFailedReadsInALoopDoNotReportZonesEach(t *testing.T) {
	e, dev, _, _, other := h34cReopenCounting(t)
	defer e.Close()
	h, _ := h34cBadFirstBlock(t, e, dev)
	defer h.Close()
	buf := make([]byte, BlockSize)
	// The reads are a millisecond apart, so that the watcher has its
	// turn between them (bunched up, their kicks coalesce in the
	// watcher's channel whatever it does): the bound below holds at any
	// pace; the pause only keeps a watcher that reports for every kick
	// from passing by luck.
	const reads = 200
	before := dev.reports.Load()
	start := time.Now()
	for i := range reads {
		if n, err := h.ReadAt(buf, 0); err == nil {
			t.Fatalf("read %d of the bad block: %d bytes, no error", i, n)
		}
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	got := dev.reports.Load() - before
	// One at once, one per interval since, and one in flight or owed.
	bound := 2 + int64(elapsed/offlineReportEvery)
	t.Logf("%d failed reads in %v: %d zone reports (bound %d)", reads, elapsed, got, bound)
	if got > bound {
		t.Fatalf("%d failed reads of one bad block in %v cost %d zone reports, want at most %d", reads, elapsed, got, bound)
	}
	if got := readAll(t, e, "b"); !bytes.Equal(got, other) {
		t.Fatal("b differs")
	}
}

// TestOfflineFoundAfterABurstOfFailedReads: the report a kick owes is
// not dropped by the bound on reports: a zone that goes offline while
// the watcher waits out its interval after a burst of failed reads is
// found (the checkpoint it owes is taken), and a crash then does not
// refuse the next Open.
func TestOfflineFoundAfterABurstOfFailedReads(t *testing.T) {
	e, dev, devName, _, other := h34cReopenCounting(t)
	h, z := h34cBadFirstBlock(t, e, dev)
	if z == e.zoneAt(devOf(t, e, "b", 0).dev) {
		t.Fatalf("set-up: a and b share zone %d", z.idx)
	}
	buf := make([]byte, BlockSize)
	for range 50 {
		h.ReadAt(buf, 0)
	}
	emu := dev.Device.(*zns.Emu)
	if err := emu.ZoneOffline(z.idx); err != nil {
		t.Fatal(err)
	}
	if err := emu.Flush(); err != nil {
		t.Fatal(err)
	}
	before := e.Stats().Checkpoints
	h.ReadAt(buf, 0) // within the interval of the burst's last report
	h.Close()
	h33cWaitCheckpoint(t, e, before)
	if !z.offline.Load() {
		t.Fatalf("zone %d went offline after a burst of failed reads, and the watcher never found it", z.idx)
	}
	e.crashForTest()
	emu.Close()
	e = reopen(t, devName, smallConfig())
	defer e.Close()
	if got := readAll(t, e, "b"); !bytes.Equal(got, other) {
		t.Fatal("b after the crash differs")
	}
}

// h34cWaitOffline kicks the offline watcher and waits until it has found
// zone z offline and taken the checkpoint that owes.
func h34cWaitOffline(t *testing.T, e *Engine, z *zone) {
	t.Helper()
	before := e.Stats().Checkpoints
	e.kickOffline()
	for deadline := time.Now().Add(20 * time.Second); !z.offline.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the offline watcher did not find zone %d offline", z.idx)
		}
	}
	h33cWaitCheckpoint(t, e, before)
}

// TestGCLeavesAnOfflineZone: a full zone with garbage and live data goes
// offline, and the engine knows it. GC must neither take it as a victim
// (its data does not read: each try fails and is logged) nor, once
// nothing maps there, log its reset and try it (the device refuses it
// every time): an offline zone holds nothing GC can gain. What files
// mapped there is counted lost (Stats.LostBytes), not as space GC owes,
// and the zone's room is not counted available.
func TestGCLeavesAnOfflineZone(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	cfg.GC.Disabled = true
	e := formatOpen(t, devName, cfg)
	data := pattern(3<<19, 7) // 1.5 MiB: fills its first zone
	f := createSynced(t, e, "a", data)
	if _, err := f.WriteAt(pattern(256<<10, 8), 0); err != nil { // garbage in it
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	createSynced(t, e, "b", pattern(64<<10, 9)).Close()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = reopen(t, devName, cfg) // nothing cached: the zone keeps its live data
	z := e.zoneAt(devOf(t, e, "a", 512<<10).dev)
	if z.state.Load() != zoneFull || z.valid.Load() == 0 || z.valid.Load() >= z.cap {
		t.Fatalf("set-up: zone %d is in state %d with %d of %d bytes valid", z.idx, z.state.Load(), z.valid.Load(), z.cap)
	}
	avail := e.Available()
	if err := emuOf(t, e).ZoneOffline(z.idx); err != nil {
		t.Fatal(err)
	}
	h34cWaitOffline(t, e, z)
	st := e.Stats()
	if st.OfflineZones != 1 || st.LostBytes != z.valid.Load() {
		t.Fatalf("stats with zone %d offline (%d bytes mapped there): offline_zones %d, lost_bytes %d", z.idx, z.valid.Load(), st.OfflineZones, st.LostBytes)
	}
	// Its garbage is no room GC can make, nor its live data room taken.
	if got, want := e.Available(), avail-(z.cap-z.valid.Load()); got != want {
		t.Fatalf("available with zone %d offline: %d, want %d (%d before, less its %d bytes of garbage)", z.idx, got, want, avail, z.cap-z.valid.Load())
	}
	e.gc.reclaim(nil, 0)
	if st := e.Stats(); st.GCVictimsFailed != 0 {
		t.Fatalf("a GC pass with zone %d offline: %d victims failed", z.idx, st.GCVictimsFailed)
	}
	if err := e.Remove("a"); err != nil { // nothing maps there now
		t.Fatal(err)
	}
	e.gc.reclaim(nil, 0)
	// A failed reset counts as a failed victim.
	if st := e.Stats(); st.GCVictimsFailed != 0 || st.LostBytes != 0 || z.resetPending.Load() {
		t.Fatalf("a GC pass with zone %d offline and empty: %d victims failed, %d bytes lost, its reset pending: %v", z.idx, st.GCVictimsFailed, st.LostBytes, z.resetPending.Load())
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	// Recovery finds it holding nothing: no reset of it either.
	e = reopen(t, devName, cfg)
	defer e.Close()
	if st := e.Stats(); st.GCVictimsFailed != 0 || st.OfflineZones != 1 {
		t.Fatalf("open with empty zone %d offline: %d victims failed (its reset tried), %d zones offline", z.idx, st.GCVictimsFailed, st.OfflineZones)
	}
}

// TestAcceptOfflineZonesOpensAnyway: a zone holding a file's fsynced
// data, with room for more (so recovery cannot rule out records newer
// than its checkpoint there), goes offline while the engine never
// touches it, and the daemon is killed. Open refuses the whole file
// system (ErrZoneOffline), and its error names the way out: with
// AcceptOfflineZones (--accept-offline-zones) it opens, what the zone
// held is lost (reads of a's data there fail), every other file reads
// whole, fsck with the option names a, and the next Open needs no
// option: recovery's checkpoint recorded the zone offline.
func TestAcceptOfflineZonesOpensAnyway(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "&max_open=4&max_active=4")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	first := bytes.Repeat([]byte("lost bytes "), 20000)
	createSynced(t, e, "a", first).Close()
	other := bytes.Repeat([]byte("other file "), 30000)
	createSynced(t, e, "b", other).Close()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = reopen(t, devName, cfg)
	z := e.zoneAt(devOf(t, e, "a", 0).dev)
	if z == e.zoneAt(devOf(t, e, "b", 0).dev) || z.alloc.Load() >= z.cap {
		t.Fatalf("set-up: a's zone %d shares with b, or is allocated to its capacity", z.idx)
	}
	emu := emuOf(t, e)
	if err := emu.ZoneOffline(z.idx); err != nil {
		t.Fatal(err)
	}
	if err := emu.Flush(); err != nil {
		t.Fatal(err)
	}
	e.crashForTest()
	emu.Close()

	_, err := Open(devName, cfg)
	if !errors.Is(err, ErrZoneOffline) || !strings.Contains(err.Error(), "--accept-offline-zones") {
		t.Fatalf("open with zone %d offline and maybe holding newer records: %v, want ErrZoneOffline naming --accept-offline-zones", z.idx, err)
	}
	t.Logf("open: %v", err)

	rep := fsckOfWith(t, devName, FsckOptions{AcceptOfflineZones: true})
	if len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], fmt.Sprintf("zone %d is offline", z.idx)) || !strings.Contains(rep.Problems[0], `"a"`) {
		t.Fatalf("fsck accepting offline zones: problems %q, want one naming zone %d and file a", rep.Problems, z.idx)
	}

	acc := cfg
	acc.AcceptOfflineZones = true
	e, err = Open(devName, acc)
	if err != nil {
		t.Fatalf("open accepting offline zones: %v", err)
	}
	if got := readAll(t, e, "b"); !bytes.Equal(got, other) {
		t.Fatal("b differs")
	}
	h, err := e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	if h.Size() != int64(len(first)) {
		t.Fatalf("a's size %d, want the %d its checkpoint carries", h.Size(), len(first))
	}
	if n, err := h.ReadAt(make([]byte, 8192), 0); err == nil {
		t.Fatalf("read of a's data in offline zone %d: %d bytes, no error", z.idx, n)
	}
	h.Close()
	if st := e.Stats(); st.OfflineZones != 1 || st.LostBytes == 0 {
		t.Fatalf("stats: %d offline zones, %d bytes lost", st.OfflineZones, st.LostBytes)
	}
	createSynced(t, e, "c", other).Close() // it takes writes
	emu = emuOf(t, e)
	e.crashForTest() // recovery's checkpoint is durable: no Close needed
	emu.Close()

	e = reopen(t, devName, cfg) // no option now
	defer e.Close()
	for _, name := range []string{"b", "c"} {
		if got := readAll(t, e, name); !bytes.Equal(got, other) {
			t.Fatalf("%s differs", name)
		}
	}
	h, err = e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if n, err := h.ReadAt(make([]byte, 8192), 0); err == nil {
		t.Fatalf("read of a's data in offline zone %d after reopening: %d bytes, no error", z.idx, n)
	}
}

// TestAZoneFoundOfflineLeavesPlacement: the offline watcher finds a
// zone offline (a read kicked it) while it is open for a's appends and
// idle, and another while it is free. Placement must not append to
// either again: a's next write and fsync succeed at the first try
// (before, the append went to the offline zone, failed, and the fsync
// with it), and the free zone leaves the free count.
func TestAZoneFoundOfflineLeavesPlacement(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "&max_open=4&max_active=4")
	cfg := smallConfig()
	e, first, other, idx := h32cOfflineSetup(t, devName, cfg)
	defer e.Close()
	z := e.zones[idx]
	var free *zone
	e.placer.mu.Lock()
	if n := len(e.placer.free); n > 0 {
		free = e.placer.free[n-1]
	}
	e.placer.mu.Unlock()
	if free == nil {
		t.Fatal("set-up: no free zone")
	}
	if err := emuOf(t, e).ZoneOffline(free.idx); err != nil {
		t.Fatal(err)
	}
	freeBefore := e.Stats().FreeZones
	h34cWaitOffline(t, e, z)
	if !free.offline.Load() {
		t.Fatalf("free zone %d offline was not found with zone %d", free.idx, z.idx)
	}
	if got := e.Stats().FreeZones; got != freeBefore-1 {
		t.Fatalf("free zones after free zone %d went offline: %d, want %d", free.idx, got, freeBefore-1)
	}
	f, second := h32cWriteAfter(t, e, first)
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync of a after its zone %d was found offline: %v", idx, err)
	}
	got := make([]byte, len(second))
	if n, err := f.ReadAt(got, int64(len(first))); n != len(got) || !bytes.Equal(got, second) {
		t.Fatalf("read of the data written after: %d bytes, %v", n, err)
	}
	if got := readAll(t, e, "b"); !bytes.Equal(got, other) {
		t.Fatal("b differs")
	}
}
