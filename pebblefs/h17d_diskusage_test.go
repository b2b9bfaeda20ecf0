package pebblefs

import (
	"errors"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// GetDiskUsage's AvailBytes is "disk space available to the current
// process" (vfs.DiskUsage; statfs's f_bavail on vfs.Default). Pebble's
// compaction picker caps a compaction's expanded inputs at half of it.
// Once the device refuses a small write with ENOSPC, it should say
// (about) nothing is available, not the zones GC keeps for itself and
// the room ReserveFor keeps for the WAL.
func TestH17DDiskUsageAvailWhenFull(t *testing.T) {
	for _, reserve := range []bool{false, true} {
		e := formatOpen(t, emuDevice(t, 16, "1M"), 0, testConfig())
		y := New(e)
		if reserve {
			y.ReserveFor(&pebble.Options{MemTableSize: 64 << 10})
		}
		f, err := y.Create("t.sst", "pebble-compaction")
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 32<<10)
		var written int64
		for {
			n, err := f.Write(buf)
			written += int64(n)
			if err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatal(err)
				}
				break
			}
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		du, err := y.GetDiskUsage("")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("reserve %v: a 32 KiB write refused (ENOSPC) after %d bytes; GetDiskUsage = %+v", reserve, written, du)
		if du.AvailBytes > 256<<10 {
			t.Errorf("reserve %v: the device refuses a 32 KiB table write, yet GetDiskUsage says %d bytes (%.0f%% of %d) are available", reserve, du.AvailBytes, 100*float64(du.AvailBytes)/float64(du.TotalBytes), du.TotalBytes)
		}
		f.Close()
		e.Close()
	}
	_ = vfs.DiskUsage{}
}
