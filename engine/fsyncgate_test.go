package engine

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
)

// TestSyncAfterAFailedSyncIsDurable: after an fsync fails (a device
// flush or an append with EIO), a later fsync that succeeds must mean
// the data is durable: a power cut right after it loses nothing. An
// engine that marked the data clean on the failure, or counted the
// failed flush as done, would return success here with nothing on the
// device.
func TestSyncAfterAFailedSyncIsDurable(t *testing.T) {
	for _, fault := range []string{"flush", "write", "flush twice", "write then flush"} {
		t.Run(fault, func(t *testing.T) {
			devName := emuDevice(t, 24, "1M", "")
			cfg := smallConfig()
			e := formatOpen(t, devName, cfg)
			f := mustCreate(t, e, "a")
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			want := bytes.Repeat([]byte("fsyncgate"), 40000)
			if _, err := f.WriteAt(want, 0); err != nil {
				t.Fatal(err)
			}
			emu := emuOf(t, e)
			switch fault {
			case "flush":
				emu.FailFlush(1)
			case "write":
				emu.FailWrite(1)
			case "flush twice":
				emu.FailFlush(1)
				if err := f.Sync(); !errors.Is(err, syscall.EIO) {
					t.Fatalf("sync over a failed flush: %v, want EIO", err)
				}
				emu.FailFlush(1)
			case "write then flush":
				emu.FailWrite(1)
				emu.FailFlush(1)
			}
			var synced bool
			fails := 0
			for range 4 {
				err := f.Sync()
				if err == nil {
					synced = true
					break
				}
				if !errors.Is(err, syscall.EIO) {
					t.Fatalf("sync: %v, want nil or EIO", err)
				}
				fails++
			}
			if !synced {
				t.Fatal("no sync succeeded after the fault")
			}
			// The fault must have reached a sync, or this test checks
			// nothing about syncing after a failure.
			if fails == 0 {
				t.Fatal("no sync failed: the injected fault never reached one")
			}
			e = powerCutReopen(t, e, devName, cfg)
			defer e.Close()
			if got := readAll(t, e, "a"); !bytes.Equal(got, want) {
				t.Fatalf("a synced file lost data to a power cut after a sync that failed and one that succeeded: %d bytes, want %d", len(got), len(want))
			}
		})
	}
}

// powerCutReopen crashes e, cuts the power of its emu device and opens
// the engine on it again.
func powerCutReopen(t *testing.T, e *Engine, devName string, cfg Config) *Engine {
	t.Helper()
	e.crashForTest()
	emu := emuOf(t, e)
	if err := emu.PowerCut(); err != nil {
		t.Fatal(err)
	}
	emu.Close()
	return reopen(t, devName, cfg)
}
