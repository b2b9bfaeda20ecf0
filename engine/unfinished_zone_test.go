package engine

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/zonefold/zonefold/zns"
)

// deviceActiveDataZones counts the data zones the device reports open or
// closed.
func deviceActiveDataZones(t *testing.T, e *Engine) int {
	t.Helper()
	n := 0
	for _, z := range e.placer.zones {
		var rz [1]zns.Zone
		if _, err := e.dev.Report(z.idx, rz[:]); err != nil {
			t.Fatal(err)
		}
		if rz[0].Cond.Active() {
			n++
		}
	}
	return n
}

// TestTornZoneFinishRefusedAtRecoveryCountsUnfinished: recovery finishes a
// torn zone (settleZone's default branch); the device refuses the finish
// and keeps the zone active. Recovery must count it unfinished, as retire
// does at run time: otherwise placement's budget is the device's whole
// limit and, with files and GC each holding their zones, one zone opens
// past max_active and appends there fail.
func TestTornZoneFinishRefusedAtRecoveryCountsUnfinished(t *testing.T) {
	cfg := Config{CacheBytes: 2 << 20, DirtyLimit: 512 << 10}
	devName := emuDevice(t, 48, "256K", "&max_open=6&max_active=6")
	e := formatOpen(t, devName, cfg)
	syncThenTearNextRecord(t, e, 64<<10)

	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Recovery finishes the torn zone once its checkpoint is durable
	// (settleTornZones); the checkpoint finishes the metadata zone it
	// leaves first.
	dev.(*zns.Emu).FailFinish(2) // recovery's finish of the torn zone
	e, err = OpenDevice(dev, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	st := e.Stats()
	act := deviceActiveDataZones(t, e)
	t.Logf("after reopen: unfinished %d, open %d, budget %d, device active data zones %d", st.ZonesUnfinished, st.OpenZones, e.placer.budget, act)
	if st.ZonesUnfinished != 1 {
		t.Fatalf("set-up: %d zones unfinished after recovery; want the torn one, whose finish the device refused", st.ZonesUnfinished)
	}
	if act > st.OpenZones+st.ZonesUnfinished {
		t.Errorf("after recovery the device counts %d data zones active, the engine %d open + %d unfinished",
			act, st.OpenZones, st.ZonesUnfinished)
	}
	size := e.Capacity() * 6 / 10 / 4 / 8192 * 8192
	fill := Workload{Files: 4, BS: 8192, IODepth: 4, Size: size, RW: "write", Seed: 1}
	if _, err := RunWorkload(t.Context(), e, fill); err != nil {
		t.Errorf("fill: %v", err)
	}
	over := fill
	over.RW, over.Keep, over.Ops = "randwrite", true, 2*e.Capacity()/4/8192
	_, err = RunWorkload(t.Context(), e, over)
	st = e.Stats()
	if err != nil || st.AppendErrs != 0 {
		t.Errorf("writes after recovery: %v; %d appends failed, want 0", err, st.AppendErrs)
	}
}

// TestTransientFinishFailuresDoNotStarveBudget: each closed file's short
// tail is finished (finishTail) and the device refuses each finish once
// (a transient EIO; the zone stays open there), so each zone counts
// unfinished. GC never picks a zone whose garbage is below minGCGain, so
// unless the finish is tried again, after as many refusals as the budget
// a new file cannot get a zone on a nearly empty device. The new file's
// own write, short of a zone, must get one (its GC pass retries the
// finishes, which the device now accepts).
func TestTransientFinishFailuresDoNotStarveBudget(t *testing.T) {
	cfg := Config{CacheBytes: 2 << 20, DirtyLimit: 512 << 10}
	devName := emuDevice(t, 48, "256K", "&max_open=6&max_active=6")
	e := formatOpen(t, devName, cfg)
	defer e.Close()
	budget := e.placer.budget
	for i := 0; i < budget; i++ {
		f, err := e.Create(fmt.Sprintf("t%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(bytes.Repeat([]byte{byte(i + 1)}, 256<<10-BlockSize-2*BlockSize), 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		z := f.f.mru.Load()
		emuOf(t, e).FailFinish(1)
		f.Close()
		for deadline := time.Now().Add(10 * time.Second); z.state.Load() != zoneFull; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("zone %d of t%d not retired (state %d, remaining %d)", z.idx, i, z.state.Load(), z.remaining())
			}
		}
	}
	st := e.Stats()
	t.Logf("budget %d, finish errors %d, unfinished %d, free zones %d of %d", budget, st.ZoneFinishErrs, st.ZonesUnfinished, st.FreeZones, len(e.placer.zones))
	f, err := e.Create("late")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = f.WriteAt(bytes.Repeat([]byte{9}, 64<<10), 0)
	if err == nil {
		err = f.Sync()
	}
	st = e.Stats()
	t.Logf("after the write: unfinished %d, free zones %d", st.ZonesUnfinished, st.FreeZones)
	if err != nil {
		t.Errorf("a 64 KiB write on a device with %d of %d zones free: %v", st.FreeZones, len(e.placer.zones), err)
	}
}

// TestFailedZoneReusedAfterReopenKeepsBudgetAndData: a zone whose append
// failed and whose finish the device refused (counted unfinished) is
// still active on the device after Close. The engine does not log why a
// zone was retired, so recovery cannot tell it from a clean partial zone:
// if its log is clean and the device reports no error, recovery may open
// it for appends again (the failure was transient). What must hold: the
// engine counts every zone the device counts active (open or unfinished),
// appends after reopen do not fail, and data written after reopen,
// wherever it lands (in that zone too), survives another reopen.
func TestFailedZoneReusedAfterReopenKeepsBudgetAndData(t *testing.T) {
	cfg := Config{CacheBytes: 2 << 20, DirtyLimit: 512 << 10}
	devName := emuDevice(t, 48, "256K", "&max_open=6&max_active=6")
	e := formatOpen(t, devName, cfg)
	f, z, fill := fillThenFailAppendAndFinish(t, e)
	_ = f.Sync()
	for deadline := time.Now().Add(10 * time.Second); z.state.Load() == zoneRetiring; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("still retiring")
		}
	}
	f.Close()
	st := e.Stats()
	t.Logf("before close: unfinished %d, open %d, budget %d, device active data zones %d", st.ZonesUnfinished, st.OpenZones, e.placer.budget, deviceActiveDataZones(t, e))
	if st.ZonesUnfinished != 1 {
		t.Fatalf("setup: ZonesUnfinished = %d, want 1", st.ZonesUnfinished)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	e = reopen(t, devName, cfg)
	defer e.Close()
	st = e.Stats()
	act := deviceActiveDataZones(t, e)
	t.Logf("after reopen: unfinished %d, open %d, budget %d, device active data zones %d", st.ZonesUnfinished, st.OpenZones, e.placer.budget, act)
	if act > st.OpenZones+st.ZonesUnfinished {
		t.Errorf("after reopen the device counts %d data zones active, the engine %d open + %d unfinished: placement may open past the device's active limit",
			act, st.OpenZones, st.ZonesUnfinished)
	}
	// Probe files, one at a time, until one lands in the failed zone (if
	// recovery reopened it): their bytes must read back after a reopen.
	probes, inZone := 0, false
	for ; probes < 8 && !inZone; probes++ {
		p, err := e.Create(fmt.Sprintf("probe%d", probes))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.WriteAt(bytes.Repeat([]byte{byte(0x40 + probes)}, 32<<10), 0); err != nil {
			t.Fatal(err)
		}
		if err := p.Sync(); err != nil {
			t.Fatal(err)
		}
		p.f.mu.RLock()
		p.f.ext.each(func(x extent) bool {
			if zz := e.zoneAt(x.dev); zz != nil && zz.idx == z.idx {
				inZone = true
			}
			return true
		})
		p.f.mu.RUnlock()
		p.Close()
	}
	t.Logf("zone %d state after reopen %d; a probe landed there: %v", z.idx, e.zones[z.idx].state.Load(), inZone)
	over := fill
	over.RW, over.Keep, over.Ops = "randwrite", true, 2*e.Capacity()/4/8192
	_, err := RunWorkload(t.Context(), e, over)
	st = e.Stats()
	if err != nil || st.AppendErrs != 0 {
		t.Errorf("overwrites after reopen: %v; %d appends failed, want 0", err, st.AppendErrs)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = reopen(t, devName, cfg)
	defer e.Close()
	for i := 0; i < probes; i++ {
		p, err := e.OpenFile(fmt.Sprintf("probe%d", i), 0)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 32<<10)
		if _, err := p.ReadAt(got, 0); err != nil {
			t.Fatalf("probe%d: %v", i, err)
		}
		if !bytes.Equal(got, bytes.Repeat([]byte{byte(0x40 + i)}, 32<<10)) {
			t.Errorf("probe%d, written after reopen, reads back other bytes", i)
		}
		p.Close()
	}
}

