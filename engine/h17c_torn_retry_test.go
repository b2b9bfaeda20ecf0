package engine

import (
	"bytes"
	"context"
	"io"
	"syscall"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// TestH17cTornZoneNotFinishedByGCBeforeCheckpoint: recovery leaves a zone
// a torn record ends unfinished when it opens without a checkpoint (here:
// the other metadata half is read-only and the checkpoint in the
// recovered half's own log fails), so that the next recovery finds the
// record torn again (settleTornZones). But it marks the zone
// zone.unfinished, the mark of a zone whose finish the device refused,
// and GC's first pass finishes those (retryFinish) with no checkpoint
// taken since. The next fsync's flush makes the finish durable; after a
// power cut, recovery from the old checkpoint scans the now full zone up
// to its capacity, finds the torn record's header below the write
// pointer, and replays it over the fsynced bytes: EIO, the bug d926251
// fixed for recovery's own finish.
func TestH17cTornZoneNotFinishedByGCBeforeCheckpoint(t *testing.T) {
	devName := emuDevice(t, 24, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	active, sb := e.meta.active, e.sb
	first := syncThenTearNextRecord(t, e, 16<<10)

	// The crash image: the half the log is not in goes read-only.
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.(*zns.Emu).ZoneReadOnly(sb.MetaZones[1-active]); err != nil {
		t.Fatal(err)
	}
	if err := dev.Flush(); err != nil {
		t.Fatal(err)
	}
	// Recovery: the switch fails (errNextHalfReset), and so does its
	// checkpoint in its own half; nothing recovery decided needs one,
	// so it opens on the log as it stands.
	testHookMetaWrite = func(_ *Engine, _ int, _ int64, data []byte) error {
		if holdsCheckpoint(data) {
			return syscall.EIO
		}
		return nil
	}
	e, err = OpenDevice(dev, cfg)
	testHookMetaWrite = nil
	if err != nil {
		t.Fatalf("set-up: recovery without a checkpoint: %v", err)
	}
	if st := e.Stats(); st.ZonesUnfinished == 0 || st.Checkpoints != 0 {
		t.Fatalf("set-up: after recovery %d zones unfinished, %d checkpoints; want the torn zone unfinished, none", st.ZonesUnfinished, st.Checkpoints)
	}
	// A GC pass (passLocked asks retryFinish first).
	e.gc.mu.Lock()
	e.gc.retryFinish()
	e.gc.mu.Unlock()
	t.Logf("after a GC pass: %d zones unfinished, %d checkpoints", e.Stats().ZonesUnfinished, e.Stats().Checkpoints)
	// An acknowledged sync flushes the device (the log has ended: no
	// namespace operation, but syncs go on).
	if err := e.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	e = powerCutReopen(t, e, devName, cfg)
	defer e.Close()
	f, err := e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, f.Size())
	n, err := f.ReadAt(got, 0)
	if err != nil && err != io.EOF {
		t.Fatalf("read a: %d of %d bytes: %v (the torn, never acknowledged record was replayed over fsynced data)", n, len(got), err)
	}
	if !bytes.Equal(got, first) {
		t.Fatal("a differs from its fsynced bytes")
	}
}
