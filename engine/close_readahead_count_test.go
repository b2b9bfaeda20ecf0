package engine

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zonefold/zonefold/uring"
	"github.com/zonefold/zonefold/zns"
)

// stuckReads is a device whose reads, once armed, all wait until the
// test releases them: a device that stopped answering reads.
type stuckReads struct {
	zns.Device
	armed   atomic.Bool
	pass    atomic.Int32 // reads that pass once armed, before the rest stick
	entered atomic.Int32
	release chan struct{}
	once    sync.Once
}

func (d *stuckReads) Read(off int64, buf []byte, c uring.Completion) error {
	if d.armed.Load() && d.pass.Add(-1) < 0 {
		d.entered.Add(1)
		<-d.release
	}
	return d.Device.Read(off, buf, c)
}

func (d *stuckReads) unstick() { d.once.Do(func() { close(d.release) }) }

// TestCloseCountsReadaheadWindowsApart: a client's read stuck in a device
// that stopped answering, with its handle's readahead windows stuck
// behind it, is one client operation; Close's error said "4 operations
// still running", counting every window as one, which sent the reader
// of a daemon's exit line looking for requests nobody made.
func TestCloseCountsReadaheadWindowsApart(t *testing.T) {
	dev := &stuckReads{release: make(chan struct{})}
	e := formatOpenWith(t, emuDevice(t, 16, "4M", ""), smallConfig(), func(d zns.Device) zns.Device {
		dev.Device = d
		return dev
	})
	t.Cleanup(dev.unstick)
	f := createSynced(t, e, "a", make([]byte, 4<<20))
	// The first read goes to the device and asks for the window past it;
	// the device answers it and sticks from then on: the window and the
	// next read wait there.
	e.cache.EvictClean(1 << 40)
	dev.pass.Store(1)
	dev.armed.Store(true)
	go func() {
		buf := make([]byte, 64<<10)
		for off := int64(0); off < 1<<20; off += int64(len(buf)) {
			if _, err := f.ReadAt(buf, off); err != nil {
				return
			}
		}
	}()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		if e.raActive.Load() > 0 && e.active.Load()&activeCount > e.raActive.Load() {
			break // a window and the client's read are both running
		}
		if time.Now().After(deadline) {
			t.Fatalf("set-up: no client read and readahead window stuck together after 30 s (%d reads entered, %d windows)", dev.entered.Load(), e.raActive.Load())
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := e.CloseContext(ctx)
	dev.unstick()
	if err == nil {
		t.Fatal("Close returned nil with a read stuck in the device")
	}
	msg := err.Error()
	if !strings.Contains(msg, "stopped waiting for 1 operation and ") || !strings.Contains(msg, "readahead window") {
		t.Errorf("Close: %q; want it to count the one client read and the readahead windows apart", msg)
	}
	// The operations given up still use the cache's memory: they end
	// before the test releases it (a daemon leaves that to its exit).
	e.waitUntil(func() bool { return e.active.Load()&activeCount == 0 })
	e.releaseAbandoned()
}
