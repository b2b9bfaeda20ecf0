package engine

// h28c: the emu device's zone reset no longer flushes the device (a
// zoned drive with a volatile write cache makes its reset durable
// without writing back what it caches for other zones). With the reset
// flushing, an engine that reset a GC victim before a flush made its
// copies and the logged reset durable lost nothing to a power cut right
// after the reset: the reset's own flush covered them. Now the cut
// exposes it.

import "testing"

// TestH28cCutAfterGCResetKeepsTheCopies runs GC's copying passes (each
// copies a half-garbage zone's live data, logs its reset and resets the
// one logged before, see collector.settle), then cuts the power at once:
// the file reads back whole, and fsck is clean.
//
// Mutant: GC resetting a victim with no flush after its copies (rewrite
// skipping its settledFlush, and settle its flushFor, as if the flushes
// were covered): with the old emu reset (ResetZone running Flush) this
// test, TestPowerCutLoop and TestUndoCommittedByCheckpointSurvivesPowerCut
// passed; with the reset that flushes nothing else all three fail, here
// with f reading wrong from the first reset victim's live data on.
func TestH28cCutAfterGCResetKeepsTheCopies(t *testing.T) {
	for _, passes := range []int{1, 2, 3} {
		devName, cfg, e, h, data := halfGarbageZones(t)
		st0 := e.Stats()
		for i := range passes {
			if moved, err := e.gc.pass(gcBackground); err != nil || !moved {
				t.Fatalf("pass %d: moved %v, %v", i+1, moved, err)
			}
		}
		if st := e.Stats().Sub(st0); st.GCResets == 0 || st.GCWritten == 0 {
			t.Fatalf("%d passes: %d resets, %d bytes copied: the test wants copying passes that reset", passes, st.GCResets, st.GCWritten)
		}
		h.Close()
		e = powerCutReopen(t, e, devName, cfg)
		if got := readAll(t, e, "f"); firstDiff(got, data) >= 0 {
			t.Fatalf("%d passes, then a power cut: f differs at %d", passes, firstDiff(got, data))
		}
		checkValidCounts(t, e)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		checkFsck(t, devName)
	}
}
