package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/zonefold/zonefold/zns"
)

// h25cObj is one file of a writer's model: its bytes as acknowledged,
// whether they are durable as they are (the last change was followed by
// a successful fsync, or was itself durable), its name ("" once removed
// or renamed over) and its open handle, if any.
type h25cObj struct {
	data   []byte
	synced bool
	name   string
	h      *File
}

// h25cWriter owns a few names and the files under them: no other writer
// touches them, so its model needs no lock.
type h25cWriter struct {
	id     int
	names  []string
	byName map[string]*h25cObj
	objs   map[*h25cObj]bool // every object alive: named, or unnamed and open
	max    int64             // a file's largest size

	enospc struct{ write, sync, trunc, create int }
	ops    int
}

func (w *h25cWriter) drop(o *h25cObj) {
	if o.name == "" && o.h == nil {
		delete(w.objs, o)
	}
}

// h25cChurn is the scenario: writers over disjoint names write (past
// zone boundaries), fsync, truncate into blocks, rename over their own
// files (open or not), remove open files and keep writing through the
// unnamed handle, while the device runs full and GC collects under tight
// zone limits. Errors other than ENOSPC (where the contract allows it)
// fail the test at once; the model is checked against reads as it goes.
func h25cChurn(t *testing.T, e *Engine, writers []*h25cWriter, seed uint64, opsPer int) {
	t.Helper()
	wd := startWatchdog(60 * time.Second)
	var wg sync.WaitGroup
	var failed atomic.Bool
	fail := func(w *h25cWriter, format string, args ...any) {
		failed.Store(true)
		t.Errorf("writer %d op %d: %s", w.id, w.ops, fmt.Sprintf(format, args...))
	}
	for _, w := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w.id)))
			handle := func(name string) *h25cObj {
				o := w.byName[name]
				if o != nil && o.h != nil {
					return o
				}
				h, err := e.OpenFile(name, OCreate)
				if err != nil {
					if errors.Is(err, syscall.ENOSPC) {
						w.enospc.create++
						return nil
					}
					fail(w, "open %s: %v", name, err)
					return nil
				}
				if o == nil {
					o = &h25cObj{synced: true, name: name}
					w.byName[name] = o
					w.objs[o] = true
				}
				o.h = h
				return o
			}
			// pick an object with a handle: mostly by name, sometimes an
			// unnamed one still open.
			pick := func() *h25cObj {
				if rng.IntN(4) == 0 {
					for o := range w.objs {
						if o.name == "" && o.h != nil {
							return o
						}
					}
				}
				return handle(w.names[rng.IntN(len(w.names))])
			}
			for w.ops = 0; w.ops < opsPer && !failed.Load(); w.ops++ {
				wd.done()
				switch r := rng.IntN(100); {
				case r < 40: // write, often across a zone boundary
					o := pick()
					if o == nil {
						continue
					}
					off := rng.Int64N(min(int64(len(o.data))+8192, w.max-1))
					n := 1 + rng.Int64N(min(w.max-off, 96<<10))
					buf := make([]byte, n)
					for i := range buf {
						buf[i] = byte(rng.Uint32())
					}
					got, err := o.h.WriteAt(buf, off)
					if got > 0 {
						if end := off + int64(got); end > int64(len(o.data)) {
							o.data = append(o.data, make([]byte, end-int64(len(o.data)))...)
						}
						copy(o.data[off:], buf[:got])
						o.synced = false
					}
					if err != nil {
						if !errors.Is(err, syscall.ENOSPC) {
							fail(w, "write %d at %d of %q: %d, %v", n, off, o.name, got, err)
						}
						w.enospc.write++
					} else if int64(got) != n {
						fail(w, "write %d at %d: short %d with no error", n, off, got)
					}
				case r < 55: // fsync
					o := pick()
					if o == nil {
						continue
					}
					if err := o.h.Sync(); err != nil {
						if !errors.Is(err, syscall.ENOSPC) {
							fail(w, "fsync %q: %v", o.name, err)
						}
						w.enospc.sync++
						st := e.Stats()
						t.Logf("writer %d op %d: fsync %q (%d bytes): %v; free zones %d, dirty %d, unnamed %d", w.id, w.ops, o.name, len(o.data), err, st.FreeZones, st.DirtyBytes, st.UnnamedFiles)
						continue
					}
					o.synced = true
				case r < 63: // truncate, mostly inside a block
					o := pick()
					if o == nil {
						continue
					}
					size := rng.Int64N(int64(len(o.data)) + 20000)
					size = min(size, w.max)
					if err := o.h.Truncate(size); err != nil {
						if !errors.Is(err, syscall.ENOSPC) {
							fail(w, "truncate %q to %d: %v", o.name, size, err)
						}
						w.enospc.trunc++
						continue
					}
					if size <= int64(len(o.data)) {
						o.data = o.data[:size]
					} else {
						o.data = append(o.data, make([]byte, size-int64(len(o.data)))...)
					}
					// durable on return; the bytes before it only if they were.
				case r < 71: // rename one of its names over another
					a, b := w.names[rng.IntN(len(w.names))], w.names[rng.IntN(len(w.names))]
					oa := w.byName[a]
					if oa == nil || a == b {
						continue
					}
					if err := e.Rename(a, b); err != nil {
						fail(w, "rename %s over %s: %v", a, b, err)
						continue
					}
					if ob := w.byName[b]; ob != nil {
						ob.name = ""
						w.drop(ob)
					}
					delete(w.byName, a)
					oa.name = b
					w.byName[b] = oa
				case r < 78: // remove, often open (it stays, unnamed)
					a := w.names[rng.IntN(len(w.names))]
					oa := w.byName[a]
					if oa == nil {
						continue
					}
					if err := e.Remove(a); err != nil {
						fail(w, "remove %s: %v", a, err)
						continue
					}
					delete(w.byName, a)
					oa.name = ""
					w.drop(oa)
				case r < 84: // close, an unnamed file's often
					o := pick()
					for u := range w.objs {
						if u.name == "" && u.h != nil && rng.IntN(2) == 0 {
							o = u
							break
						}
					}
					if o == nil {
						continue
					}
					if err := o.h.Close(); err != nil {
						fail(w, "close %q: %v", o.name, err)
					}
					o.h = nil
					w.drop(o)
				default: // read back a range
					o := pick()
					if o == nil {
						continue
					}
					if rng.IntN(8) == 0 {
						e.cache.EvictClean(1 << 30)
					}
					off := rng.Int64N(int64(len(o.data)) + 1)
					n := rng.Int64N(int64(len(o.data))-off+4097) + 1
					buf := make([]byte, n)
					got, err := o.h.ReadAt(buf, off)
					want := o.data[off:min(off+n, int64(len(o.data)))]
					if err != nil && err != io.EOF {
						fail(w, "read %d at %d of %q: %v", n, off, o.name, err)
					} else if got != len(want) || !bytes.Equal(buf[:got], want) {
						fail(w, "read %d at %d of %q (size %d): got %d bytes, equal %v", n, off, o.name, len(o.data), got, bytes.Equal(buf[:min(got, len(want))], want[:min(got, len(want))]))
					}
				}
			}
		})
	}
	if !wd.wait(t, &wg, "churn") {
		t.FailNow()
	}
	if failed.Load() {
		t.FailNow()
	}
}

