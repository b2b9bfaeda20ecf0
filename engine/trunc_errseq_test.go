package engine

import (
	"errors"
	"syscall"
	"testing"
)

// TestTruncateLeavesWritebackErrorToFsync: a write of the file fails at
// background writeback, which leaves the error for the file's fsync
// (as Linux's errseq does: doc.go, crash consistency). A truncate of the
// file then writes its dirty data back: to settle a failed truncate's
// owed undo commit first (settleUndo), or to zero the tail of the block
// it cuts into (zeroTail). Either rewrite succeeds on the healthy
// device; the file's next fsync must still report the failure, once.
// ftruncate does not consume a file's errseq; a truncate that took the
// error (FlushFile) left the fsync returning success.
func TestTruncateLeavesWritebackErrorToFsync(t *testing.T) {
	for _, how := range []string{"owed, truncate to the size", "not owed, truncate into a block"} {
		t.Run(how, func(t *testing.T) {
			holdOwed(t)
			r := newTruncGCRig(t)
			owed := how[0] == 'o'
			if owed {
				// A failed truncate owes its commit. (Engine.Sync
				// with the commit's record failing no longer leaves
				// it owed: the checkpoint that supersedes the failed
				// append before Sync's flush commits the undo.)
				failUndoFlush(t, r)
			}
			// A write of the file (past the owed commit: a write
			// would write it first) fails at background writeback,
			// which leaves the error for the file's fsync.
			testWriteLeavesOwed = true
			_, err := r.f.WriteAt(owedPattern(4, 3000), 2048)
			testWriteLeavesOwed = false
			if err != nil {
				t.Fatal(err)
			}
			emuOf(t, r.e).FailWrite(1)
			if err := r.e.wb.SyncAll(t.Context()); err == nil { // background writeback
				t.Fatal("the writeback did not fail")
			}
			if owed && !r.f.f.undoOwed() {
				t.Fatal("no commit owed")
			}
			size := r.f.Size()
			if !owed {
				size -= 100
			}
			t.Logf("truncate to %d: %v", size, r.f.Truncate(size))
			if owed && r.f.f.undoOwed() {
				t.Error("the truncate left the commit owed on a healthy device")
			}
			if err := r.f.Sync(); !errors.Is(err, syscall.EIO) {
				t.Errorf("the file's fsync after its failed writeback and a truncate: %v, want EIO", err)
			}
			if err := r.f.Sync(); err != nil {
				t.Errorf("the second fsync: %v, want success (reported once)", err)
			}
		})
	}
}
