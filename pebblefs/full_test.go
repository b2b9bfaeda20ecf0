package pebblefs

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/zonefold/zonefold/engine"
)

// TestFullDeviceRefusesEveryWriterThenTakesRemovedRoom: bench lsm's
// shape on a small device (zones holding several writers' appends, a
// few open at once): tables and a WAL written at once until the device
// is full of their live bytes. Every writer returns, each with ENOSPC as
// a PathError naming its file (a hang here is the test's timeout; any
// other error fails it): Pebble must get the error, not wait for room
// nothing will free. Then a table is removed, as Pebble removes a
// compaction's inputs, and the WAL's next writes and sync succeed: its
// writer has GC reclaim the removed table's zones instead of failing.
// Each refusal is told to OnNoSpace's function, which bench lsm ends
// its run on.
func TestFullDeviceRefusesEveryWriterThenTakesRemovedRoom(t *testing.T) {
	dev := fmt.Sprintf("emu:%s?zone_size=1M&zones=24&max_open=6&max_active=6", filepath.Join(t.TempDir(), "dev"))
	e := formatOpen(t, dev, 0, engine.Config{CacheBytes: 8 << 20, DirtyLimit: 1 << 20})
	defer e.Close()
	y := New(e)
	var told atomic.Int64
	y.OnNoSpace(func(err error) {
		if errors.Is(err, syscall.ENOSPC) {
			told.Add(1)
		}
	})
	names := []string{"000001.sst", "000002.sst", "000003.sst", "000004.log"}
	files := make([]vfs.File, len(names))
	for i, name := range names {
		f, err := y.Create(name, vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		files[i] = f
	}
	written := make([]int64, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, f := range files {
		wg.Go(func() {
			buf := make([]byte, 32<<10)
			for n := 0; ; n++ {
				buf[0] = byte(n)
				if _, errs[i] = f.Write(buf); errs[i] != nil {
					return
				}
				written[i] += int64(len(buf))
				if n%8 == 7 {
					if errs[i] = f.Sync(); errs[i] != nil {
						return
					}
				}
			}
		})
	}
	wg.Wait()
	var total int64
	for i, err := range errs {
		var pe *fs.PathError
		if !errors.Is(err, syscall.ENOSPC) || !errors.As(err, &pe) || pe.Path != names[i] {
			t.Fatalf("%s, written until the device was full: %v, want a PathError on it wrapping ENOSPC", names[i], err)
		}
		total += written[i]
	}
	if n := told.Load(); n != int64(len(names)) {
		t.Fatalf("OnNoSpace's function was told of %d ENOSPC failures, want %d (one a writer)", n, len(names))
	}
	if c := e.Capacity(); total < c*3/4 {
		t.Fatalf("writers refused after %d bytes of a capacity of %d", total, c)
	}
	t.Logf("refused after %v bytes (capacity %d)", written, e.Capacity())

	// The largest table goes, as a compaction's input does.
	big := 0
	for i := range 3 {
		if written[i] > written[big] {
			big = i
		}
	}
	if err := files[big].Close(); err != nil && !errors.Is(err, syscall.ENOSPC) {
		t.Fatal(err)
	}
	if err := y.Remove(names[big]); err != nil {
		t.Fatal(err)
	}
	wal := files[3]
	buf := make([]byte, 32<<10)
	for n := int64(0); n < written[big]/2; n += int64(len(buf)) {
		if _, err := wal.Write(buf); err != nil {
			t.Fatalf("WAL write %d KiB after %s (%d bytes) was removed: %v", n>>10, names[big], written[big], err)
		}
	}
	if err := wal.Sync(); err != nil {
		t.Fatalf("WAL sync after %s was removed: %v", names[big], err)
	}
}
