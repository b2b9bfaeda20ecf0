package engine

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/zonefold/zonefold/zns"
)

// h39gHeldColdRead writes a 1 MiB file a (its bytes returned, none 0),
// evicts it and begins a stream's cold read of its first 4 KiB through
// a second handle r (StartRead at 0 fills to the part boundary), held
// in the device: it returns once the read is there, with the device's
// later reads no longer held. release lets it go on; began says whether
// StartRead began it (after release), d.ch gets its end.
func h39gHeldColdRead(t *testing.T) (e *Engine, w, r *File, data []byte, release func(), began chan bool, d readDone) {
	t.Helper()
	const K = 1 << 10
	dev := &zoneStuckReads{release: make(chan struct{}), stuck: map[int64]bool{}}
	e = formatOpenWith(t, emuDevice(t, 16, "4M", ""), Config{CacheBytes: 64 << 20}, func(d zns.Device) zns.Device {
		dev.Device = d
		return dev
	})
	t.Cleanup(func() { dev.unstick(); e.Close() })
	dev.zoneSize = e.geo.ZoneSize
	w = mustCreate(t, e, "a")
	data = make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i*7+i>>12) | 1 // never 0
	}
	if _, err := w.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	w.f.mu.RLock()
	w.f.ext.lookup(0, w.f.size, func(x extent) {
		dev.stuck[x.dev/dev.zoneSize] = true
		dev.stuck[x.hdr/dev.zoneSize] = true
	})
	w.f.mu.RUnlock()
	e.cache.EvictClean(1 << 40)
	var err error
	r, err = e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	dev.armed.Store(true)
	d = readDone{ch: make(chan readEnd, 1)}
	p := make([]byte, 4*K)
	began = make(chan bool, 1)
	go func() { began <- r.StartRead(p, 0, d) }()
	for deadline := time.Now().Add(60 * time.Second); dev.entered.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the cold read never reached the device")
		}
	}
	dev.armed.Store(false)
	return e, w, r, data, dev.unstick, began, d
}

// TestH39gColdFillHeldOverShrinkAndGrowIsNotAdopted: a stream's cold
// read (StartRead at 0 fills to the part boundary, 128 KiB) is held in
// the device while another handle shrinks the file to 8 KiB and grows
// it back, and overwrites a block inside the fill (synced and evicted,
// so no folio of it limits the fill). Once the read completes it must
// not become the cache's folio: its bytes past 8 KiB are the ones the
// shrink cut (the grown file reads zeros there) and its block at 64 KiB
// is older than the write. It is read again; the file then reads as
// written, cached and from the device.
func TestH39gColdFillHeldOverShrinkAndGrowIsNotAdopted(t *testing.T) {
	const K = 1 << 10
	e, w, r, data, release, began, d := h39gHeldColdRead(t)
	// The read is in the device: StartRead took the miss (and its fill)
	// and mapped its pieces. Now the file changes under it.
	if err := w.Truncate(8 * K); err != nil {
		t.Fatal(err)
	}
	if err := w.Truncate(1 << 20); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 1<<20)
	copy(want, data[:8*K])
	blk := bytes.Repeat([]byte{0xee}, 4*K)
	if _, err := w.WriteAt(blk, 64*K); err != nil {
		t.Fatal(err)
	}
	copy(want[64*K:], blk)
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	e.cache.EvictClean(1 << 40)
	release()
	if !<-began {
		t.Fatal("StartRead at 0 did not begin")
	}
	var res readEnd
	select {
	case res = <-d.ch:
	case <-time.After(60 * time.Second):
		t.Fatal("the cold read never ended")
	}
	t.Logf("cold read: %+v, ahead fill; again %d", res, e.Stats().ColdReadsAgain)
	check := func(how string) {
		got := make([]byte, len(want))
		if n, err := r.ReadAt(got, 0); n != len(got) || err != nil {
			t.Fatalf("%s: read %d: %v", how, n, err)
		}
		if i := firstDiff(got, want); i >= 0 {
			t.Fatalf("%s: byte %d is %#x, want %#x", how, i, got[i], want[i])
		}
	}
	check("cached")
	e.cache.EvictClean(1 << 40)
	check("from the device")
}

