package engine

import (
	"bytes"
	"fmt"
	"sync"
	"syscall"
	"testing"

	"github.com/zonefold/zonefold/uring"
	"github.com/zonefold/zonefold/zns"
)

// badZones is a device whose reads of some zones, or of some ranges of
// device offsets, fail (media damage that stays).
type badZones struct {
	zns.Device
	mu     sync.Mutex
	bad    map[int]bool
	ranges [][2]int64 // [from, to) device offsets
}

func (d *badZones) Read(off int64, buf []byte, c uring.Completion) error {
	z := int(off / d.Geometry().ZoneSize)
	d.mu.Lock()
	b := d.bad[z]
	for _, r := range d.ranges {
		b = b || off < r[1] && r[0] < off+int64(len(buf))
	}
	d.mu.Unlock()
	if b {
		return fmt.Errorf("badZones: read zone %d at %d: %w", z, off, syscall.EIO)
	}
	return d.Device.Read(off, buf, c)
}

// openBadZones formats a 24 x 256 KiB emulated device and opens an engine
// on it through badZones, no zone failing yet.
func openBadZones(t *testing.T, cfg Config) (*Engine, *badZones) {
	t.Helper()
	return openBadZonesN(t, cfg, 24)
}

// openBadZonesN is openBadZones on a device of zones zones.
func openBadZonesN(t *testing.T, cfg Config, zones int) (*Engine, *badZones) {
	t.Helper()
	bz := &badZones{bad: map[int]bool{}}
	e := formatOpenThrough(t, emuDevice(t, zones, "256K", ""), cfg, func(emu *zns.Emu) zns.Device {
		bz.Device = emu
		return bz
	})
	return e, bz
}

// TestGCVictimsThatFailReadsDoNotHideOthers: a full device; garbage in
// five zones that keep live data. The four the policy ranks first fail
// every read (media damage); the fifth is fine and freeing it makes room.
// A writer's pass picks only passCandidates (4) victims, all the failing
// ones, and before the fix nothing remembered that they failed (only a
// failed reset was): every pass, forever, tried the same four and the
// write failed with EIO although a zone could be reclaimed. Each failed
// victim is counted (GCVictimsFailed) though the write succeeds.
func TestGCVictimsThatFailReadsDoNotHideOthers(t *testing.T) {
	cfg := Config{CacheBytes: 2 << 20, DirtyLimit: 1 << 20}
	cfg.GC.Disabled = true
	e, bz := openBadZones(t, cfg)
	defer e.Close()
	const size = 100000
	names := fillWithFiles(t, e, size)
	removed := removeOneFromZones(t, e, names, 8)
	charge := writeCharge(0, size)
	cands := e.gc.pick(gcUrgent, e.admitGain())
	if removed < 6 || len(cands) < passCandidates || e.roomFor(charge) {
		t.Fatalf("set-up: %d removed, %d candidates, room %v", removed, len(cands), e.roomFor(charge))
	}
	// Count full zones with garbage: must be more than passCandidates.
	worth := 0
	for _, z := range e.placer.zones {
		if z.state.Load() == zoneFull && z.cap-z.valid.Load() >= e.admitGain() {
			worth++
		}
	}
	if worth <= passCandidates {
		t.Fatalf("set-up: %d zones worth collecting, want > %d", worth, passCandidates)
	}
	bz.mu.Lock()
	for _, z := range cands {
		bz.bad[z.idx] = true
	}
	bz.mu.Unlock()
	t.Logf("%d zones worth collecting; the %d picked first fail every read", worth, len(cands))
	f := mustCreate(t, e, "late")
	want := bytes.Repeat([]byte{0xa5}, size)
	_, err := f.WriteAt(want, 0)
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		if got := readAll(t, e, "late"); !bytes.Equal(got, want) {
			t.Fatalf("late: %d bytes read back, want the %d written", len(got), len(want))
		}
		if n := e.Stats().GCVictimsFailed; n < int64(len(cands)) {
			t.Fatalf("GCVictimsFailed %d, want >= %d (each failing victim counted)", n, len(cands))
		}
		return
	}
	// Control: with the four failing zones out of pick's way, the same
	// write finds room (the fifth and later candidates free it).
	for _, z := range cands {
		z.state.Store(zoneGC)
	}
	_, cerr := f.WriteAt(want, 0)
	if cerr == nil {
		cerr = f.Sync()
	}
	for _, z := range cands {
		z.state.Store(zoneFull)
	}
	t.Fatalf("write on a full device with %d reclaimable zones, %d of them failing reads: %v (control, the failing ones hidden from pick: %v)", worth, len(cands), err, cerr)
}