// h25cCheckAll reads every live object whole (the cache evicted first)
// and compares it with the model.
func h25cCheckAll(t *testing.T, e *Engine, writers []*h25cWriter, when string) {
	t.Helper()
	e.cache.EvictClean(1 << 30)
	for _, w := range writers {
		for o := range w.objs {
			h := o.h
			if h == nil {
				var err error
				if h, err = e.Open(o.name); err != nil {
					t.Fatalf("%s: open %s: %v", when, o.name, err)
				}
			}
			if sz := h.Size(); sz != int64(len(o.data)) {
				t.Errorf("%s: %q (writer %d): size %d, model %d", when, o.name, w.id, sz, len(o.data))
			}
			buf := make([]byte, len(o.data)+1)
			n, err := h.ReadAt(buf, 0)
			if err != nil && err != io.EOF {
				t.Errorf("%s: read %q: %v", when, o.name, err)
			}
			if n != len(o.data) || !bytes.Equal(buf[:n], o.data) {
				t.Errorf("%s: %q (writer %d): read %d bytes, model %d, equal prefix %v", when, o.name, w.id, n, len(o.data), bytes.Equal(buf[:min(n, len(o.data))], o.data[:min(n, len(o.data))]))
			}
			if o.h == nil {
				h.Close()
			}
		}
	}
}

