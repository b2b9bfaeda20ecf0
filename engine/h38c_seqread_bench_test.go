package engine

import (
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/zonefold/zonefold/internal/report"
)

// BenchmarkSeqRead reads one file sequentially through a handle, as a
// daemon client or pebblefs does, in 4, 32, 128 and 512 KiB reads:
// "hot" from a file the cache holds whole (read once first), "cold" from
// a file four times the cache, so that every byte is a fill (by the
// reader or its readahead). It reports, besides ns/op and allocs/op, the
// process's CPU time per MiB read (cpu-us/MiB: user and system, every
// goroutine, so readahead's workers and the ring's completions count)
// and wall time per MiB (ns/MiB), which compare across read sizes.
//
// It also reports, per MiB read, the device ops (ring SQEs) and their
// entries, the cache misses the reads filled, the fills that waited for
// another's, and the device bytes and readahead's bytes per byte read.
//
//	go test -ldflags=-checklinkname=0 -run '^$' -bench BenchmarkSeqRead ./engine/
func BenchmarkSeqRead(b *testing.B) {
	for _, c := range []struct {
		name              string
		fileMiB, cacheMiB int64
	}{
		{"hot", 16, 64},
		{"cold", 128, 32},
	} {
		b.Run(c.name, func(b *testing.B) { seqRead(b, c.fileMiB<<20, c.cacheMiB<<20, c.name == "hot") })
	}
}

// seqRead is BenchmarkSeqRead's cases on a file of size bytes and a
// cache of cacheBytes, laid out once for its read sizes.
func seqRead(b *testing.B, size, cacheBytes int64, hot bool) {
	dev := emuDevice(b, 48, "8M", "")
	e := formatOpen(b, dev, Config{CacheBytes: cacheBytes, DirtyLimit: 16 << 20})
	f := mustCreate(b, e, "f")
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i*7 + i>>12)
	}
	for off := int64(0); off < size; off += int64(len(buf)) {
		if _, err := f.WriteAt(buf, off); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	if err := e.Close(); err != nil {
		b.Fatal(err)
	}
	cfg := Config{CacheBytes: cacheBytes, DirtyLimit: 16 << 20}
	for _, bs := range []int{4 << 10, 32 << 10, 128 << 10, 512 << 10} {
		b.Run(fmt.Sprintf("%dk", bs>>10), func(b *testing.B) {
			e := reopen(b, dev, cfg)
			defer e.Close()
			h, err := e.Open("f")
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close()
			p := make([]byte, bs)
			var off int64
			read := func() {
				n, err := h.ReadAt(p, off)
				if err != nil && err != io.EOF {
					b.Fatal(err)
				}
				off += int64(n)
				if off >= size {
					off = 0
				}
			}
			if hot {
				for range size / int64(bs) {
					read()
				}
				off = 0
			}
			s0 := e.Stats()
			b.SetBytes(int64(bs))
			b.ReportAllocs()
			var cpu0 time.Duration
			var t0 time.Time
			n := 0
			for b.Loop() {
				if n == 0 { // past b.Loop's own setup
					cpu0, t0 = report.ProcessCPU(), time.Now()
				}
				read()
				n++
			}
			wall := time.Since(t0)
			cpu := report.ProcessCPU() - cpu0
			mib := float64(n) * float64(bs) / (1 << 20)
			b.ReportMetric(cpu.Seconds()*1e6/mib, "cpu-us/MiB")
			b.ReportMetric(float64(wall.Nanoseconds())/mib, "ns/MiB")
			s := e.Stats()
			b.ReportMetric(float64(s.Ring.SQEs-s0.Ring.SQEs)/mib, "sqes/MiB")
			b.ReportMetric(float64(s.Ring.SubmitEnters-s0.Ring.SubmitEnters)/mib, "enters/MiB")
			b.ReportMetric(float64(s.DevRead-s0.DevRead)/float64(1<<20)/mib, "devread/read")
			b.ReportMetric(float64(s.Cache.Misses-s0.Cache.Misses)/mib, "misses/MiB")
			b.ReportMetric(float64(s.Cache.FillWaits-s0.Cache.FillWaits)/mib, "fillwaits/MiB")
			b.ReportMetric(float64(s.Cache.PrefetchedBytes-s0.Cache.PrefetchedBytes)/float64(1<<20)/mib, "prefetched/read")
			if hot && s.Cache.Misses != s0.Cache.Misses {
				b.Fatalf("hot: %d misses", s.Cache.Misses-s0.Cache.Misses)
			}
			if !hot && n*bs >= int(size) && s.Cache.Misses == s0.Cache.Misses && s.DevRead == s0.DevRead {
				b.Fatalf("cold: no fills")
			}
		})
	}
}
