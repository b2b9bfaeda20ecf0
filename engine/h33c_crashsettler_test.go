package engine

import (
	"testing"
	"time"
)

// TestCrashForTestWaitsForTheSettlersTry: the power-cut tests crash the
// engine (crashForTest) with a failed truncate's undo commit still owed,
// whose background settler (settleLater) may be in a try: entered, about
// to write the file's cut range again through the cache. crashForTest
// closed the cache under it, and the try's read of the closed cache
// panicked the whole test binary (TestPowerCutLoop, seeds 3006-3040:
// "slice bounds out of range [:1560576] with capacity 0" in
// cache.scratchMem under File.rewritePiece, settleInBackground). It must
// end the settler's waits and wait for a try in progress before it closes
// anything.
func TestCrashForTestWaitsForTheSettlersTry(t *testing.T) {
	holdOwed(t)
	r := newTruncGCRig(t)
	failUndoFlush(t, r)
	f := r.f.f
	if !f.undoOwed() {
		t.Fatal("set-up: the failed undo owes no commit")
	}
	// The settler's next try enters, then waits for the file's wmu.
	f.wmu.Lock()
	testNoSettler = false
	r.e.settleLater(f)
	for deadline := time.Now().Add(20 * time.Second); r.e.active.Load()&activeCount == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			f.wmu.Unlock()
			t.Fatal("set-up: the settler's try did not begin in 20 s")
		}
	}
	crashed := make(chan int64)
	go func() {
		r.e.crashForTest()
		crashed <- r.e.active.Load() & activeCount
	}()
	select {
	case n := <-crashed:
		t.Errorf("crashForTest returned with %d operations still running (the settler's try)", n)
		f.wmu.Unlock()
		time.Sleep(100 * time.Millisecond) // let it fail loudly, as it did in the loop
		return
	case <-time.After(200 * time.Millisecond): // waiting for the try: let it go on
	}
	f.wmu.Unlock()
	if n := <-crashed; n != 0 {
		t.Fatalf("crashForTest returned with %d operations still running", n)
	}
}
