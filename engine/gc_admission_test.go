package engine

import (
	"sync"
	"testing"
	"time"
)

// Writers that queue for GC behind each other's passes collect only what
// they still need once their turn comes. With background GC off, only
// writers collect, and admission asks for room for the dirty limit and a
// little more: free zones beyond that mean someone collected for nothing.
// Before, every writer that had found no room ran a pass of its own when
// its turn came, room or not: tens of writers queued behind one pass
// collected tens of zones at once (free zones rose far past what
// admission asks for), and each early collection copied data that later
// overwrites would have freed: bench gc's uniform WAF was 10-20% above
// the analytic greedy WAF, and this test saw 16-17 free zones (and now
// and then a writer failing with ENOSPC while zones were free).
func TestQueuedWritersCollectOnlyWhatTheyNeed(t *testing.T) {
	cfg := Config{CacheBytes: 2 << 20, DirtyLimit: 512 << 10}
	cfg.GC.Disabled = true
	e := formatOpen(t, emuDevice(t, 64, "256K", ""), cfg)
	defer e.Close()
	size := e.Capacity() * 7 / 10 / 4 / 8192 * 8192
	fill := Workload{Files: 4, BS: 8192, IODepth: 1, Size: size, RW: "write", Seed: 1}
	if _, err := RunWorkload(t.Context(), e, fill); err != nil {
		t.Fatal(err)
	}
	// Watch the free zones while 64 writers overwrite, from the first GC
	// pass on (the fill leaves 30% of the zones free).
	runs := e.Stats().GCRuns
	stop := make(chan struct{})
	var wg sync.WaitGroup
	most := 0
	wg.Go(func() {
		tick := time.NewTicker(200 * time.Microsecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if st := e.Stats(); st.GCRuns > runs {
					most = max(most, st.FreeZones)
				}
			}
		}
	})
	over := fill
	over.RW, over.Keep, over.IODepth, over.Ops = "randwrite", true, 16, 2*e.Capacity()/4/8192
	st, err := RunWorkload(t.Context(), e, over)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if st.GCRuns == 0 {
		t.Fatal("no GC ran: the test wants writers short of space")
	}
	// What admission may have writers collect ahead, in zones, beyond the
	// GC reserve (2): the dirty limit, the 64 writers' writes in flight
	// past it, a record header per record and a block per open zone; and
	// the zone a pass frees past that.
	zcap := e.Geometry().ZoneCap
	want := cfg.DirtyLimit + 64*8192
	want += want/(e.maxRecordData()/BlockSize) + int64(e.placer.budget)*BlockSize
	bound := 2 + int((want+zcap-1)/zcap) + 1
	t.Logf("at most %d free zones (bound %d), %d GC runs", most, bound, st.GCRuns)
	if most > bound {
		t.Errorf("%d free zones at one time during the overwrites (%d GC runs); writers collecting only what they need leave at most %d", most, st.GCRuns, bound)
	}
}
