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
// until a write fails with ENOSPC; then writes the file that did not fit
// again and again. Nothing changes on the device between those writes, so
// once GC has found that no zone gains space by collecting, it must not
// read the zones again for every write: each such attempt read up to
// eight zones (two passes of four candidates), and through the daemon
// fio's closes of the files that did not fit (their fsyncs, when
// admission still let in more than fit) took ~0.2 s each, past fio's
// timeout: the "hang". A zone is walked at most once while its valid
// bytes stay the same, so the attempts after the first failure add at
// most one GC run per zone.
func TestFullDeviceFsyncDoesNotRescanBarrenZones(t *testing.T) {
	devName := emuDevice(t, 12, "256K", "")
	e := formatOpen(t, devName, Config{CacheBytes: 8 << 20, DirtyLimit: 4 << 20})
	defer e.Close()
	// Write them all first and sync each after, as fio closes them.
	var handles []*File
	var failed *File
	data := func(i int) []byte { return bytes.Repeat([]byte{byte(i), 0x5a}, 2048) }
	for i := 0; i < 2000; i++ {
		f, err := e.Create(fmt.Sprintf("f%04d", i))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(data(i), 0); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("write f%04d: %v, want nil or ENOSPC", i, err)
			}
			failed = f
			break
		}
		handles = append(handles, f)
	}
	if failed == nil {
		t.Fatalf("all %d files written: the device did not fill", len(handles))
	}
	for i, f := range handles {
		if err := f.Sync(); err != nil {
			t.Fatalf("sync f%04d: %v: a write accepted failed its fsync", i, err)
		}
	}
	before := e.Stats().GCRuns
	const attempts = 50
	for i := 0; i < attempts; i++ {
		if _, err := failed.WriteAt(data(i), 0); !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("write %d of the file that did not fit: %v, want ENOSPC", i, err)
		}
	}
	runs := e.Stats().GCRuns - before
	t.Logf("%d GC runs over %d failing writes", runs, attempts)
	if zones := int64(len(e.placer.zones)); runs > zones {
		t.Fatalf("%d GC runs over %d failing writes on an unchanged device of %d zones: GC walks zones it already found barren",
			runs, attempts, zones)
	}
}
