package engine

import (
	"bytes"
	"errors"
	"fmt"
	"syscall"
	"testing"
)

// TestFullDeviceFsyncDoesNotRescanBarrenZones fills a device with small
// files, each synced, that are never overwritten (what fio's
// --nrfiles=1500 --filesize=4k --fsync_on_close=1 did through the daemon),
// until a sync fails with ENOSPC; then syncs the failed file again and
// again. Nothing changes on the device between those syncs, so once GC has
// found that no zone gains space by collecting, it must not read the zones
// again for every sync: each such sync read up to eight zones (two passes
// of four candidates), and through the daemon fio's closes of the files
// that did not fit took ~0.2 s each, past fio's timeout: the "hang". A
// zone is walked at most once while its valid bytes stay the same, so the
// passes after the first failure add at most one GC run per zone.
func TestFullDeviceFsyncDoesNotRescanBarrenZones(t *testing.T) {
	devName := emuDevice(t, 12, "256K", "")
	e := formatOpen(t, devName, Config{CacheBytes: 8 << 20, DirtyLimit: 4 << 20})
	defer e.Close()
	// Write them all first and sync each after, as fio closes them: the
	// cache takes more than the device fits (admission counts data, not
	// the header each file's record takes).
	var handles []*File
	for i := 0; i < 2000; i++ {
		f, err := e.Create(fmt.Sprintf("f%04d", i))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(bytes.Repeat([]byte{byte(i), 0x5a}, 2048), 0); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("write f%04d: %v, want nil or ENOSPC", i, err)
			}
			break
		}
		handles = append(handles, f)
	}
	var failed *File
	for i, f := range handles {
		if err := f.Sync(); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("sync f%04d: %v, want nil or ENOSPC", i, err)
			}
			failed = f
			break
		}
	}
	if failed == nil {
		t.Fatalf("all %d files written synced: the device did not fill", len(handles))
	}
	before := e.Stats().GCRuns
	const syncs = 50
	for i := 0; i < syncs; i++ {
		if err := failed.Sync(); !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("sync %d of the file that did not fit: %v, want ENOSPC", i, err)
		}
	}
	runs := e.Stats().GCRuns - before
	t.Logf("%d GC runs over %d failing syncs", runs, syncs)
	if zones := int64(len(e.placer.zones)); runs > zones {
		t.Fatalf("%d GC runs over %d failing syncs on an unchanged device of %d zones: GC walks zones it already found barren",
			runs, syncs, zones)
	}
}
