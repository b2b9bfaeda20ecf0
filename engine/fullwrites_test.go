package engine

import (
	"bytes"
	"errors"
	"fmt"
	"syscall"
	"testing"
)

// TestFullDeviceNeverAcknowledgesLostWrites fills a device with many
// small files written without fsync, so that the cache accepts more than
// writeback may fit, then fsyncs each. A write or an fsync may fail (with
// ENOSPC); whatever an fsync acknowledged must survive a power cut. After
// removing files, the files whose fsync failed sync and survive too.
// (Admission counts the header block each dirty file's record takes, so
// the writes accepted fit; TestAdmissionCountsRecordHeaders checks that
// none fails at fsync. Should one, its data stays dirty until it fits.)
func TestFullDeviceNeverAcknowledgesLostWrites(t *testing.T) {
	for _, size := range []int{1, 5000, 70000} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			devName := emuDevice(t, 12, "256K", "")
			cfg := Config{CacheBytes: 8 << 20, DirtyLimit: 4 << 20}
			e := formatOpen(t, devName, cfg)
			content := func(i int) []byte { return bytes.Repeat([]byte{byte(i), byte(i >> 8), 0x5a}, size/3+1)[:size] }
			name := func(i int) string { return fmt.Sprintf("f%04d", i) }
			var handles []*File
			var writeErr error
			for i := 0; i < 4000; i++ {
				f, err := e.Create(name(i))
				if err != nil {
					writeErr = err
					break
				}
				if _, err := f.WriteAt(content(i), 0); err != nil {
					writeErr = err
					break
				}
				handles = append(handles, f)
			}
			if writeErr != nil && !errors.Is(writeErr, syscall.ENOSPC) {
				t.Fatalf("write: %v, want nil or ENOSPC", writeErr)
			}
			var synced, failed []int
			for i, f := range handles {
				if err := f.Sync(); err != nil {
					if !errors.Is(err, syscall.ENOSPC) {
						t.Fatalf("sync %s: %v, want nil or ENOSPC", name(i), err)
					}
					failed = append(failed, i)
					continue
				}
				synced = append(synced, i)
			}
			t.Logf("%d files written (ended with ENOSPC: %v); %d synced, %d failed to sync", len(handles), writeErr != nil, len(synced), len(failed))
			if len(failed) > 0 {
				// Remove all but one in 64 of the synced files: the
				// failed ones, fewer than those synced, then fit
				// (their data blocks and record headers as the synced
				// ones' did), once GC has reclaimed the space.
				if len(failed) > len(synced)-len(synced)/64-1-8 {
					t.Fatalf("%d files failed to sync, %d synced: the accepted writes could never fit", len(failed), len(synced))
				}
				var keep []int
				for k, i := range synced {
					if k%64 != 0 {
						if err := e.Remove(name(i)); err != nil {
							t.Fatal(err)
						}
						continue
					}
					keep = append(keep, i)
				}
				removed := len(synced) - len(keep)
				synced = keep
				for _, i := range failed {
					// The first may report, once, a failure of a
					// background writeback since the last fsync (as
					// Linux's errseq does); the data is dirty still,
					// and this fsync writes it.
					err := handles[i].Sync()
					if err != nil {
						if !errors.Is(err, syscall.ENOSPC) {
							t.Fatalf("sync %s after removing files: %v, want nil or ENOSPC", name(i), err)
						}
						err = handles[i].Sync()
					}
					if err != nil {
						st := e.Stats()
						t.Fatalf("sync %s after removing %d files: %v; free zones %d, data zones %d, gc runs %d resets %d relocated %d, dirty %d",
							name(i), removed, err, st.FreeZones, st.DataZones, st.GCRuns, st.GCResets, st.GCWritten, e.cache.DirtyBytes())
					}
					synced = append(synced, i)
				}
			}
			e = powerCutReopen(t, e, devName, cfg)
			defer e.Close()
			for _, i := range synced {
				if got := readAll(t, e, name(i)); !bytes.Equal(got, content(i)) {
					t.Fatalf("%s: %d bytes after a power cut, want the %d its fsync acknowledged", name(i), len(got), size)
				}
			}
		})
	}
}
