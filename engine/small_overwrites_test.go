package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
)

// 4 KiB random overwrites (an LSM's or a database's page size) at
// ordinary utilisation never get ENOSPC: admission refuses only when GC
// can free no more than a sliver, which garbage this young never is.
func TestSmallOverwritesNeverENOSPC(t *testing.T) {
	for _, zs := range []string{"1M", "4M"} {
		for _, util := range []float64{0.85, 0.90, 0.95} {
			t.Run(fmt.Sprintf("%s/%.0f%%", zs, util*100), func(t *testing.T) {
				const bs = 4 << 10
				e := formatOpen(t, emuDevice(t, 24, zs, ""), Config{CacheBytes: 4 << 20, DirtyLimit: 1 << 20})
				defer e.Close()
				const files = 4
				handles, per := fillFiles(t, e, files, 64<<10, util)
				buf := make([]byte, bs)
				rng := rand.New(rand.NewPCG(uint64(util*100), 1))
				enospc, first := 0, -1
				const writes = 4000
				for w := range writes {
					h := handles[rng.IntN(files)]
					off := rng.Int64N(per/bs) * bs
					buf[0] = byte(w)
					_, err := h.WriteAt(buf, off)
					if err == nil && w%16 == 0 {
						err = h.Sync()
					}
					if errors.Is(err, syscall.ENOSPC) {
						if first < 0 {
							first = w
						}
						enospc++
						continue
					}
					if err != nil {
						t.Fatalf("overwrite %d: %v", w, err)
					}
				}
				st := e.Stats()
				t.Logf("%d of %d got ENOSPC (first at %d); GC runs %d resets %d WAF %.2f", enospc, writes, first, st.GCRuns, st.GCResets, st.WAF())
				if enospc > 0 {
					t.Fatalf("%d ENOSPC at %.0f%%", enospc, util*100)
				}
			})
		}
	}
}