// TestKeptTailsLeaveRoomForOtherClasses: under mru a hinted
// file's short tail is kept open for the next file of its class. Writers
// of one class that then stops writing must not leave a tail each: they
// would fill the open budget, and a file of another class would share one
// of those tails (lifetimes mixed) while most of the device is free. At
// most the open budget less one place is kept in tails; past that a tail is
// finished as an unhinted file's is.
func TestKeptTailsLeaveRoomForOtherClasses(t *testing.T) {
	cfg := Config{CacheBytes: 4 << 20, DirtyLimit: 2 << 20, Policy: PolicyMRU}
	devName := emuDevice(t, 48, "256K", "&max_open=6&max_active=6")
	e := formatOpen(t, devName, cfg)
	defer e.Close()
	budget := e.placer.budget
	var hs []*File
	for i := 0; i < budget; i++ {
		f, err := e.Create(fmt.Sprintf("x%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.SetWriteLife(LifeExtreme); err != nil {
			t.Fatal(err)
		}
		hs = append(hs, f)
	}
	for i, f := range hs {
		if _, err := f.WriteAt(bytes.Repeat([]byte{byte(i + 1)}, 200<<10), 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range hs {
		f.Close()
	}
	st := e.Stats()
	t.Logf("budget %d; after %d extreme files closed: open zones %d, tails finished %d, free %d", budget, budget, st.OpenZones, st.ZonesTailFinished, st.FreeZones)
	s, err := e.Create("wal")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.SetWriteLife(LifeShort)
	if _, err := s.WriteAt(bytes.Repeat([]byte{0x55}, 64<<10), 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	st = e.Stats()
	s.f.mu.RLock()
	s.f.ext.each(func(x extent) bool {
		if z := e.zoneAt(x.dev); z != nil && WriteLife(z.life.Load()) != LifeShort {
			t.Errorf("short file's bytes [%d,+%d) in zone %d of class %v (free zones %d, shared %d): stale extreme tails hold the open budget",
				x.off, x.len, z.idx, WriteLife(z.life.Load()), st.FreeZones, st.ZonesShared)
		}
		return true
	})
	s.f.mu.RUnlock()
}
