package engine

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zonefold/zonefold/zns"
	"golang.org/x/sys/unix"
)

func emuOf(t *testing.T, e *Engine) *zns.Emu {
	t.Helper()
	emu, ok := e.dev.(*zns.Emu)
	if !ok {
		t.Fatalf("device is %T, not *zns.Emu", e.dev)
	}
	return emu
}

// syncThenTearNextRecord creates file "a", syncs 64 KiB of ones at 0, then
// writes 32 KiB of twos at off back to the device without a flush (never
// acknowledged: a Sync's flush would make the record durable, and a power
// cut cannot tear it then), crashes e and keeps the header and half the
// data of that last record, as if power failed mid-write. It returns the
// synced bytes; the device is closed.
func syncThenTearNextRecord(t *testing.T, e *Engine, off int64) []byte {
	t.Helper()
	first := bytes.Repeat([]byte{1}, 64<<10)
	f := createSynced(t, e, "a", first)
	if _, err := f.WriteAt(bytes.Repeat([]byte{2}, 32<<10), off); err != nil {
		t.Fatal(err)
	}
	if err := e.wb.FlushFile(context.Background(), f.f.id); err != nil {
		t.Fatal(err)
	}
	emu := emuOf(t, e)
	e.crashForTest()
	if err := emu.TearLastWrite(BlockSize + 16<<10); err != nil {
		t.Fatal(err)
	}
	emu.Close()
	return first
}

func readAll(t *testing.T, e *Engine, name string) []byte {
	t.Helper()
	f, err := e.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, f.Size())
	if n, err := f.ReadAt(got, 0); n != len(got) || (err != nil && err != io.EOF) {
		t.Fatalf("read %s: %d of %d, %v", name, n, len(got), err)
	}
	return got
}