// h25cPeakActive polls the device's active and open zones until stop
// closes (it can only find a violation, never decide a pass).
func h25cPeakActive(e *Engine, stop <-chan struct{}, peakAct, peakOpen *atomic.Int64) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Go(func() {
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
			a, o := 0, 0
			for _, z := range report[:n] {
				if z.Cond.Active() {
					a++
				}
				if z.Cond == zns.CondImpOpen || z.Cond == zns.CondExpOpen {
					o++
				}
			}
			if int64(a) > peakAct.Load() {
				peakAct.Store(int64(a))
			}
			if int64(o) > peakOpen.Load() {
				peakOpen.Store(int64(o))
			}
			time.Sleep(300 * time.Microsecond)
		}
	})
	return &wg
}

// TestH25cFullDeviceChurnUnderZoneLimits runs h25cChurn on small devices
// with tight zone limits (strict: the device refuses an open past
// max_open rather than closing one), zone capacities below the zone size,
// files whose sizes add up to more than the device holds: no append or
// zone finish fails, the device never has more zones open or active than
// it allows, every read matches the model as it goes, and at the end
// (after Engine.Sync) every file, named or unnamed and open, reads back
// whole. Then a power cut: fsck finds no damage, and every file whose
// last change was fsynced (or durable itself) reads back exactly. Then
// space is freed (every file removed but one per writer): a file of a
// quarter of the device is written and fsynced; fsck clean after Close.
func TestH25cFullDeviceChurnUnderZoneLimits(t *testing.T) {
	devs := []struct{ name, extra string }{
		{"strict-4-4", "&max_open=4&max_active=4&strict_open=1"},
		{"strict-cap-4-5", "&zone_cap=192K&max_open=4&max_active=5&strict_open=1"},
		{"cap-3-4", "&zone_cap=200K&max_open=3&max_active=4"},
	}
	for i, d := range devs {
		t.Run(d.name, func(t *testing.T) {
			devName := emuDevice(t, 40, "256K", d.extra)
			cfg := Config{CacheBytes: 2 << 20, DirtyLimit: 512 << 10, MaxOrder: 3}
			e := formatOpen(t, devName, cfg)
			closed := false
			defer func() {
				if !closed {
					e.Close()
				}
			}()
			limit := deviceOpenLimit(e.geo)
			var peakAct, peakOpen atomic.Int64
			stop := make(chan struct{})
			poll := h25cPeakActive(e, stop, &peakAct, &peakOpen)
			const nw, names = 6, 3
			max := e.Capacity() * 13 / 10 / int64(nw*names) / 4096 * 4096
			var writers []*h25cWriter
			for w := range nw {
				wr := &h25cWriter{id: w, byName: map[string]*h25cObj{}, objs: map[*h25cObj]bool{}, max: max}
				for k := range names {
					wr.names = append(wr.names, fmt.Sprintf("w%d-%d", w, k))
				}
				writers = append(writers, wr)
			}
			h25cChurn(t, e, writers, uint64(100+i), 400)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			err := e.Sync(ctx)
			cancel()
			if err != nil {
				t.Errorf("Engine.Sync after the churn: %v", err)
			}
			close(stop)
			poll.Wait()
			st := e.Stats()
			var en [4]int
			for _, w := range writers {
				en[0] += w.enospc.write
				en[1] += w.enospc.sync
				en[2] += w.enospc.trunc
				en[3] += w.enospc.create
			}
			t.Logf("ENOSPC write %d sync %d truncate %d create %d; peak active %d open %d of %d; GC resets %d copied %d sealed %d; shared %d; unnamed %d (%d bytes); free zones %d",
				en[0], en[1], en[2], en[3], peakAct.Load(), peakOpen.Load(), limit, st.GCResets, st.GCCopied, st.GCSealed, st.ZonesShared, st.UnnamedFiles, st.UnnamedBytes, st.FreeZones)
			if st.AppendErrs != 0 || st.ZoneFinishErrs != 0 {
				t.Errorf("appends failed %d, zone finishes failed %d (zone limits?)", st.AppendErrs, st.ZoneFinishErrs)
			}
			if int(peakAct.Load()) > limit && e.geo.MaxActive > 0 && int(peakAct.Load()) > e.geo.MaxActive {
				t.Errorf("device had %d active zones; max_active %d", peakAct.Load(), e.geo.MaxActive)
			}
			if e.geo.MaxOpen > 0 && int(peakOpen.Load()) > e.geo.MaxOpen {
				t.Errorf("device had %d open zones; max_open %d", peakOpen.Load(), e.geo.MaxOpen)
			}
			// Fill what is left: writes go on until one meets ENOSPC (it
			// must, within twice the device), and what they were
			// acknowledged fits at the fsync.
			fill := mustCreate(t, e, "fill")
			var filled []byte
			chunk := make([]byte, 64<<10)
			for len(filled) < int(2*e.Capacity()) {
				for i := range chunk {
					chunk[i] = byte(len(filled)/len(chunk) + i*3)
				}
				n, err := fill.WriteAt(chunk, int64(len(filled)))
				filled = append(filled, chunk[:n]...)
				if err != nil {
					if !errors.Is(err, syscall.ENOSPC) {
						t.Fatalf("fill at %d: %d, %v", len(filled), n, err)
					}
					break
				}
			}
			if len(filled) >= int(2*e.Capacity()) {
				t.Fatalf("%d bytes written to a device of %d: no ENOSPC", len(filled), e.Capacity())
			}
			if err := fill.Sync(); err != nil {
				t.Errorf("fsync of the %d bytes written until ENOSPC: %v", len(filled), err)
			}
			fill.Close()
			writers[0].objs[&h25cObj{data: filled, synced: true, name: "fill"}] = true
			t.Logf("filled %d bytes until ENOSPC", len(filled))
			h25cCheckAll(t, e, writers, "after the churn")
			checkValidCounts(t, e)
			if t.Failed() {
				return
			}

			// Power cut: what is synced survives; fsck finds no damage.
			e.crashForTest()
			emu := emuOf(t, e)
			if err := emu.PowerCut(); err != nil {
				t.Fatal(err)
			}
			emu.Close()
			rep, err := h19gFsck(t, devName)
			if err != nil {
				t.Fatalf("fsck after the power cut: %v", err)
			}
			if len(rep.Problems) > 0 {
				t.Errorf("fsck after the power cut: %q", rep.Problems)
			}
			e = reopen(t, devName, cfg)
			for _, w := range writers {
				for o := range w.objs {
					if o.name == "" {
						delete(w.objs, o) // unnamed: gone with the crash
						continue
					}
					o.h = nil
					if !o.synced {
						// Not durable as it is: take what came back.
						h, err := e.Open(o.name)
						if err != nil {
							t.Fatalf("open %s (unsynced) after the cut: %v", o.name, err)
						}
						o.data = make([]byte, h.Size())
						if _, err := h.ReadAt(o.data, 0); err != nil && err != io.EOF {
							t.Fatalf("read %s after the cut: %v", o.name, err)
						}
						h.Close()
						o.synced = true
					}
				}
			}
			h25cCheckAll(t, e, writers, "after the power cut")
			if t.Failed() {
				return
			}

			// Free space: every file but one per writer goes; then a
			// quarter of the device fits.
			for _, w := range writers {
				kept := false
				for o := range w.objs {
					if !kept {
						kept = true
						continue
					}
					if err := e.Remove(o.name); err != nil {
						t.Fatalf("remove %s: %v", o.name, err)
					}
					delete(w.objs, o)
				}
			}
			big := make([]byte, e.Capacity()/4)
			for i := range big {
				big[i] = byte(i*7 + i>>12)
			}
			h := mustCreate(t, e, "big")
			if n, err := h.WriteAt(big, 0); err != nil || n != len(big) {
				st := e.Stats()
				t.Fatalf("writing %d bytes after freeing space: %d, %v; free zones %d, gc resets %d", len(big), n, err, st.FreeZones, st.GCResets)
			}
			if err := h.Sync(); err != nil {
				t.Fatalf("fsync of %d bytes after freeing space: %v", len(big), err)
			}
			h.Close()
			writers[0].objs[&h25cObj{data: big, synced: true, name: "big"}] = true
			h25cCheckAll(t, e, writers, "after freeing space")
			if st := e.Stats(); st.AppendErrs != 0 || st.ZoneFinishErrs != 0 {
				t.Errorf("appends failed %d, zone finishes failed %d", st.AppendErrs, st.ZoneFinishErrs)
			}
			closed = true
			if err := e.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			rep, err = h19gFsck(t, devName)
			if err != nil {
				t.Fatalf("fsck: %v", err)
			}
			if len(rep.Problems) > 0 {
				t.Errorf("fsck: %q", rep.Problems)
			}
		})
	}
}