// TestH39gRemoveDuringAHeldColdFillEnds: the file is removed (its last
// name; a handle stays open) while a stream's cold read of it, filling
// past its request, is held in the device. The removal must not wait
// for the read, and the read ends once released (read again, or its
// bytes): removal during a cold read deadlocked once (H15, H31b).
func TestH39gRemoveDuringAHeldColdFillEnds(t *testing.T) {
	e, w, _, _, release, began, d := h39gHeldColdRead(t)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	removed := make(chan error, 1)
	go func() { removed <- e.Remove("a") }()
	select {
	case err := <-removed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		release()
		t.Fatal("Remove waited 60 s for a cold read held in the device")
	}
	release()
	if !<-began {
		t.Fatal("StartRead at 0 did not begin")
	}
	select {
	case res := <-d.ch:
		t.Logf("cold read: %+v", res)
		if res.err != nil {
			t.Errorf("cold read of a removed file still open: %v", res.err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the cold read never ended")
	}
}

// TestH39gColdFillFailingPastTheRequestServesIt: a stream's cold read
// (StartRead at 0, filling to 128 KiB) whose fill holds a block that
// fails its checksum, at 16 KiB, past the request: the request is still
// served (read again, the waiting way), and nothing counts until a read
// of that block fails, once.
func TestH39gColdFillFailingPastTheRequestServesIt(t *testing.T) {
	const K = 1 << 10
	devName := emuDevice(t, 16, "4M", "")
	e := formatOpen(t, devName, Config{CacheBytes: 64 << 20})
	want := pattern(1<<20, 1)
	createSynced(t, e, "a", want)
	bad := devOf(t, e, "a", 16*K).dev + 100
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	flipByte(t, devName, bad)
	e = reopen(t, devName, Config{CacheBytes: 64 << 20})
	defer e.Close()
	h, err := e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 4*K)
	// A first read, far off, gives the file its cache file: StartRead
	// begins only on a file that has one.
	if _, err := h.ReadAt(p, 512*K); err != nil {
		t.Fatal(err)
	}
	d := readDone{ch: make(chan readEnd, 1)}
	for off := int64(0); off < 16*K; off += int64(len(p)) {
		clear(p)
		if !h.ReadCached(p, off) {
			e.PlugReads()
			ok := h.StartRead(p, off, d)
			e.UnplugReads()
			if ok {
				var r readEnd
				select {
				case r = <-d.ch:
				case <-time.After(60 * time.Second):
					t.Fatalf("the cold read at %d never ended", off)
				}
				if r.err != nil {
					t.Fatalf("cold read at %d, whose request is good: %v", off, r.err)
				}
				ok = !r.again
			}
			if !ok {
				if _, err := h.ReadAt(p, off); err != nil {
					t.Fatalf("read at %d: %v", off, err)
				}
			}
		}
		if !bytes.Equal(p, want[off:off+int64(len(p))]) {
			t.Fatalf("read at %d: wrong bytes", off)
		}
	}
	if s := e.Stats(); s.ColdReadsAgain == 0 {
		t.Errorf("no cold read was told to read again (%d begun): the test does not test a failed fill", s.ColdReads)
	}
	if s := e.Stats(); s.ChecksumErrs != 0 || s.ReadErrs != 0 {
		t.Errorf("%d checksum errors, %d read errors before any read of the bad block; want 0", s.ChecksumErrs, s.ReadErrs)
	}
	if _, err := h.ReadAt(p, 16*K); !errors.Is(err, syscall.EIO) || !errors.Is(err, ErrChecksum) {
		t.Fatalf("read of the bad block: %v, want EIO (checksum)", err)
	}
	if s := e.Stats(); s.ChecksumErrs != 1 {
		t.Errorf("%d checksum errors after one failed read; want 1", s.ChecksumErrs)
	}
}

// TestH39gColdFillOfAFragmentedFileStillBegins: a stream whose window has
// grown (2 MiB parts) misses on a file whose blocks are scattered (4 KiB
// records, each another file's next to it): the fill to the part
// boundary maps more pieces than one cold read takes (maxReadPieces),
// and StartRead must still begin the request's own read rather than
// hand every miss of the stream to a worker.
func TestH39gColdFillOfAFragmentedFileStillBegins(t *testing.T) {
	const K = 1 << 10
	e := formatOpen(t, emuDevice(t, 16, "4M", ""), Config{CacheBytes: 64 << 20})
	defer e.Close()
	a, b := mustCreate(t, e, "a"), mustCreate(t, e, "b")
	want := pattern(2<<20, 3)
	blk := make([]byte, 4*K)
	for off := int64(0); off < int64(len(want)); off += 4 * K {
		if _, err := a.WriteAt(want[off:off+4*K], off); err != nil {
			t.Fatal(err)
		}
		if err := a.Sync(); err != nil {
			t.Fatal(err)
		}
		if _, err := b.WriteAt(blk, off); err != nil {
			t.Fatal(err)
		}
		if err := b.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	e.cache.EvictClean(1 << 40)
	p := make([]byte, 4*K)
	if _, err := a.ReadAt(p, int64(len(want))-4*K); err != nil { // gives a its cache file
		t.Fatal(err)
	}
	// The stream's state as after a long run of reads up to 0.
	a.ra.mu.Lock()
	a.ra.window, a.ra.next, a.ra.ahead = 8<<20, 0, 0
	a.ra.mu.Unlock()
	if fill := a.readAheadFill(0, 4*K, a.Size()); fill <= 128*K {
		t.Fatalf("set-up: the fill at 0 ends at %d, want past 128 KiB (32 blocks)", fill)
	}
	d := readDone{ch: make(chan readEnd, 1)}
	e.PlugReads()
	ok := a.StartRead(p, 0, d)
	e.UnplugReads()
	if !ok {
		t.Fatal("StartRead of a stream's miss in a fragmented file did not begin")
	}
	r := <-d.ch
	if r.err != nil || (!r.again && !bytes.Equal(p, want[:4*K])) {
		t.Fatalf("cold read: %+v", r)
	}
}
