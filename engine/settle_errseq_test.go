package engine

import (
	"errors"
	"syscall"
	"testing"
)

// TestSettleFailureLeftForFsync: with the commit owed, a settle try
// by the background settler or by Engine.Sync fails at writeback
// (FailWrite: the commit piece's append), then a later try succeeds.
// The file's fsync must still report that failure, once (they leave the
// error, FlushFileLeaveError). From review rev53: it fails if the
// settler and Engine.Sync take the error (take=true).
func TestSettleFailureLeftForFsync(t *testing.T) {
	for _, how := range []string{"settler", "Engine.Sync"} {
		t.Run(how, func(t *testing.T) {
			holdOwed(t)
			r := newTruncGCRig(t)
			failUndoFlush(t, r)
			if !r.f.f.undoOwed() {
				t.Fatal("no commit owed")
			}
			emuOf(t, r.e).FailWrite(1)
			if how == "settler" {
				testNoSettler = false
				r.e.settleLater(r.f.f)
			} else {
				t.Logf("Engine.Sync: %v", r.e.Sync(t.Context()))
				t.Logf("Engine.Sync: %v", r.e.Sync(t.Context()))
			}
			r.waitNotOwed(t)
			if err := r.f.Sync(); !errors.Is(err, syscall.EIO) {
				t.Errorf("fsync after the settle's failed writeback: %v, want EIO", err)
			}
			if err := r.f.Sync(); err != nil {
				t.Errorf("second fsync: %v", err)
			}
		})
	}
}
