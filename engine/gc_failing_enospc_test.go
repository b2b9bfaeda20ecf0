package engine

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
)

// TestWriteOnAFullDeviceWhoseVictimsFailSaysEIOEveryTime: a full device
// whose every zone worth collecting fails its reads (media damage). The
// first write that needs room gets EIO: its pass failed every victim.
// The next one, within victimRetryWait, found those victims left out of
// pick (failedLately), collected nothing and reported ENOSPC, "no zone's
// reclaim frees ..." — a device of garbage called full, though what keeps
// the write out is the failing device, which the client must see.
func TestWriteOnAFullDeviceWhoseVictimsFailSaysEIOEveryTime(t *testing.T) {
	cfg := Config{CacheBytes: 2 << 20, DirtyLimit: 1 << 20}
	cfg.GC.Disabled = true
	e, bz := openBadZones(t, cfg)
	defer e.Close()
	const size = 100000
	names := fillWithFiles(t, e, size)
	removeOneFromZones(t, e, names, 8)
	bad := 0
	bz.mu.Lock()
	for _, z := range e.placer.zones {
		if z.state.Load() == zoneFull && z.cap-z.valid.Load() >= e.admitGain() {
			bz.bad[z.idx] = true
			bad++
		}
	}
	bz.mu.Unlock()
	if bad == 0 || e.roomFor(writeCharge(0, size)) {
		t.Fatalf("set-up: %d zones worth collecting, room for the write %v", bad, e.roomFor(writeCharge(0, size)))
	}
	for i, name := range []string{"late1", "late2", "late3"} {
		f := mustCreate(t, e, name)
		_, err := f.WriteAt(bytes.Repeat([]byte{0xa5}, size), 0)
		if err == nil {
			err = f.Sync()
		}
		if err == nil {
			t.Fatalf("write %d: succeeded on a full device whose %d reclaimable zones all fail reads", i+1, bad)
		}
		if errors.Is(err, ErrNoSpace) || !errors.Is(err, syscall.EIO) {
			t.Fatalf("write %d: %v; want the device's EIO (every victim failed), not ENOSPC", i+1, err)
		}
	}
}
