package engine

import (
	"bytes"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zonefold/zonefold/uring"
	"github.com/zonefold/zonefold/zns"
)

// zoneStuckReads is a device whose reads of the zones in stuck wait,
// once armed, until the test releases them.
type zoneStuckReads struct {
	zns.Device
	zoneSize int64
	stuck    map[int64]bool // zone index
	armed    atomic.Bool
	entered  atomic.Int32
	release  chan struct{}
	once     sync.Once
}

func (d *zoneStuckReads) Read(off int64, buf []byte, c uring.Completion) error {
	if d.armed.Load() && d.stuck[off/d.zoneSize] {
		d.entered.Add(1)
		<-d.release
	}
	return d.Device.Read(off, buf, c)
}

func (d *zoneStuckReads) unstick() { d.once.Do(func() { close(d.release) }) }

// stuckReadaheadWorkers sets up an engine with a cold 8 MiB file a
// (returned with its bytes) whose readahead windows no worker reads: all
// four are stuck in reads of another file's zones until the cleanup
// (unstick) runs.
func stuckReadaheadWorkers(t *testing.T) (*Engine, *File, []byte, func()) {
	const M = 1 << 20
	dev := &zoneStuckReads{release: make(chan struct{}), stuck: map[int64]bool{}}
	e := formatOpenWith(t, emuDevice(t, 16, "4M", ""), Config{CacheBytes: 64 << 20}, func(d zns.Device) zns.Device {
		dev.Device = d
		return dev
	})
	t.Cleanup(func() { dev.unstick(); e.Close() })
	dev.zoneSize = e.geo.ZoneSize
	// Both open while written, so that each has zones of its own.
	a, b := mustCreate(t, e, "a"), mustCreate(t, e, "b")
	data := make([]byte, 8*M)
	for i := range data {
		data[i] = byte(i*7 + i>>12)
	}
	if _, err := a.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := b.WriteAt(data[:M], 0); err != nil {
		t.Fatal(err)
	}
	for _, h := range []*File{a, b} {
		if err := h.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	zonesOf := func(h *File) map[int64]bool {
		z := map[int64]bool{}
		h.f.mu.RLock()
		h.f.ext.lookup(0, h.f.size, func(x extent) {
			for _, off := range []int64{x.dev, x.dev + x.len - 1, x.hdr} {
				z[off/dev.zoneSize] = true
			}
		})
		h.f.mu.RUnlock()
		return z
	}
	za := zonesOf(a)
	for z := range zonesOf(b) {
		if za[z] {
			t.Fatalf("set-up: a and b share zone %d (a %v, b %v)", z, za, zonesOf(b))
		}
		dev.stuck[z] = true
	}
	e.cache.EvictClean(1 << 40)

	// b's first read sticks, and so do the four parts of the window it
	// asks for: every readahead worker waits in b's zone.
	dev.armed.Store(true)
	bDone := make(chan struct{})
	go func() {
		defer close(bDone)
		b.ReadAt(make([]byte, 128<<10), 0)
	}()
	for deadline := time.Now().Add(60 * time.Second); e.raActive.Load() < readaheadWorkers; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("set-up: %d readahead workers stuck after 60 s, want %d (%d reads stuck)", e.raActive.Load(), readaheadWorkers, dev.entered.Load())
		}
	}
	return e, a, data, func() {
		dev.unstick()
		<-bDone
	}
}

// TestH38cSequentialReaderFillsWholeParts: a handle reading a cold file
// sequentially in 32 KiB requests, whose readahead windows no worker
// reads (all four are stuck in another file's reads), fills what it
// misses to the next part boundary: one device read per 128 KiB, not one
// per request. Before, such a reader (one that overtook its windows, as
// a 32 KiB reader does whenever a worker starts late) read 32 KiB per
// miss: 256 misses for 8 MiB, and a 32 KiB engine read cost 2-3x the CPU
// per MiB of a 512 KiB one. It counts misses, not time.
func TestH38cSequentialReaderFillsWholeParts(t *testing.T) {
	const K, M = 1 << 10, 1 << 20
	e, a, data, unstick := stuckReadaheadWorkers(t)
	s0 := e.Stats()
	p := make([]byte, 32*K)
	for off := int64(0); off < int64(len(data)); off += int64(len(p)) {
		n, err := a.ReadAt(p, off)
		if err != nil && err != io.EOF || n != len(p) {
			t.Fatalf("read at %d: %d, %v", off, n, err)
		}
		if !bytes.Equal(p, data[off:off+int64(n)]) {
			t.Fatalf("read at %d: wrong bytes", off)
		}
	}
	s := e.Stats()
	misses, devRead := s.Cache.Misses-s0.Cache.Misses, s.DevRead-s0.DevRead
	prefetched := s.Cache.PrefetchedBytes - s0.Cache.PrefetchedBytes
	t.Logf("8 MiB in 32 KiB reads: %d misses, %d bytes read from the device, %d prefetched", misses, devRead, prefetched)
	if prefetched != 0 {
		t.Fatalf("set-up: readahead read %d bytes of a; the workers were to be stuck", prefetched)
	}
	if misses > 8*M/(128*K)+2 {
		t.Errorf("%d misses for 8 MiB read 32 KiB at a time with no readahead running: want at most one per 128 KiB part (%d)", misses, 8*M/(128*K)+2)
	}
	// The fills read the file, no more (the headers aside: one block
	// per record whose sums the sum cache did not hold).
	if data := devRead - (s.SumReads-s0.SumReads)*BlockSize; data != 8*M {
		t.Errorf("read %d bytes of data from the device, want %d", data, 8*M)
	}
	unstick()
}
