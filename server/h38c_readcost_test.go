package server

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/internal/report"
)

// TestDaemonSeqReadCost measures what a client of an in-process daemon
// pays per MiB to read a file sequentially in 32 KiB and 512 KiB calls
// of Client.ReadAt (one request each), from a file four times the
// daemon's cache, so that every byte is read from the device (by the
// reads or by readahead). Each round reads the file once each way, the
// order alternating; it prints the medians of the process's CPU time
// per MiB (daemon and client together: user and system, every
// goroutine) and of the rate, with their ranges. A measurement, not a
// check: ZONEFOLD_DAEMON_READ_COST=1 runs it (ZONEFOLD_DAEMON_READ_COST_ROUNDS=N,
// default 5; ZONEFOLD_DAEMON_READ_COST_MIB=16 reads a 16 MiB file the
// cache holds instead, read once first: what the requests cost alone).
//
//	ZONEFOLD_DAEMON_READ_COST=1 go test -ldflags=-checklinkname=0 -run TestDaemonSeqReadCost -v -count=1 ./server/
func TestDaemonSeqReadCost(t *testing.T) {
	if os.Getenv("ZONEFOLD_DAEMON_READ_COST") == "" {
		t.Skip("ZONEFOLD_DAEMON_READ_COST=1 runs it")
	}
	rounds := 5
	if v, err := strconv.Atoi(os.Getenv("ZONEFOLD_DAEMON_READ_COST_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	fileSize := int64(128 << 20)
	if v, err := strconv.Atoi(os.Getenv("ZONEFOLD_DAEMON_READ_COST_MIB")); err == nil && v > 0 {
		fileSize = int64(v) << 20 // 16: a file the cache holds (read once first), to see the requests' own cost
	}
	cfg := testConfig(fmt.Sprintf("emu:%s?zone_size=8M&zones=48", filepath.Join(t.TempDir(), "dev")), filepath.Join(t.TempDir(), "zf.sock"))
	cfg.Engine = engine.Config{CacheBytes: 32 << 20, DirtyLimit: 16 << 20}
	d := startDaemon(t, cfg)
	ctx := context.Background()
	c, err := Dial(ctx, d.socket, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h, _, err := c.Open(ctx, "f", OpenCreate)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4<<20)
	for i := range buf {
		buf[i] = byte(i*7 + i>>12)
	}
	for off := int64(0); off < fileSize; off += int64(len(buf)) {
		if _, err := c.WriteAt(ctx, h, buf, off); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Fsync(ctx, h); err != nil {
		t.Fatal(err)
	}
	c.CloseFile(ctx, h)
	if fileSize <= cfg.Engine.CacheBytes/2 { // warm the cache
		h, _, err := c.Open(ctx, "f", 0)
		if err != nil {
			t.Fatal(err)
		}
		for off := int64(0); off < fileSize; off += int64(len(buf)) {
			if _, err := c.ReadAt(ctx, h, buf, off); err != nil && err != io.EOF {
				t.Fatal(err)
			}
		}
		c.CloseFile(ctx, h)
	}
	sizes := []int{32 << 10, 512 << 10}
	cpu := make([][]float64, len(sizes))
	rate := make([][]float64, len(sizes))
	sqes := make([]uint64, len(sizes))     // device ops (ring SQEs) per round
	colds := make([]int64, len(sizes))     // reads begun cold by the connection's reader
	misses := make([]uint64, len(sizes))   // cache fills by reads
	prefetch := make([]uint64, len(sizes)) // bytes readahead read
	for r := range rounds {
		for j := range sizes {
			k := (j + r) % len(sizes)
			h, _, err := c.Open(ctx, "f", 0)
			if err != nil {
				t.Fatal(err)
			}
			p := buf[:sizes[k]]
			s0, err := c.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			c0 := report.ProcessCPU()
			t0 := time.Now()
			var off int64
			for {
				n, err := c.ReadAt(ctx, h, p, off)
				off += int64(n)
				if err == io.EOF || off >= fileSize {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			el := time.Since(t0)
			cpu[k] = append(cpu[k], (report.ProcessCPU()-c0).Seconds()*1e6/float64(fileSize>>20))
			rate[k] = append(rate[k], float64(fileSize>>20)/el.Seconds())
			s1, err := c.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			sqes[k] += s1.Ring.SQEs - s0.Ring.SQEs
			colds[k] += s1.ColdReads - s0.ColdReads
			misses[k] += s1.Cache.Misses - s0.Cache.Misses
			prefetch[k] += s1.Cache.PrefetchedBytes - s0.Cache.PrefetchedBytes
			c.CloseFile(ctx, h)
		}
	}
	med := func(v []float64) float64 {
		s := slices.Clone(v)
		slices.Sort(s)
		if len(s)%2 == 1 {
			return s[len(s)/2]
		}
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	for k, bs := range sizes {
		mib := float64(int64(rounds) * fileSize >> 20)
		t.Logf("%4d KiB reads: CPU %6.0f us/MiB (%.0f..%.0f), %7.1f MiB/s (%.1f..%.1f); per MiB: %.1f device ops, %.2f cold reads begun, %.2f fills by reads, %.2f MiB read ahead", bs>>10,
			med(cpu[k]), slices.Min(cpu[k]), slices.Max(cpu[k]), med(rate[k]), slices.Min(rate[k]), slices.Max(rate[k]),
			float64(sqes[k])/mib, float64(colds[k])/mib, float64(misses[k])/mib, float64(prefetch[k])/(1<<20)/mib)
	}
	t.Logf("CPU per MiB, 32 KiB over 512 KiB: %.2f", med(cpu[0])/med(cpu[1]))
}
