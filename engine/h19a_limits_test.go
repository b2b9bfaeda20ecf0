package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/zonefold/zonefold/zns"
)

// TestH19aManyWritersKeepToZoneLimits: more files written at once than
// the device has open zones, every policy, with and without write-life
// hints, overwrites at high utilisation so GC copies all the time, files
// closed (tail finish) and reopened, some removed and created: no append
// may fail (the device refuses a zone past its limits), the device's
// active zones never exceed max_active, and the data reads back.
func TestH19aManyWritersKeepToZoneLimits(t *testing.T) {
	policies := []Policy{PolicyMRU, PolicyHinted, PolicyRoundRobin, PolicyNone}
	if raceEnabled {
		policies = policies[:2] // 24 s for all four: the writers are the same code
	}
	for _, p := range policies {
		for _, lim := range []string{"&max_open=3&max_active=4", "&max_open=4&max_active=4"} {
			t.Run(p.String()+lim, func(t *testing.T) {
				devName := fmt.Sprintf("emu:%s?zone_size=256K&zones=40%s", filepath.Join(t.TempDir(), "dev"), lim)
				cfg := Config{CacheBytes: 1 << 20, DirtyLimit: 256 << 10, MaxOrder: 3, Policy: p}
				e := formatOpen(t, devName, cfg)
				defer e.Close()
				maxActive := e.geo.MaxActive
				const writers = 12
				usable := e.Capacity() - int64(e.cfg.GC.Reserve)*e.geo.ZoneCap
				per := usable * 75 / 100 / writers / 4096 * 4096
				var peak atomic.Int64
				stop := make(chan struct{})
				var wg, pollWG sync.WaitGroup
				pollWG.Go(func() {
					report := make([]zns.Zone, e.geo.Zones)
					for {
						select {
						case <-stop:
							return
						default:
						}
						n, err := e.dev.Report(0, report)
						if err != nil {
							return
						}
						a := 0
						for _, z := range report[:n] {
							if z.Cond.Active() {
								a++
							}
						}
						if int64(a) > peak.Load() {
							peak.Store(int64(a))
						}
						time.Sleep(200 * time.Microsecond)
					}
				})
				var errMu sync.Mutex
				var errs []error
				for w := range writers {
					wg.Go(func() {
						rng := rand.New(rand.NewPCG(uint64(w), 77))
						name := fmt.Sprintf("w%d", w)
						model := make([]byte, 0, per)
						for round := range 6 {
							h, err := e.OpenFile(name, OCreate)
							if err != nil {
								errMu.Lock()
								errs = append(errs, fmt.Errorf("%s: open: %w", name, err))
								errMu.Unlock()
								return
							}
							if p == PolicyHinted || w%2 == 0 {
								_ = h.SetWriteLife(WriteLife(1 + (w+round)%5))
							}
							for range 20 {
								off := rng.Int64N(min(int64(len(model))+1, per-1))
								n := 1 + rng.Int64N(min(per-off, 40<<10))
								buf := make([]byte, n)
								for i := range buf {
									buf[i] = byte(rng.Uint32())
								}
								if _, err := h.WriteAt(buf, off); err != nil {
									errMu.Lock()
									errs = append(errs, fmt.Errorf("%s: write: %w", name, err))
									errMu.Unlock()
									h.Close()
									return
								}
								if end := off + n; end > int64(len(model)) {
									model = model[:end]
								}
								copy(model[off:], buf)
								if rng.IntN(4) == 0 {
									if err := h.Sync(); err != nil {
										errMu.Lock()
										errs = append(errs, fmt.Errorf("%s: fsync: %w", name, err))
										errMu.Unlock()
										h.Close()
										return
									}
								}
							}
							e.cache.EvictClean(1 << 30)
							got := make([]byte, len(model))
							if n, err := h.ReadAt(got, 0); n != len(model) || string(got) != string(model) {
								errMu.Lock()
								errs = append(errs, fmt.Errorf("%s: read back %d of %d (%v), equal %v", name, n, len(model), err, string(got[:n]) == string(model[:n])))
								errMu.Unlock()
							}
							h.Close()
							if round == 3 && w%3 == 0 {
								if err := e.Remove(name); err != nil {
									errMu.Lock()
									errs = append(errs, fmt.Errorf("%s: remove: %w", name, err))
									errMu.Unlock()
									return
								}
								model = model[:0]
							}
						}
					})
				}
				wg.Wait()
				close(stop)
				pollWG.Wait()
				st := e.Stats()
				for _, err := range errs {
					if errors.Is(err, syscall.ENOSPC) {
						t.Errorf("%v; stats %+v", err, st)
					} else {
						t.Error(err)
					}
				}
				if st.AppendErrs != 0 || st.ZoneFinishErrs != 0 {
					t.Errorf("appends failed %d, zone finishes failed %d (zone limits?)", st.AppendErrs, st.ZoneFinishErrs)
				}
				if int(peak.Load()) > maxActive {
					t.Errorf("device had %d active zones; max_active %d", peak.Load(), maxActive)
				}
				t.Logf("peak active %d of %d; GC resets %d, copied %d, sealed %d; shared %d", peak.Load(), maxActive, st.GCResets, st.GCCopied, st.GCSealed, st.ZonesShared)
				checkValidCounts(t, e)
			})
		}
	}
}
