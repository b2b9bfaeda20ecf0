package engine

import (
	"errors"
	"sync"
	"testing"
)

// TestErrorsRacingARenameReadTheNameWhole: error messages name the file
// without its lock (a cold read's end on the ring's reaper, which takes
// no engine lock, and ReadAtContext's), so a rename must swap the name
// whole. Under -race this failed while the name was a plain string the
// rename wrote under file.mu: a data race between Rename and a failed
// read's error.
func TestErrorsRacingARenameReadTheNameWhole(t *testing.T) {
	const bs = 64 << 10
	devName := emuDevice(t, 16, "4M", "")
	e := formatOpen(t, devName, smallConfig())
	t.Cleanup(func() { e.Close() })
	createSynced(t, e, "a", pattern(4*bs, 3))
	h, err := e.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	e.cache.EvictClean(1 << 30)
	h31bFlip(t, e, devName, devOf(t, e, "a", bs).dev+100)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 400 {
			from, to := "a", "b"
			if i%2 == 1 {
				from, to = to, from
			}
			if err := e.Rename(from, to); err != nil {
				t.Errorf("rename %s to %s: %v", from, to, err)
				return
			}
		}
	})
	failed := 0
	for range 100 {
		if _, err := h.ReadAt(make([]byte, bs), bs); errors.Is(err, ErrChecksum) {
			failed++
		}
		d := readDone{make(chan readEnd, 1)}
		if startReads(e, h, [][]byte{make([]byte, bs)}, []int64{bs}, d) == 1 {
			if r := <-d.ch; errors.Is(r.err, ErrChecksum) {
				failed++
			}
		}
	}
	wg.Wait()
	if failed == 0 {
		t.Fatal("no read of the bad block failed: the test did not reach the error path")
	}
}
