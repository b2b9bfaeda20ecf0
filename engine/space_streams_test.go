package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"
)

// Overwrites on a small device with GC's two streams, more files than
// open zones (so that writers share zones and, at the last resort, GC's
// zones) and skewed overwrites (so that GC sorts hot and cold copies)
// never get ENOSPC: the live data never grows, so GC can always free
// space. pebblefs' crash test was suspected of a spurious ENOSPC from the
// streams' reserve or the sharing on its small device; this checks the
// engine under that shape directly.
func TestOverwritesNeverENOSPCTwoStreamsSharing(t *testing.T) {
	for _, util := range []float64{0.90} {
		for _, pol := range []Policy{PolicyMRU, PolicyNone} {
			t.Run(fmt.Sprintf("%.0f%%/%v", util*100, pol), func(t *testing.T) {
				const bs = 32 << 10
				e := formatOpen(t, emuDevice(t, 32, "1M", "&max_open=8&max_active=8"),
					Config{CacheBytes: 4 << 20, DirtyLimit: 1 << 20, Policy: pol, GC: GCConfig{Streams: 2}})
				defer e.Close()
				if e.placer.gcStreams != 2 {
					t.Fatalf("%d GC streams; want 2", e.placer.gcStreams)
				}
				const files = 12
				handles, per := fillFiles(t, e, files, bs, util)
				buf := make([]byte, bs)
				rng := rand.New(rand.NewPCG(uint64(util*100), uint64(pol)))
				const writes = 1000
				for w := range writes {
					i := rng.IntN(files)
					if rng.IntN(5) != 0 {
						i = rng.IntN(2) // 80% of the overwrites to 2 hot files
					}
					h := handles[i]
					off := rng.Int64N(per/bs) * bs
					buf[0] = byte(w)
					start := time.Now()
					_, err := h.WriteAt(buf, off)
					if err == nil && w%8 == 0 {
						err = h.Sync()
					}
					if took := time.Since(start); took > 20*time.Second {
						t.Fatalf("overwrite %d took %v (hang detector); stats %+v", w, took, e.Stats())
					}
					if errors.Is(err, syscall.ENOSPC) || err != nil {
						t.Fatalf("overwrite %d of file %d at %.0f%%: %v; stats %+v", w, i, util*100, err, e.Stats())
					}
				}
				for _, h := range handles {
					if err := h.Sync(); err != nil {
						t.Fatalf("final sync: %v; stats %+v", err, e.Stats())
					}
				}
				st := e.Stats()
				t.Logf("GC runs %d, resets %d, WAF %.2f", st.GCRuns, st.GCResets, st.WAF())
			})
		}
	}
}