// TestGCPassTriesEveryCandidateBeforeEIO: a full device whose zones with
// garbage all fail every read but one, the one a pass ranks last (or
// anywhere: every other zone worth collecting fails first). A writer's
// pass must go on past as many failing victims as there are, each
// considered once: before the fix a pass re-picked at most victimRounds
// (4) times, 16 failing victims, and the write failed with EIO although
// the good zone could be reclaimed.
func TestGCPassTriesEveryCandidateBeforeEIO(t *testing.T) {
	cfg := Config{CacheBytes: 2 << 20, DirtyLimit: 1 << 20}
	cfg.GC.Disabled = true
	e, bz := openBadZonesN(t, cfg, 48)
	defer e.Close()
	const size = 100000
	names := fillWithFiles(t, e, size)
	removeOneFromZones(t, e, names, len(names))
	var worth []*zone
	for _, z := range e.placer.zones {
		if z.alloc.Load()-z.valid.Load() > 0 {
			worth = append(worth, z)
		}
	}
	// good: a full zone whose reclaim makes the write's room.
	var good *zone
	for _, z := range worth {
		if z.state.Load() == zoneFull && z.cap-z.valid.Load() >= e.admitGain() {
			good = z
		}
	}
	if good == nil || len(worth) < 20 || e.roomFor(writeCharge(0, size)) {
		t.Fatalf("set-up: %d zones with garbage (want >= 20, one full and worth collecting), room %v", len(worth), e.roomFor(writeCharge(0, size)))
	}
	bz.mu.Lock()
	for _, z := range worth {
		bz.bad[z.idx] = z != good
	}
	bz.mu.Unlock()
	t.Logf("%d zones with garbage; all but zone %d fail every read", len(worth), good.idx)
	f := mustCreate(t, e, "late")
	defer f.Close()
	want := bytes.Repeat([]byte{0xa5}, size)
	_, err := f.WriteAt(want, 0)
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		t.Fatalf("write on a full device with zone %d reclaimable and %d failing: %v", good.idx, len(worth)-1, err)
	}
	if got := readAll(t, e, "late"); !bytes.Equal(got, want) {
		t.Fatalf("late: %d bytes read back, want the %d written", len(got), len(want))
	}
	if n := e.Stats().GCResets; n == 0 {
		t.Fatalf("GCResets %d: zone %d was not reclaimed", n, good.idx)
	}
}

// TestGCSealIdleTriesTheNextZoneAfterOneFails: the garbage a writer short
// of space needs sits in idle open zones (sealIdle, a writer's last
// resort); the open zone with the most garbage fails every read. The
// seal must go on to the next idle zone, which it can reclaim, as a pass
// does with full victims. Before the fix sealIdle returned the first
// failing candidate's error, and it ranks first again every pass.
func TestGCSealIdleTriesTheNextZoneAfterOneFails(t *testing.T) {
	// Under mru each file writes a zone of its own.
	cfg := Config{CacheBytes: 2 << 20, DirtyLimit: 1 << 20, Policy: PolicyMRU}
	cfg.GC.Disabled = true
	e, bz := openBadZones(t, cfg)
	defer e.Close()
	// Two files, three chunks each, then chunks of each written again:
	// two of the first's, one of the second's. Their zones stay open,
	// idle, with garbage and live data; the first's holds more garbage.
	const chunk = 32768
	var zones []*zone
	for i, again := range []int{2, 1} {
		name := fmt.Sprintf("f%d", i)
		f := mustCreate(t, e, name)
		defer f.Close()
		for pass, n := range []int{3, again} {
			for j := range n {
				if _, err := f.WriteAt(bytes.Repeat([]byte{byte(10*i + pass)}, chunk), int64(j*chunk)); err != nil {
					t.Fatal(err)
				}
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
		}
		zones = append(zones, e.zoneAt(devOf(t, e, name, 0).dev))
	}
	bad, good := zones[0], zones[1]
	garbage := func(z *zone) int64 { return z.alloc.Load() - z.valid.Load() }
	idle := e.placer.idleOpen()
	if bad == good || len(idle) != 2 || garbage(bad) <= garbage(good) || good.valid.Load() == 0 {
		t.Fatalf("set-up: zones %d and %d (garbage %d, %d), %d idle open zones; want two, the first with more garbage",
			bad.idx, good.idx, garbage(bad), garbage(good), len(idle))
	}
	bz.mu.Lock()
	bz.bad[bad.idx] = true
	bz.mu.Unlock()
	e.gc.mu.Lock()
	ok, err := e.gc.sealIdle(minGCGain)
	e.gc.mu.Unlock()
	if !ok {
		t.Fatalf("sealIdle with two idle zones with garbage, the first (zone %d) failing reads: reclaimed nothing: %v", bad.idx, err)
	}
	if good.state.Load() == zoneOpen {
		t.Fatalf("zone %d, the one that reads, is still open", good.idx)
	}
	if bad.state.Load() != zoneOpen {
		t.Fatalf("zone %d, whose reads fail, is not left open (state %d)", bad.idx, bad.state.Load())
	}
	if n := e.Stats().GCVictimsFailed; n != 1 {
		t.Fatalf("GCVictimsFailed %d, want 1", n)
	}
	// Its data is still there: f1 reads back what was written.
	want := append(bytes.Repeat([]byte{11}, chunk), bytes.Repeat([]byte{10}, 2*chunk)...)
	if got := readAll(t, e, "f1"); !bytes.Equal(got, want) {
		t.Fatalf("f1 after its zone was collected: %d bytes, not as written", len(got))
	}
}
