package engine

import (
	"bytes"
	"io"
	"sync/atomic"
	"testing"
)

// TestH17cAppendFailingDuringDurableOpRecordIsSettled: appendOp now
// settles a failed append (checkpoint) before it writes the operation's
// record, and flushes after, with no second look at failedAppend. An
// overwrite's append that fails part-way while the remove's record is
// being written (writeback runs beside namespace operations) is left for
// the remove's flush to make durable, with no checkpoint and no opVoid
// after it, and the remove is acknowledged. Before b8207a6 appendOp
// looked at failedAppend after writeOp and settled then. A power cut
// after the acknowledged remove: recovery from the old checkpoint
// replays the torn record over a's fsynced bytes, which read as EIO.
func TestH17cAppendFailingDuringDurableOpRecordIsSettled(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	synced := bytes.Repeat([]byte{0xaa}, 64<<10)
	a := createSynced(t, e, "a", synced)
	createSynced(t, e, "b", bytes.Repeat([]byte{0xbb}, BlockSize)).Close()
	if _, err := a.WriteAt(bytes.Repeat([]byte{0xcc}, 64<<10), 0); err != nil {
		t.Fatal(err)
	}
	emu := emuOf(t, e)
	var armed atomic.Bool
	armed.Store(true)
	var werr error
	testHookMetaWrite = func(e *Engine, _ int, _ int64, data []byte) error {
		if holdsCheckpoint(data) || !armed.CompareAndSwap(true, false) {
			return nil
		}
		// The remove's record is about to be written: a's writeback,
		// the host refusing the second half of its record.
		werr = failAppendOf(t, e, a)
		return nil
	}
	defer func() { testHookMetaWrite = nil }()
	rerr := e.Remove("b")
	testHookMetaWrite = nil
	t.Logf("a's writeback: %v; remove b: %v; failedAppend %v", werr, rerr, e.failedAppend.Load())
	if werr == nil {
		t.Fatal("set-up: a's writeback did not fail")
	}
	if rerr != nil {
		t.Skipf("the remove failed (%v): nothing acknowledged after the failed append", rerr)
	}
	// The remove was acknowledged; the power goes.
	e.crashForTest()
	if err := emu.PowerCut(); err != nil {
		t.Fatal(err)
	}
	emu.Close()

	e = reopen(t, devName, cfg)
	defer e.Close()
	if _, err := e.Open("b"); err == nil {
		t.Error("b, removed and acknowledged, came back")
	}
	f, err := e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 64<<10)
	n, err := f.ReadAt(got, 0)
	if err != nil && err != io.EOF {
		t.Fatalf("a, fsynced, after a failed overwrite and an acknowledged remove: read %d bytes: %v", n, err)
	}
	for b := 0; b < len(got); b += BlockSize {
		blk := got[b : b+BlockSize]
		if !bytes.Equal(blk, synced[:BlockSize]) && !bytes.Equal(blk, bytes.Repeat([]byte{0xcc}, BlockSize)) {
			t.Fatalf("a block %d is neither the fsynced bytes nor the failed overwrite's", b/BlockSize)
		}
	}
}
