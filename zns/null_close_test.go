package zns

import (
	"fmt"
	"testing"
	"time"
)

// TestNullCloseCompletesAcceptedWrites: Close with long completion_nsec
// timers in flight (appends queued behind a zone's write with
// zone_serial, a read): every operation completes exactly once and
// without error, and Close returns (review rev63: with zone_serial, Close
// closed the ring first and the queued appends failed EIO).
func TestNullCloseCompletesAcceptedWrites(t *testing.T) {
	for _, serial := range []bool{false, true} {
		t.Run(fmt.Sprint(serial), func(t *testing.T) {
			dev, err := Open(fmt.Sprintf("null:?size=8M&zone_size=1M&zone_serial=%v&completion_nsec=%d", serial, (200*time.Millisecond).Nanoseconds()), Options{RingEntries: 64})
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 4096)
			log := &appendLog{done: make(chan struct{}, 16)}
			log.appendZones(t, dev, buf, 4)
			w := newTestWaiter()
			if err := dev.Read(1<<20, make([]byte, 4096), w); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			cerr := dev.Close()
			t.Logf("Close after %v: %v", time.Since(start), cerr)
			log.wait(t, 5)
			select {
			case <-log.done:
				t.Fatal("an extra completion")
			case <-time.After(300 * time.Millisecond):
			}
			for i, e := range log.errs {
				if e != nil {
					t.Errorf("append %d (accepted before Close, Close returned %v): off %d err %v", i, cerr, log.offs[i], e)
				}
			}
		})
	}
}
