package engine

import (
	"bytes"
	"io"
	"sync/atomic"
	"syscall"
	"testing"
)

// TestH17bFailedAppendMadeDurableByCheckpointFlush: an overwrite's append
// fails part-way (the emu's host file refuses its second half: the zone's
// write pointer moved over the whole record, its tail reads as zeros).
// The namespace sync that follows owes the checkpoint that supersedes the
// failed record (failedAppend); the checkpoint first flushes the device,
// which makes the failed, torn record durable, and then its own write
// fails (or the power goes). Recovery from the previous checkpoint then
// replays the failed record (numbered above it, its header whole, every
// block below the write pointer) over the file's fsynced bytes: blocks
// that never held the write fail their checksums, and the fsynced range
// reads as EIO, though the write that would have replaced it failed and
// nothing was acknowledged after it.
func TestH17bFailedAppendMadeDurableByCheckpointFlush(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	synced := bytes.Repeat([]byte{0xaa}, 64<<10)
	a := createSynced(t, e, "a", synced)
	emu := emuOf(t, e)
	werr := overwriteFailingAppend(t, e, a)
	// The checkpoint that settles it: its data flush runs, its write
	// fails (as if the power went between them).
	failNextCheckpointWrite(t)
	serr := e.SyncNamespace()
	t.Logf("writeback: %v; namespace sync: %v", werr, serr)
	if serr == nil {
		t.Fatal("set-up: the checkpoint's write did not fail")
	}
	e.crashForTest()
	emu.Close()

	e = reopen(t, devName, cfg)
	defer e.Close()
	f, err := e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 64<<10)
	n, err := f.ReadAt(got, 0)
	if err != nil && err != io.EOF {
		t.Fatalf("a, fsynced, after its failed overwrite came back torn: read %d bytes: %v", n, err)
	}
	for b := 0; b < len(got); b += BlockSize {
		blk := got[b : b+BlockSize]
		if !bytes.Equal(blk, synced[:BlockSize]) && !bytes.Equal(blk, bytes.Repeat([]byte{0xcc}, BlockSize)) {
			t.Fatalf("a block %d is neither the fsynced bytes nor the failed overwrite's", b/BlockSize)
		}
	}
}

// failNextCheckpointWrite makes the next metadata write that carries a
// checkpoint fail with EIO, as a power cut between a checkpoint's data
// flush and its write would lose it, until the test ends.
func failNextCheckpointWrite(t *testing.T) {
	var armed atomic.Bool
	armed.Store(true)
	testHookMetaWrite = func(_ *Engine, _ int, _ int64, data []byte) error {
		if holdsCheckpoint(data) && armed.CompareAndSwap(true, false) {
			return syscall.EIO
		}
		return nil
	}
	t.Cleanup(func() { testHookMetaWrite = nil })
}

// holdsCheckpoint reports whether a metadata write carries a checkpoint
// record (at its start, or after the superblock a half begins with).
func holdsCheckpoint(data []byte) bool {
	for off := 0; off+BlockSize <= len(data) && off <= BlockSize; off += BlockSize {
		if h, err := decodeMetaHeader(data[off : off+BlockSize]); err == nil && h.kind == metaCheckpoint {
			return true
		}
	}
	return false
}

// failSettleThenCrash has the checkpoint that settles a failed append
// fail at its write (after its data flush), then crashes the engine.
func failSettleThenCrash(t *testing.T, e *Engine) {
	t.Helper()
	failNextCheckpointWrite(t)
	if err := e.SyncNamespace(); err == nil {
		t.Fatal("set-up: the settling checkpoint's write did not fail")
	}
	testHookMetaWrite = nil
	crashEmu(t, e)
}

// readsUntorn fails the test if the first n bytes of name, fsynced
// before a failed overwrite, do not read back without an error (what
// says what came before).
func readsUntorn(t *testing.T, e *Engine, name string, n int, what string) {
	t.Helper()
	f, err := e.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, n)
	r, err := f.ReadAt(got, 0)
	if err != nil && err != io.EOF {
		t.Fatalf("%s: read %d bytes: %v", what, r, err)
	}
}
