package engine

import (
	"bytes"
	"io"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// A torn record ends its zone's log and recovery finishes the zone. If
// that recovery does not get its checkpoint down (it is interrupted: here
// the checkpoint's write fails, as a power cut right after the
// checkpoint's data flush would leave it), the finish is durable (the
// flush made it so) and the next recovery scans the zone from the old
// checkpoint's write pointer up to the zone's capacity: the torn record's
// header now "fits" below the write pointer of the full zone, its missing
// blocks read as zeros, and it is replayed over fsynced data, whose range
// then reads as checksum failures (EIO).
func TestH17bTornRecordAfterInterruptedRecovery(t *testing.T) {
	devName := emuDevice(t, 24, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	first := syncThenTearNextRecord(t, e, 16<<10)

	// Recovery #1, interrupted before its checkpoint lands.
	dev, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dev.(*zns.Emu).FailWrite(1)
	if e2, err := OpenDevice(dev, cfg); err == nil {
		// The fault did not hit recovery: crash it anyway.
		e2.crashForTest()
		t.Logf("first recovery opened")
	} else {
		t.Logf("first recovery failed: %v", err)
	}
	dev.Close()

	// Recovery #2.
	e = reopen(t, devName, cfg)
	defer e.Close()
	f, err := e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, f.Size())
	n, err := f.ReadAt(got, 0)
	if err != nil && err != io.EOF {
		t.Fatalf("read a after recovery interrupted: %d of %d bytes, err %v (the torn, never acknowledged record was replayed over fsynced data)", n, len(got), err)
	}
	if !bytes.Equal(got, first) {
		t.Fatalf("after a torn record and an interrupted recovery: %d bytes, equal to the fsynced write: false", len(got))
	}
}
