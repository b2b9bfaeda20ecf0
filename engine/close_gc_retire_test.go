package engine

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// heldAppend is a device whose next Append, once armed, is held at its
// submission until released, and then fails on the device (EIO at
// completion), as an append the device refuses.
type heldAppend struct {
	zns.Device
	emu     *zns.Emu
	armed   atomic.Bool
	held    chan struct{} // an armed append is held
	release chan struct{} // lets it go on, to fail
}

func (d *heldAppend) Append(zone int, bufs [][]byte, c zns.AppendCompletion) error {
	if d.armed.CompareAndSwap(true, false) {
		d.held <- struct{}{}
		<-d.release
		d.emu.FailWrite(1)
	}
	return d.Device.Append(zone, bufs, c)
}

// TestCloseEndsAGCPassWhoseAppendFailsAfterTheCancel: the background
// collector's pass is relocating when Close cancels the background work,
// and its append then fails: the zone is retired, and the pass, which
// Close waits for, reserves again on a device whose active zones are all
// taken, so it waits for the retired zone to drain — which the retirer
// ends by finishing it. The retirer stopped with the cancel, so the pass
// waited until Close gave up on it (closeAbandonWait), skipped the device
// flush and the checkpoint and returned an error on a device that works.
func TestCloseEndsAGCPassWhoseAppendFailsAfterTheCancel(t *testing.T) {
	devName := emuDevice(t, 32, "256K", "&max_open=5&max_active=5")
	held := &heldAppend{held: make(chan struct{}), release: make(chan struct{})}
	cfg := smallConfig()
	// The collector runs whenever it has a victim: it starts below as
	// many free zones as there are data zones (any zone written), and
	// its high watermark, left to fill, is above them (it never stops
	// for having freed enough). It used to be set to 32, the device's
	// zones, above its data zones: the engine refuses that now
	// (ConfigError), as a watermark that can never be met.
	cfg.GC.Low = 32 - MetaZones(zns.Geometry{Zones: 32, ZoneSize: 256 << 10, ZoneCap: 256 << 10})
	e := formatOpenThrough(t, devName, cfg, func(emu *zns.Emu) zns.Device {
		held.Device, held.emu = emu, emu
		return held
	})
	// No pass until the set-up is done (the writes need none).
	e.gc.mu.Lock()
	// Two files written in turn share no zone, and an overwrite of every
	// other 16 KiB of each leaves their zones half valid: GC victims
	// whose live half must be copied.
	var files [5]*File
	for i := range files {
		files[i] = mustCreate(t, e, string(rune('a'+i)))
	}
	const size, chunk = 2 << 20, 64 << 10
	for off := int64(0); off < size; off += chunk {
		for i, f := range files[:2] {
			if _, err := f.WriteAt(bytes.Repeat([]byte{byte(1 + i)}, chunk), off); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, f := range files {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range files[:2] {
		for off := int64(0); off < size; off += 32 << 10 {
			if _, err := f.WriteAt(bytes.Repeat([]byte{9}, 16<<10), off); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	// Three more files' zones: every open zone placement may have is
	// taken.
	for _, f := range files[2:] {
		if _, err := f.WriteAt(bytes.Repeat([]byte{3}, chunk), 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if open, most := e.Stats().OpenZones, e.placer.budget; open != most {
		t.Fatalf("set-up: %d zones open, want the data budget's %d", open, most)
	}

	cancelled := make(chan struct{})
	cancel := e.cancel
	var once sync.Once
	e.cancel = func() {
		cancel()
		once.Do(func() { close(cancelled) })
	}

	held.armed.Store(true)
	e.gc.mu.Unlock()
	e.kickGC()
	within(t, held.held, "the background GC pass's first append")
	closed := make(chan error, 1)
	go func() { closed <- e.Close() }()
	within(t, cancelled, "Close's cancel of the background work")
	close(held.release)
	if err := within(t, closed, "Close"); err != nil {
		t.Fatalf("Close with a GC append failed after its cancel, on a device that works: %v", err)
	}
	if st := e.Stats(); st.AppendErrs != 1 || st.GCVictimsFailed != 1 {
		t.Fatalf("set-up: %d failed appends, %d failed GC victims; want the one GC append", st.AppendErrs, st.GCVictimsFailed)
	}
	checkFsck(t, devName)
	e = reopen(t, devName, smallConfig())
	defer e.Close()
	for i, name := range []string{"a", "b"} {
		want := bytes.Repeat([]byte{byte(1 + i)}, size)
		for off := 0; off < size; off += 32 << 10 {
			copy(want[off:off+16<<10], bytes.Repeat([]byte{9}, 16<<10))
		}
		if got := readAll(t, e, name); !bytes.Equal(got, want) {
			t.Fatalf("%s differs after Close and reopen", name)
		}
	}
}
