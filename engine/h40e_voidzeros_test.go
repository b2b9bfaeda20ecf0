package engine

import (
	"bytes"
	"testing"
)

// TestH40eFsyncAfterALateFailedAppendSurvivesItsVoid: as
// TestH39fFsyncAfterALateFailedAppendSurvives (an append the host file
// refuses, whose failure reaches the engine only after a flush that
// acknowledged a's fsync of a record appended after it in the zone), but
// the power is cut only after the engine voided the failed record in the
// log: the checkpoint that settles it fails at its write, after the data
// flush that made the void durable. The failed range reads as zeros (the
// emu zeroes it), and beside a void recovery ended the zone's log at a
// block of zeros, silently: a's fsynced record after it was lost, with
// nothing reported. Without the void (the crash a moment earlier) Open
// goes on at a's record and serves it.
func TestH40eFsyncAfterALateFailedAppendSurvivesItsVoid(t *testing.T) {
	voided := 0
	testHookRecoverVoids = func(n int) { voided = n }
	t.Cleanup(func() { testHookRecoverVoids = nil })
	// a's next record lands after the failed range; its fsync is
	// acknowledged by a flush whose settle sees no failed append.
	e2, want, err := h39fLateFailure(t, h39fFsyncMore(t), func(e *Engine) {
		// The settle: the void is logged and flushed, the checkpoint's
		// write fails.
		failNextCheckpointWrite(t)
		if err := e.SyncNamespace(); err == nil {
			t.Fatal("set-up: the settling checkpoint's write did not fail")
		}
	})
	if err != nil {
		t.Fatalf("Open after a crash that left a voided failed append's range under a flushed write pointer: %v", err)
	}
	defer e2.Close()
	if voided == 0 {
		t.Fatal("set-up: recovery found no void above the checkpoint")
	}
	if got := readAll(t, e2, "a"); !bytes.Equal(got, want) {
		t.Fatalf("a, fsynced at %d bytes, reads %d bytes (or other bytes) after the crash; reported: %q", len(want), len(got), e2.damage)
	}
	t.Logf("reported: %q", e2.damage)
}
