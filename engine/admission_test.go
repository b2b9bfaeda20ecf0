package engine

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// fillTinyFiles has workers goroutines create 1-byte files on e until a
// create or write fails (with ENOSPC: anything else fails the test),
// fsyncing each at once when syncEach; it returns the files accepted, and
// how many of them (without syncEach) then failed their fsync.
func fillTinyFiles(t *testing.T, e *Engine, workers int, syncEach bool) (accepted []*File, syncFailed int) {
	t.Helper()
	var (
		mu   sync.Mutex
		next atomic.Int64
		full atomic.Bool
		wg   sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for !full.Load() {
				i := next.Add(1)
				if i > 20000 {
					return
				}
				f, err := e.Create(fmt.Sprintf("f%05d", i))
				if err == nil {
					if _, err = f.WriteAt([]byte{byte(i)}, 0); err == nil && syncEach {
						err = f.Sync()
					}
				}
				if err != nil {
					if !errors.Is(err, syscall.ENOSPC) {
						t.Errorf("file %d: %v, want nil or ENOSPC", i, err)
					}
					full.Store(true)
					return
				}
				mu.Lock()
				accepted = append(accepted, f)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if !full.Load() {
		t.Fatal("the device never filled")
	}
	if !syncEach {
		for _, f := range accepted {
			if err := f.Sync(); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("sync %s: %v, want nil or ENOSPC", f.Name(), err)
				}
				syncFailed++
			}
		}
	}
	return accepted, syncFailed
}

// TestAdmissionCountsRecordHeaders writes 1-byte files without fsync on a
// 12 x 1 MiB device until a write is refused, then fsyncs them all. Every
// write accepted must be one its fsync can make durable (a kernel file
// system with delayed allocation reserves the space at write time and
// returns ENOSPC from write, not from fsync): each such file takes a data
// block and its record's header block, and admission must count both,
// also when writers race for the last room. And admission must not refuse
// early: the device takes nearly as many files as when each is fsynced as
// it is written. (Before admission counted a header block per dirty file,
// about twice the device's worth was accepted and the excess, 873 of 1897
// files, failed at fsync.)
func TestAdmissionCountsRecordHeaders(t *testing.T) {
	cfg := Config{CacheBytes: 32 << 20, DirtyLimit: 16 << 20}
	capacity := func() int {
		e := formatOpen(t, memDevice(t, 12, "1M"), cfg)
		defer e.Close()
		accepted, _ := fillTinyFiles(t, e, 1, true)
		return len(accepted)
	}()
	for _, workers := range []int{1, 8} {
		t.Run(fmt.Sprintf("%d-writers", workers), func(t *testing.T) {
			e := formatOpen(t, memDevice(t, 12, "1M"), cfg)
			defer e.Close()
			accepted, failed := fillTinyFiles(t, e, workers, false)
			t.Logf("fsync after each write: %d files; buffered: %d accepted, %d failed at fsync", capacity, len(accepted), failed)
			if failed > 0 {
				t.Errorf("%d of %d accepted 1-byte writes failed at fsync with ENOSPC, want 0", failed, len(accepted))
			}
			if len(accepted) < capacity*9/10 {
				t.Errorf("buffered writes accepted %d files, want at least 90%% of the %d that fit when each is fsynced", len(accepted), capacity)
			}
		})
	}
}

// TestAdmissionAfterRemovals: once a device full of small files has lost
// every other one, the room they took is written again: at least half as
// many new files are accepted as were removed (GC copies the survivors of
// half empty zones, headers included), and every one accepted survives
// its fsync. Before admission held back pad blocks only for the zones that
// can be open, it held one back for each of a budget of 16 on a device of
// 10 data zones: the fill stopped with each open zone a record short of
// full, and afterwards no write was accepted at all — the zones never
// filled, and GC, which collects full zones, could reclaim nothing.
func TestAdmissionAfterRemovals(t *testing.T) {
	cfg := Config{CacheBytes: 32 << 20, DirtyLimit: 16 << 20}
	e := formatOpen(t, memDevice(t, 12, "1M"), cfg)
	defer e.Close()
	first, failed := fillTinyFiles(t, e, 1, false)
	if failed > 0 {
		t.Fatalf("%d of %d writes failed at fsync", failed, len(first))
	}
	removed := 0
	for i, f := range first {
		if i%2 == 0 {
			if err := e.Remove(f.Name()); err != nil {
				t.Fatal(err)
			}
			removed++
		}
	}
	var again []*File
	for i := 0; ; i++ {
		f, err := e.Create(fmt.Sprintf("g%05d", i))
		if err == nil {
			_, err = f.WriteAt([]byte{1}, 0)
		}
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
		again = append(again, f)
	}
	for _, f := range again {
		if err := f.Sync(); err != nil {
			t.Fatalf("sync %s: %v: a write accepted after the removals did not fit", f.Name(), err)
		}
	}
	t.Logf("%d files, %d removed, %d written again", len(first), removed, len(again))
	// 390 to 510 here, as background GC runs; 0 before the fix. Zones
	// still open when the fill stopped keep their garbage until they
	// fill, so not all of it comes back at once.
	if len(again) < removed/2 {
		t.Fatalf("%d files written after removing %d: the freed room was not reused", len(again), removed)
	}
}
