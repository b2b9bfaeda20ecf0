package engine

import (
	"bytes"
	"testing"

	"golang.org/x/sys/unix"
)

// TestFailedOverwriteKeepsFsyncedBytes: a file's bytes are fsynced, then
// an overwrite of part of them is written back and the host file under
// the emu device refuses the record past its header block (its file
// system full: here RLIMIT_FSIZE, a short write, EIO). The header
// landed, its data did not; the write's fsync fails, so the overwrite
// was never acknowledged. A later successful device flush (the daemon's
// Close, which then says unsynced data was lost, or another file's
// fsync before a power cut) makes the zone's write pointer past that
// record durable. After the restart the range reads the fsynced bytes
// or the new ones, never EIO: recovery replayed the failed record as if
// its data had rotted since it was acknowledged, and the fsynced bytes
// under it became unreadable because of a write that failed. The flush
// that makes the record durable need not be one anybody waits for: in
// "gc" it is a GC pass's, after it copied the zone's live bytes away
// (the zone is not reset before the power cut).
func TestFailedOverwriteKeepsFsyncedBytes(t *testing.T) {
	for _, stop := range []string{"close", "powercut", "gc"} {
		t.Run(stop, func(t *testing.T) {
			devName := emuDevice(t, 16, "1M", "")
			cfg := smallConfig()
			cfg.OpenZones = 1
			e := formatOpen(t, devName, cfg)
			a := mustCreate(t, e, "a")
			old := bytes.Repeat([]byte{0xaa}, 128<<10)
			if _, err := a.WriteAt(old, 0); err != nil {
				t.Fatal(err)
			}
			if err := a.Sync(); err != nil {
				t.Fatal(err)
			}
			z := a.f.mru.Load()
			used := z.alloc.Load()
			newer := bytes.Repeat([]byte{0xbb}, 64<<10)
			if _, err := a.WriteAt(newer, 32<<10); err != nil {
				t.Fatal(err)
			}
			// The next record's header block fits below the limit, its
			// data does not.
			var lim unix.Rlimit
			if err := unix.Getrlimit(unix.RLIMIT_FSIZE, &lim); err != nil {
				t.Fatal(err)
			}
			refuse := unix.Rlimit{Cur: uint64(emuOf(t, e).FileOffset(z.start + used + BlockSize)), Max: lim.Max}
			if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &refuse); err != nil {
				t.Fatal(err)
			}
			restored := false
			restore := func() {
				if !restored {
					restored = true
					if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &lim); err != nil {
						t.Fatal(err)
					}
				}
			}
			defer restore()
			errSync := a.Sync()
			if errSync == nil {
				t.Fatal("an fsync whose record the host refused succeeded")
			}
			t.Logf("the refused fsync: %v", errSync)
			if got := e.Stats().AppendErrs; got == 0 {
				t.Fatal("no append failed")
			}
			switch stop {
			case "close":
				// The daemon stops with the host still full: writeback
				// fails again, the device flush works.
				errClose := e.Close()
				restore()
				if errClose == nil {
					t.Fatal("Close wrote back what the host refused")
				}
				t.Logf("Close: %v", errClose)
				e = reopen(t, devName, cfg)
			case "powercut":
				restore()
				b := mustCreate(t, e, "b")
				if _, err := b.WriteAt(newer, 0); err != nil {
					t.Fatal(err)
				}
				if err := b.Sync(); err != nil {
					t.Fatal(err)
				}
				e = powerCutReopen(t, e, devName, cfg)
			case "gc":
				restore()
				e.gc.mu.Lock()
				z.state.Store(zoneGC)
				moved, err := e.gc.relocate(z, minGCGain)
				z.state.Store(zoneFull)
				e.gc.mu.Unlock()
				if err != nil || !moved {
					t.Fatalf("relocate zone %d: moved %v: %v", z.idx, moved, err)
				}
				e = powerCutReopen(t, e, devName, cfg)
			}
			defer e.Close()
			f, err := e.Open("a")
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got := make([]byte, len(old))
			n, err := f.ReadAt(got, 0)
			if err != nil || n != len(old) {
				t.Fatalf("a, fsynced at %d bytes, after an overwrite whose record the host refused and a restart: read %d bytes (size %d): %v", len(old), n, f.Size(), err)
			}
			if !bytes.Equal(got[:32<<10], old[:32<<10]) || !bytes.Equal(got[96<<10:], old[96<<10:]) {
				t.Fatal("a's bytes outside the failed overwrite changed")
			}
			if mid := got[32<<10 : 96<<10]; !bytes.Equal(mid, old[32<<10:96<<10]) && !bytes.Equal(mid, newer) {
				t.Fatal("a's overwritten range reads neither the fsynced bytes nor the new ones")
			}
		})
	}
}
