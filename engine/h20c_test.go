package engine

import (
	"bytes"
	"errors"
	"io/fs"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zonefold/zonefold/uring"
	"github.com/zonefold/zonefold/zns"
)

// h20cGate is a device whose next read, once armed, blocks until the
// test releases it (the reader is then in ReadBacking, without the
// cache's file lock: a preRead). Only that one read blocks.
type h20cGate struct {
	zns.Device
	mu      sync.Mutex
	armed   bool
	match   func(off int64, n int) bool // nil: any read
	entered chan struct{}
	release chan struct{}
}

func newH20cGate() *h20cGate {
	return &h20cGate{entered: make(chan struct{}), release: make(chan struct{})}
}

func (g *h20cGate) arm(match func(off int64, n int) bool) {
	g.mu.Lock()
	g.armed, g.match = true, match
	g.mu.Unlock()
}

func (g *h20cGate) Read(off int64, buf []byte, c uring.Completion) error {
	g.mu.Lock()
	hit := g.armed && (g.match == nil || g.match(off, len(buf)))
	if hit {
		g.armed = false
	}
	g.mu.Unlock()
	if hit {
		close(g.entered)
		<-g.release
	}
	return g.Device.Read(off, buf, c)
}

// h20cWait waits for ch, failing (not hanging) after a generous deadline.
func h20cWait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: not after 30 s", what)
	}
}

// h20cWarmFile writes size bytes to "a" through a gated device, syncs
// them and evicts them, so that nothing of the file is cached.
func h20cWarmFile(t *testing.T, cfg Config, size int) (*Engine, *File, []byte, *h20cGate) {
	t.Helper()
	g := newH20cGate()
	e := formatOpenWith(t, emuDevice(t, 16, "4M", ""), cfg, func(dev zns.Device) zns.Device {
		g.Device = dev
		return g
	})
	t.Cleanup(func() { e.Close() })
	f := mustCreate(t, e, "a")
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*7+i>>12) | 1
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	e.cache.EvictClean(1 << 40)
	if st := e.Stats().Cache; st.CachedBytes != 0 {
		t.Fatalf("setup: %d bytes still cached after evicting", st.CachedBytes)
	}
	return e, f, data, g
}

// TestH20cPrefetchAcrossRemoveLeavesRemovedFileCached: a readahead
// window whose device read is in flight when its file is removed comes
// back to the cache after Remove's cache.Forget, and its run loop makes
// the removed file's cache state anew (fileOrNew) with a folio in it,
// before ReadBacking says the file is gone. Nothing ever Forgets that
// state again: the file id's fileState stays in the index for the life
// of the cache and its folio holds arena memory for a file that no
// longer exists (cache memory leaked until eviction, index state
// forever). After the remove and the window's end, the cache should
// hold nothing.
func TestH20cPrefetchAcrossRemoveLeavesRemovedFileCached(t *testing.T) {
	const K = 1 << 10
	cfg := smallConfig()
	cfg.CacheBytes = 64 << 20
	e, f, _, g := h20cWarmFile(t, cfg, 2<<20)
	g.arm(nil)
	// The reader's first read at 0 asks for the window past it; the
	// worker's Prefetch blocks in its device read.
	f.readAhead(0, 128*K, 2<<20)
	h20cWait(t, g.entered, "the readahead window's device read")
	if err := closeAndRemove(e, f); err != nil { // the last close drops it
		t.Fatal(err)
	}
	close(g.release)
	raIdle(t, f)
	st := e.Stats().Cache
	var folios int64
	for _, n := range st.Folios {
		folios += n
	}
	if st.CachedBytes != 0 || folios != 0 {
		t.Fatalf("after the only file was removed and its readahead window ended, the cache holds %d bytes in %d folios (the removed file's state made anew by the window)", st.CachedBytes, folios)
	}
}

// TestWriteAcrossRemoveLeavesNothingCached: a write whose piece enters
// the cache after its file's Remove (and cache.Forget) made the removed
// file's cache state anew with dirty blocks in it: writeback then wrote
// them to a zone for nobody, and the state stayed in the cache's index
// for good. The write now fails with fs.ErrNotExist (the file was
// removed, as its handle's next operation would say) and the cache holds
// nothing of the file.
func TestWriteAcrossRemoveLeavesNothingCached(t *testing.T) {
	e := formatOpen(t, emuDevice(t, 16, "4M", ""), smallConfig())
	t.Cleanup(func() { e.Close() })
	f := mustCreate(t, e, "a")
	var once sync.Once
	removed := make(chan error, 1)
	// The hook runs once the piece is admitted, before its bytes enter
	// the cache: the remove comes between the handle's check and the
	// cache's write.
	testHookWritePiece = func(e *Engine) {
		once.Do(func() { removed <- closeAndRemove(e, f) }) // the last close drops it
	}
	t.Cleanup(func() { testHookWritePiece = nil })
	data := bytes.Repeat([]byte("after rm"), 8192)
	_, err := f.WriteAt(data, 0)
	if rerr := <-removed; rerr != nil {
		t.Fatalf("remove: %v", rerr)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("write across the file's remove: %v, want fs.ErrNotExist", err)
	}
	st := e.Stats().Cache
	if st.CachedBytes != 0 || st.DirtyBytes != 0 {
		t.Fatalf("after the only file was removed during a write, the cache holds %d bytes, %d dirty (the removed file's state made anew)", st.CachedBytes, st.DirtyBytes)
	}
}

// shortReadDevice, once armed, reads only the first half of each read
// (whole blocks; nothing of a one-block read) and reports that, with no
// error: a short transfer.
type shortReadDevice struct {
	zns.Device
	armed atomic.Bool
}

func (d *shortReadDevice) Read(off int64, buf []byte, c uring.Completion) error {
	if d.armed.Load() {
		half := len(buf) / 2 &^ (BlockSize - 1)
		if half == 0 {
			c.Complete(uring.Result{})
			return nil
		}
		buf = buf[:half]
	}
	return d.Device.Read(off, buf, c)
}

// TestShortDeviceReadIsAnError: a device read that transfers less than
// asked without an error left the rest of the buffer as it was (arena
// memory: an earlier file's bytes), which, with verification off, a
// client read as the file's (with it on, the checksums caught it as
// corruption). A short read is a device error either way.
func TestShortDeviceReadIsAnError(t *testing.T) {
	for _, verify := range []bool{true, false} {
		t.Run(map[bool]string{true: "verify", false: "no-verify"}[verify], func(t *testing.T) {
			cfg := smallConfig()
			cfg.NoReadVerify = !verify
			d := &shortReadDevice{}
			e := formatOpenWith(t, emuDevice(t, 16, "4M", ""), cfg, func(dev zns.Device) zns.Device {
				d.Device = dev
				return d
			})
			t.Cleanup(func() { e.Close() })
			f := mustCreate(t, e, "a")
			if _, err := f.WriteAt(bytes.Repeat([]byte("zonefold"), 8192), 0); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			e.cache.EvictClean(1 << 40)
			d.armed.Store(true)
			p := make([]byte, 64<<10)
			n, err := f.ReadAt(p, 0)
			d.armed.Store(false)
			if err == nil || errors.Is(err, ErrChecksum) {
				t.Fatalf("read of %d bytes over short device reads: %v, want a device read error", n, err)
			}
		})
	}
}