func TestWriteEIOIsNeverDropped(t *testing.T) {
	devName := emuDevice(t, 24, "1M", "")
	e := formatOpen(t, devName, smallConfig())
	f, _ := e.Create("a")
	want := bytes.Repeat([]byte{7}, 300000)
	f.WriteAt(want, 0)
	emuOf(t, e).FailWrite(1)
	// The failed append either went elsewhere on a retry, or its error
	// reaches fsync; the data stays dirty in the cache either way.
	err := f.Sync()
	if err != nil && !errors.Is(err, syscall.EIO) {
		t.Fatalf("first fsync: %v, want nil or EIO", err)
	}
	if err == nil {
		t.Log("the failed append was retried before fsync returned")
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("second fsync: %v", err)
	}
	if st := e.Stats(); st.AppendErrs != 1 {
		t.Fatalf("append errors = %d, want 1", st.AppendErrs)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = reopen(t, devName, smallConfig())
	defer e.Close()
	if got := readAll(t, e, "a"); !bytes.Equal(got, want) {
		t.Fatal("data written around an EIO differs after reopen")
	}
}

func TestReadEIOReachesReader(t *testing.T) {
	devName := emuDevice(t, 24, "1M", "")
	e := formatOpen(t, devName, smallConfig())
	f, _ := e.Create("a")
	want := bytes.Repeat([]byte("eio!"), 5000)
	f.WriteAt(want, 0)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = reopen(t, devName, smallConfig()) // cold cache: reads go to the device
	defer e.Close()
	f, _ = e.Open("a")
	// Bad media: the read fails, and so does every read of its range
	// again (readPieces reads a failed read again before it fails).
	emuOf(t, e).FailReadBad(1)
	buf := make([]byte, len(want))
	if _, err := f.ReadAt(buf, 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read with an injected EIO: %v, want EIO", err)
	}
	if st := e.Stats(); st.ReadErrs != 1 || st.ReadRetries != 1 {
		t.Fatalf("read errors = %d, retries %d, want 1 and 1", st.ReadErrs, st.ReadRetries)
	}
	// The failure was not cached: the next read goes to the device again.
	emuOf(t, e).FailRead(0) // healed
	if n, err := f.ReadAt(buf, 0); n != len(want) || (err != nil && err != io.EOF) || !bytes.Equal(buf, want) {
		t.Fatalf("read after the EIO: %d, %v, equal %v", n, err, bytes.Equal(buf, want))
	}
}

func TestTornLastRecordIsDropped(t *testing.T) {
	devName := emuDevice(t, 24, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	first := syncThenTearNextRecord(t, e, 16<<10) // the second overwrites the middle of the first
	e = reopen(t, devName, cfg)
	defer e.Close()
	got := readAll(t, e, "a")
	if !bytes.Equal(got, first) {
		t.Fatalf("after a torn record: %d bytes, equal to the first write: %v (the torn record must be dropped whole)",
			len(got), bytes.Equal(got, first))
	}
}

func TestDeviceFullIsENOSPCAndLosesNothing(t *testing.T) {
	devName := emuDevice(t, 12, "256K", "")
	e := formatOpen(t, devName, Config{CacheBytes: 2 << 20, DirtyLimit: 1 << 20})
	defer e.Close()
	// Distinct files, never overwritten: GC can free nothing.
	var written [][]byte
	var names []string
	var full error
	for i := 0; i < 200 && full == nil; i++ {
		name := "f" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + string(rune('a'+i/26))
		f, err := e.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		p := bytes.Repeat([]byte{byte(i)}, 100000)
		if _, err := f.WriteAt(p, 0); err != nil {
			full = err
			break
		}
		if err := f.Sync(); err != nil {
			full = err
			break
		}
		written = append(written, p)
		names = append(names, name)
	}
	if !errors.Is(full, syscall.ENOSPC) {
		t.Fatalf("filling the device ended with %v, want ENOSPC", full)
	}
	if !strings.Contains(full.Error(), "no space left on device") {
		t.Fatalf("unclear error: %v", full)
	}
	// A user told the device is full must see where its space went.
	for _, part := range []string{"valid on the device", "dirty in the cache", "appendable without GC"} {
		if !strings.Contains(full.Error(), part) {
			t.Errorf("ENOSPC does not say %q: %v", part, full)
		}
	}
	if len(written) < 10 {
		t.Fatalf("only %d files fit before ENOSPC", len(written))
	}
	for i, name := range names {
		if got := readAll(t, e, name); !bytes.Equal(got, written[i]) {
			t.Fatalf("file %s changed after ENOSPC", name)
		}
	}
	// "No space" while empty zones remain would be a bug.
	if st := e.Stats(); st.FreeZones > e.cfg.GC.Reserve {
		t.Fatalf("ENOSPC with %d free zones (reserve %d)", st.FreeZones, e.cfg.GC.Reserve)
	}
}

// TestRealDevices runs the engine on the zoned devices named in
// ZONEFOLD_TEST_DEVICES (the VM sets it): random operations against the
// model with reopens, then overwrites that make GC run. A device named
// there that cannot be used fails the test.
func TestRealDevices(t *testing.T) {
	list := os.Getenv("ZONEFOLD_TEST_DEVICES")
	if list == "" {
		t.Skip("ZONEFOLD_TEST_DEVICES is not set (make vmtest sets it in the VM)")
	}
	for _, dev := range strings.Split(list, ",") {
		t.Run(strings.TrimPrefix(dev, "/dev/"), func(t *testing.T) {
			d, err := zns.Open(dev, zns.Options{})
			if err != nil {
				t.Fatal(err)
			}
			// A slice of the device keeps GC quick under emulation: two
			// metadata zones and seven data zones.
			zones := min(d.Geometry().Zones, 9)
			if _, err := Format(d, FormatOptions{Force: true, Zones: zones}); err != nil {
				d.Close()
				t.Fatal(err)
			}
			d.Close()
			cfg := Config{CacheBytes: 4 << 20, DirtyLimit: 2 << 20}
			t.Run("model", func(t *testing.T) {
				r := newModelRun(t, dev, cfg, 11)
				r.canReopen = true
				r.e = reopen(t, dev, cfg)
				r.run(300)
			})
			t.Run("gc", func(t *testing.T) {
				e := reopen(t, dev, cfg)
				for _, fi := range e.List() {
					if err := e.Remove(fi.Name); err != nil {
						t.Fatal(err)
					}
				}
				// Half of what is left after the GC reserve: with a
				// conventional zone and tight limits only six data
				// zones remain, two of them reserved.
				usable := e.Capacity() - int64(e.cfg.GC.Reserve)*e.geo.ZoneCap
				per := usable / 2 / 4 / 8192 * 8192
				gens := overwrite(t, e, 4, per, 8192, 1.2, 2)
				if err := e.Sync(t.Context()); err != nil {
					t.Fatal(err)
				}
				if st := e.Stats(); st.GCResets == 0 {
					t.Fatalf("GC never ran: %+v", st)
				}
				checkValidCounts(t, e)
				verifyStamps(t, e, gens, 8192)
				if err := e.Close(); err != nil {
					t.Fatal(err)
				}
				e = reopen(t, dev, cfg)
				defer e.Close()
				verifyStamps(t, e, gens, 8192)
			})
		})
	}
}

func TestCacheLargerThanFreeSpaceStillOverwrites(t *testing.T) {
	// 8 usable data zones of 256 KiB (2 MiB), a 1 MiB file, and a cache
	// that holds a whole overwrite of it dirty (no background writeback):
	// the dirty overwrite plus the live copy exceed the device, so the
	// writer must write back to turn old copies into garbage, collect,
	// and go on — not fail with ENOSPC.
	devName := emuDevice(t, 12, "256K", "")
	cfg := Config{CacheBytes: 8 << 20, DirtyLimit: 4 << 20}
	cfg.Writeback.Background = 1 << 30
	cfg.Writeback.Expire = time.Hour
	e := formatOpen(t, devName, cfg)
	defer e.Close()
	f, _ := e.Create("a")
	p := make([]byte, 1<<20)
	for round := range 6 {
		for i := range p {
			p[i] = byte(round + 1)
		}
		for off := 0; off < len(p); off += 128 << 10 {
			if _, err := f.WriteAt(p[off:off+128<<10], int64(off)); err != nil {
				t.Fatalf("overwrite %d at %d: %v", round, off, err)
			}
		}
		if round%2 == 0 {
			// The next round's dirty overwrite and this live copy
			// together exceed the device.
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, e, "a"); !bytes.Equal(got, p) {
		t.Fatal("content after overwrites differs")
	}
	if st := e.Stats(); st.GCResets == 0 {
		t.Fatalf("no GC ran: %+v", st)
	}
}

// TestFailedAppendRetiresItsZone: after an append to a zone fails, the
// engine stops appending there and, once the zone's other appends have
// landed, finishes it on the device, so that the device never counts more
// open zones than the engine's budget; the data goes elsewhere, GC can
// reclaim the zone, and nothing is lost. (The zone left placement but
// stayed open on the device, holding an open and an active resource.)
func TestFailedAppendRetiresItsZone(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	cfg.GC.Disabled = true
	e := formatOpen(t, devName, cfg)
	first := bytes.Repeat([]byte{1}, 64<<10)
	f := createSynced(t, e, "a", first)
	z := f.f.mru.Load()
	if z == nil {
		t.Fatal("the file has no zone")
	}
	emuOf(t, e).FailWrite(1) // the next append, to the same zone
	second := bytes.Repeat([]byte{2}, 64<<10)
	if _, err := f.WriteAt(second, 64<<10); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil && !errors.Is(err, syscall.EIO) {
		t.Fatalf("fsync over a failed append: %v", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("second fsync: %v", err)
	}
	if st := e.Stats(); st.AppendErrs != 1 {
		t.Fatalf("append errors = %d, want 1", st.AppendErrs)
	}
	// The zone is retired: out of placement now, finished on the device
	// once its appends drained.
	for deadline := time.Now().Add(10 * time.Second); z.state.Load() != zoneFull; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("zone %d still in state %d 10s after its append failed", z.idx, z.state.Load())
		}
	}
	var rz [1]zns.Zone
	if _, err := e.dev.Report(z.idx, rz[:]); err != nil {
		t.Fatal(err)
	}
	if rz[0].Cond != zns.CondFull {
		t.Fatalf("zone %d is %s on the device after a failed append; want it finished", z.idx, rz[0].Cond)
	}
	// Every zone the engine does not append to is closed on the device.
	for _, dz := range e.placer.zones {
		if dz.state.Load() == zoneOpen {
			continue
		}
		if _, err := e.dev.Report(dz.idx, rz[:]); err != nil {
			t.Fatal(err)
		}
		if rz[0].Cond.Active() {
			t.Errorf("zone %d: engine state %d, device %s", dz.idx, dz.state.Load(), rz[0].Cond)
		}
	}
	want := append(append([]byte(nil), first...), second...)
	if got := readAll(t, e, "a"); !bytes.Equal(got, want) {
		t.Fatal("content differs after a failed append")
	}
	// GC reclaims the zone: its valid bytes move, nothing else is lost.
	if _, err := f.WriteAt(bytes.Repeat([]byte{3}, 32<<10), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	copy(want, bytes.Repeat([]byte{3}, 32<<10))
	victim := z
	for e.gc.reclaim(nil, minGCGain) {
		if victim.state.Load() == zoneFree {
			break
		}
	}
	if victim.state.Load() != zoneFree {
		t.Fatalf("GC did not reclaim the failed zone %d", victim.idx)
	}
	checkValidCounts(t, e)
	if got := readAll(t, e, "a"); !bytes.Equal(got, want) {
		t.Fatal("content differs after GC of the failed zone")
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	checkFsck(t, devName)
	e = reopen(t, devName, cfg)
	defer e.Close()
	if got := readAll(t, e, "a"); !bytes.Equal(got, want) {
		t.Fatal("content differs after reopen")
	}
}

// TestGCRelocatesRecordsPastATornOne: a zone where a record that no file
// maps any more is torn (as an NVMe append that failed among others in
// flight can leave it), followed by live records, is still reclaimed: the
// header walk stops at the torn record, and GC takes the rest from the
// extent maps. (GC failed with "still holds valid bytes" on every pass.)
func TestGCRelocatesRecordsPastATornOne(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	cfg.GC.Disabled = true
	e := formatOpen(t, devName, cfg)
	defer func() { e.Close() }()
	f, err := e.Create("a")
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 3*64<<10)
	for i := range 3 { // three records, one after the other in one zone
		p := bytes.Repeat([]byte{byte(1 + i)}, 64<<10)
		copy(want[i*64<<10:], p)
		if _, err := f.WriteAt(p, int64(i)*64<<10); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	var mid extent
	f.f.mu.RLock()
	f.f.ext.lookup(64<<10, 1, func(x extent) { mid = x })
	f.f.mu.RUnlock()
	z := e.zoneAt(mid.dev)
	// The middle record dies (overwritten: its copy goes elsewhere in
	// the zone), then its header is torn behind the device's back.
	p := bytes.Repeat([]byte{9}, 64<<10)
	copy(want[64<<10:], p)
	if _, err := f.WriteAt(p, 64<<10); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	emu := emuOf(t, e)
	fh, err := os.OpenFile(emu.Path(), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.WriteAt(bytes.Repeat([]byte("torn"), 1024), emu.FileOffset(mid.dev-BlockSize)); err != nil {
		t.Fatal(err)
	}
	fh.Close()
	e.gc.mu.Lock()
	z.state.Store(zoneGC)
	gain, err := e.gc.relocate(z, minGCGain)
	e.gc.mu.Unlock()
	if err != nil || !gain {
		t.Fatalf("relocate: %v, gain %v", err, gain)
	}
	if v := z.valid.Load(); v != 0 {
		t.Fatalf("zone %d still holds %d valid bytes after relocation", z.idx, v)
	}
	z.state.Store(zoneFull)
	if got := readAll(t, e, "a"); !bytes.Equal(got, want) {
		t.Fatal("content differs after relocation")
	}
	checkValidCounts(t, e)
	// Read cold: the GC records carry the sums the bytes were written
	// with, or every block of them fails its check.
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = reopen(t, devName, cfg)
	if got := readAll(t, e, "a"); !bytes.Equal(got, want) {
		t.Fatal("content differs after relocation and a reopen")
	}
}

// failAppendOf runs f's writeback with the host refusing the second half
// of its next record (RLIMIT_FSIZE past the record's header and 32 KiB
// of data in f's MRU zone): the append fails part-way, a torn record.
func failAppendOf(t *testing.T, e *Engine, f *File) error {
	t.Helper()
	return failAppendOn(t, e, emuOf(t, e), f)
}

// failAppendOn is failAppendOf for an engine whose device wraps emu (a
// test's fault-injecting wrapper).
func failAppendOn(t *testing.T, e *Engine, emu *zns.Emu, f *File) error {
	t.Helper()
	z := f.f.mru.Load()
	used := z.alloc.Load()
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	limit := unix.Rlimit{Cur: uint64(emu.FileOffset(z.start + used + BlockSize + 32<<10)), Max: old.Max}
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &limit); err != nil {
		t.Fatal(err)
	}
	werr := e.wb.FlushFile(context.Background(), f.f.id)
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	return werr
}

// overwriteFailingAppend overwrites a's first 64 KiB with 0xcc and writes
// it back with the host refusing half of its record (failAppendOf); it
// fails the test unless the append failed, and returns writeback's error.
func overwriteFailingAppend(t *testing.T, e *Engine, a *File) error {
	t.Helper()
	if _, err := a.WriteAt(bytes.Repeat([]byte{0xcc}, 64<<10), 0); err != nil {
		t.Fatal(err)
	}
	werr := failAppendOf(t, e, a)
	if werr == nil || !e.failedAppend.Load() {
		t.Fatalf("set-up: writeback the host refused half of: %v (failedAppend %v)", werr, e.failedAppend.Load())
	}
	return werr
}
