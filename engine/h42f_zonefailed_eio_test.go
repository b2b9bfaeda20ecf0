package engine

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/zonefold/zonefold/zns"
)

// zoneFailedAppends is a device that refuses appends as the block and
// NVMe backends refuse the appends queued behind (or sent after) a write
// the device failed: with zns.ErrZoneFailed. While armed every append
// fails so, and its zone stays failed, refusing every later append,
// armed or not, until the zone is finished or reset (as zns.Block's
// blkZone.failed does). On a device with bad blocks most of the failed
// appends are those: the one that touched a bad block is the device's
// EIO, the ones queued behind it in its zone the backend's
// ErrZoneFailed.
type zoneFailedAppends struct {
	zns.Device
	armed   atomic.Bool
	refused atomic.Int64
	mu      sync.Mutex
	failed  map[int]bool
}

func (d *zoneFailedAppends) Append(zone int, bufs [][]byte, c zns.AppendCompletion) error {
	d.mu.Lock()
	fail := d.armed.Load() || d.failed[zone]
	if fail {
		d.failed[zone] = true
	}
	d.mu.Unlock()
	if fail {
		d.refused.Add(1)
		return fmt.Errorf("zns: append to zone %d queued behind a failed write: %w", zone, zns.ErrZoneFailed)
	}
	return d.Device.Append(zone, bufs, c)
}

func (d *zoneFailedAppends) heal(zone int) {
	d.mu.Lock()
	delete(d.failed, zone)
	d.mu.Unlock()
}

func (d *zoneFailedAppends) FinishZone(zone int) error {
	err := d.Device.FinishZone(zone)
	if err == nil {
		d.heal(zone)
	}
	return err
}

func (d *zoneFailedAppends) ResetZone(zone int) error {
	err := d.Device.ResetZone(zone)
	if err == nil {
		d.heal(zone)
	}
	return err
}

func (d *zoneFailedAppends) ResetAll() error {
	err := d.Device.ResetAll()
	if err == nil {
		d.mu.Lock()
		clear(d.failed)
		d.mu.Unlock()
	}
	return err
}

// A writer the dirty limit throttles while writeback keeps failing is
// refused with the latest writeback error (cache.stuckSince). When that
// error is an append the backend refused because an earlier write to its
// zone failed (zns.ErrZoneFailed), the writer must still be told an I/O
// error: errors.Is(err, syscall.EIO), as every other device write
// failure is, and as the daemon's clients are told (server.statusOf
// maps it to StatusIO). Before, ErrZoneFailed did not wrap EIO, and
// TestH39dBadBlocks/load on null_blk with bad blocks saw a writer's
// WriteAt fail with "writeback keeps failing: zns: append to zone N
// queued behind a failed write: ..." that errors.Is(EIO) denied.
func TestThrottledWriterOnFailedZonesGetsEIO(t *testing.T) {
	if !errors.Is(zns.ErrZoneFailed, syscall.EIO) {
		t.Errorf("errors.Is(zns.ErrZoneFailed, syscall.EIO) = false: a write refused behind a failed one is not an I/O error")
	}
	dev := &zoneFailedAppends{failed: map[int]bool{}}
	e := formatOpenThrough(t, emuDevice(t, 64, "1M", ""), Config{CacheBytes: 4 << 20, DirtyLimit: 1 << 20}, func(emu *zns.Emu) zns.Device {
		dev.Device = emu
		return dev
	})
	defer e.Close()
	f := mustCreate(t, e, "a")
	dev.armed.Store(true)
	chunk := bytes.Repeat([]byte{5}, 64<<10)
	var err error
	// Hang guard only: the writer is refused once writeback has failed
	// stuckFailures times over a second.
	guard := time.Now().Add(2 * time.Minute)
	for off := int64(0); err == nil; off = (off + int64(len(chunk))) % (2 << 20) {
		if time.Now().After(guard) {
			t.Fatalf("the writer was not refused within two minutes of failing writeback (%d appends refused)", dev.refused.Load())
		}
		_, err = f.WriteAt(chunk, off)
	}
	if dev.refused.Load() == 0 {
		t.Fatalf("set-up: the write failed (%v) with no append refused", err)
	}
	t.Logf("refused after %d failed appends: %v", dev.refused.Load(), err)
	if !errors.Is(err, zns.ErrZoneFailed) {
		t.Fatalf("set-up: the writer was refused with %v, not the appends' error", err)
	}
	wantDeviceError(t, "a throttled writer while appends fail with ErrZoneFailed", err)
	dev.armed.Store(false)
	atHeal := dev.refused.Load()
	// The device works again; the zones the appends failed in stay
	// failed until finished or reset. The engine retired each at its
	// first failure and writes elsewhere: the data stayed dirty and is
	// written back. The first fsync may report the failed writeback its
	// handle has not seen yet; the next, and every write and fsync
	// after it, succeed.
	if err := f.Sync(); err != nil {
		t.Logf("first fsync after the device works again: %v", err)
	}
	want := make([]byte, 2<<20)
	for i := range 2 << 20 / len(chunk) {
		c := bytes.Repeat([]byte{byte(10 + i)}, len(chunk))
		copy(want[i*len(chunk):], c)
		if _, err := f.WriteAt(c, int64(i*len(chunk))); err != nil {
			t.Fatalf("write %d with the device working again: %v", i, err)
		}
		if err := f.Sync(); err != nil {
			t.Fatalf("fsync %d with the device working again: %v", i, err)
		}
	}
	t.Logf("%d appends refused in zones that failed before the device healed", dev.refused.Load()-atHeal)
	if got := readAll(t, e, "a"); !bytes.Equal(got[:len(want)], want) {
		t.Fatal("the data written and fsynced with the device working again reads back otherwise")
	}
}
