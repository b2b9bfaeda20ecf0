package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"
)

// Overwrites never grow the live data: while garbage exists, each must
// succeed (GC reclaims first), at any utilisation, and no request may
// wait unboundedly. The latency cap is a hang detector, not a timing
// test: it is generous, and a request over it fails the test with the
// stats.
func TestOverwritesNeverENOSPC(t *testing.T) {
	for _, util := range []float64{0.80, 0.90, 0.97} {
		t.Run(fmt.Sprintf("%.0f%%", util*100), func(t *testing.T) {
			const bs = 64 << 10
			e := formatOpen(t, emuDevice(t, 24, "1M", ""), Config{CacheBytes: 4 << 20, DirtyLimit: 1 << 20})
			defer e.Close()
			const files = 4
			handles, per := fillFiles(t, e, files, bs, util)
			buf := make([]byte, bs)
			rng := rand.New(rand.NewPCG(uint64(util*100), 1))
			const writes = 300
			enospc := 0
			var worst time.Duration
			for w := range writes {
				h := handles[rng.IntN(files)]
				off := rng.Int64N(per/bs) * bs
				buf[0] = byte(w)
				start := time.Now()
				_, err := h.WriteAt(buf, off)
				if err == nil {
					err = h.Sync()
				}
				took := time.Since(start)
				worst = max(worst, took)
				if took > 20*time.Second {
					t.Fatalf("overwrite %d took %v (hang detector); stats %+v", w, took, e.Stats())
				}
				if errors.Is(err, syscall.ENOSPC) {
					enospc++
					continue
				}
				if err != nil {
					t.Fatalf("overwrite %d: %v", w, err)
				}
			}
			st := e.Stats()
			t.Logf("%.0f%%: %d of %d overwrites got ENOSPC; slowest %v; GC runs %d, resets %d, WAF %.2f", util*100, enospc, writes, worst, st.GCRuns, st.GCResets, st.WAF())
			if enospc > 0 {
				t.Fatalf("%d of %d pure overwrites got ENOSPC at %.0f%% utilisation; stats %+v", enospc, writes, util*100, st)
			}
		})
	}
}

// When the live data with the headers its records need leaves GC nothing
// to gain, a writer must get ENOSPC promptly, not wait while GC copies
// zones around without net gain (it used to: ~10,000 passes, a request
// waiting over 30 s).
func TestNoProgressMeansPromptENOSPC(t *testing.T) {
	const bs = 64 << 10
	e := formatOpen(t, emuDevice(t, 40, "256K", ""), Config{CacheBytes: 4 << 20, DirtyLimit: 1 << 20})
	defer e.Close()
	usable := e.Capacity() - int64(e.cfg.GC.Reserve)*e.geo.ZoneCap
	const files = 8
	per := int64(0.97*float64(usable)) / files / bs * bs
	handles := make([]*File, files)
	buf := make([]byte, bs)
	for i := range handles {
		handles[i], _ = e.Create(fmt.Sprint(i))
		for off := int64(0); off < per; off += bs {
			if _, err := handles[i].WriteAt(buf, off); err != nil {
				break // full already
			}
		}
		handles[i].Sync()
	}
	rng := rand.New(rand.NewPCG(9, 1))
	for w := range 100 {
		start := time.Now()
		_, err := handles[rng.IntN(files)].WriteAt(buf, rng.Int64N(per/bs)*bs)
		if err == nil {
			err = handles[0].Sync()
		}
		if took := time.Since(start); took > 20*time.Second {
			t.Fatalf("overwrite %d took %v (hang detector); stats %+v", w, took, e.Stats())
		}
		if err != nil && !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("overwrite %d: %v", w, err)
		}
	}
}

// fillFiles creates files named 0..files-1 and fills them, in writes of
// bs bytes, to util of the capacity GC's reserve leaves, each synced. It
// returns their handles and each file's size.
func fillFiles(t *testing.T, e *Engine, files int, bs int64, util float64) ([]*File, int64) {
	t.Helper()
	usable := e.Capacity() - int64(e.cfg.GC.Reserve)*e.geo.ZoneCap
	per := int64(util*float64(usable)) / int64(files) / bs * bs
	handles := make([]*File, files)
	buf := make([]byte, bs)
	for i := range handles {
		var err error
		if handles[i], err = e.Create(fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
		for off := int64(0); off < per; off += bs {
			if _, err := handles[i].WriteAt(buf, off); err != nil {
				t.Fatalf("fill to %.0f%%: %v (stats %+v)", util*100, err, e.Stats())
			}
		}
		if err := handles[i].Sync(); err != nil {
			t.Fatalf("fill to %.0f%%: %v", util*100, err)
		}
	}
	return handles, per
}
