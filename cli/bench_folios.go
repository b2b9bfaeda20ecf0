package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/zonefold/zonefold/cache"
	"github.com/zonefold/zonefold/uring"
)

type foliosOpts struct {
	duration  time.Duration
	rounds    int
	cacheSize int64
	writeSize int
	smallSize int
	smallFile int64
	blockSize int
	maxIO     int64
	json      bool
}

func newBenchFoliosCmd() *cobra.Command {
	var o foliosOpts
	cmd := &cobra.Command{
		Use:   "folios",
		Short: "Large folios vs 4 KiB folios; one state lock vs two, through the cache",
		Long: `Two cache benchmarks, each comparing two configurations in alternating
rounds within one run:

  large folios: sequential 128 KiB buffered writes through the cache, with
  writeback running alongside, at max order 9 (one 128 KiB folio per write)
  vs max order 0 (32 folios of 4 KiB). Writeback merges contiguous dirty
  extents into one I/O and submits each as a NOP under one plug per flush —
  what the null: device does; no data is moved. Each round ends with all
  data written back. Seed: the bcachefs order hint, 1.25x-1.5x.

  state lock: 1 KiB writes overwriting a file sequentially (UnixBench
  fstime-w), setting a block's uptodate and dirty bits in one critical
  section vs two. Seed: the iomap series, +8%.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBenchFolios(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.duration, "time", 2*time.Second, "total time per configuration and benchmark")
	f.IntVar(&o.rounds, "rounds", 8, "alternating rounds the time is split into")
	f.Int64Var(&o.cacheSize, "cache-size", 256<<20, "cache arena bytes for the large-folio benchmark")
	f.IntVar(&o.writeSize, "bs", 128<<10, "write size of the large-folio benchmark")
	f.IntVar(&o.smallSize, "small-bs", 1024, "write size of the state-lock benchmark")
	f.Int64Var(&o.smallFile, "small-file", 4<<20, "file size the state-lock benchmark overwrites")
	f.IntVar(&o.blockSize, "block-size", 1024, "cache block size of the state-lock benchmark")
	f.Int64Var(&o.maxIO, "max-io", 1<<20, "largest merged writeback I/O in bytes")
	f.BoolVar(&o.json, "json", false, "print one JSON object instead of a table")
	return cmd
}

// foliosSide is what one configuration did over all its rounds.
type foliosSide struct {
	Bytes   int64
	Elapsed time.Duration
	Stats   cache.Stats
	IOs     int64 // merged writeback I/Os (NOPs)
}

func (s foliosSide) mbps() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Bytes) / s.Elapsed.Seconds() / 1e6
}

func ratio(a, b foliosSide) float64 {
	if b.mbps() == 0 {
		return 0
	}
	return a.mbps() / b.mbps()
}

func (o foliosOpts) validate() error {
	switch {
	case o.rounds < 1 || o.duration <= 0:
		return errors.New("--rounds and --time must be positive")
	case o.writeSize < 4096 || o.writeSize%4096 != 0:
		return fmt.Errorf("--bs %d: want a multiple of 4096", o.writeSize)
	case o.cacheSize < 8*int64(o.writeSize) || o.cacheSize < 4<<20:
		return fmt.Errorf("--cache-size %d: want at least 4 MiB and 8 writes", o.cacheSize)
	case o.smallSize < 1 || o.smallFile < int64(o.smallSize):
		return fmt.Errorf("--small-bs %d, --small-file %d: want 1 <= small-bs <= small-file", o.smallSize, o.smallFile)
	case o.maxIO < 4096:
		return fmt.Errorf("--max-io %d: want at least 4096", o.maxIO)
	}
	return nil
}

func runBenchFolios(ctx context.Context, out io.Writer, o foliosOpts) error {
	if err := o.validate(); err != nil {
		return err
	}
	ring, err := uring.New(uring.Options{Entries: 256})
	if err != nil {
		return err
	}
	defer ring.Close()
	large, small, err := benchLargeFolios(ctx, ring, o)
	if err != nil {
		return err
	}
	one, split, err := benchStateLock(ctx, o)
	if err != nil {
		return err
	}
	return printFolios(out, o, large, small, one, split)
}

// benchLargeFolios alternates sequential writes through a cache at max order
// 9 and one at max order 0.
func benchLargeFolios(ctx context.Context, ring *uring.Ring, o foliosOpts) (large, small foliosSide, err error) {
	type side struct {
		c   *cache.Cache
		fl  *nopFlusher
		pos int64
		res *foliosSide
	}
	var sides [2]side
	for i, order := range []int{cache.MaxOrder, 0} {
		fl := &nopFlusher{ring: ring, maxIO: o.maxIO, kick: make(chan struct{}, 1)}
		c, err := cache.New(cache.Config{Bytes: o.cacheSize, MaxOrder: order,
			DirtyLimit: o.cacheSize / 4, OnPressure: fl.poke})
		if err != nil {
			return large, small, err
		}
		defer c.Close()
		fl.c = c
		fl.start()
		defer fl.stop()
		sides[i] = side{c: c, fl: fl, res: []*foliosSide{&large, &small}[i]}
	}
	buf := make([]byte, o.writeSize)
	for i := range buf {
		buf[i] = byte(i)
	}
	// Warm up: fill each arena once, so that both measure the steady state
	// of a stream (every new folio evicts old clean ones) on resident
	// memory.
	for i := range sides {
		s := &sides[i]
		if _, err := seqWrites(ctx, s.c, s.fl, &s.pos, buf, o.cacheSize); err != nil {
			return large, small, err
		}
	}
	per := o.duration / time.Duration(o.rounds)
	for r := range o.rounds {
		for j := range sides {
			s := &sides[(r+j)%2] // alternate which goes first
			before, ios := s.c.Stats(), s.fl.ioCount()
			start := time.Now()
			n, err := seqWritesFor(ctx, s.c, s.fl, &s.pos, buf, per)
			if err != nil {
				return large, small, err
			}
			s.res.Elapsed += time.Since(start)
			s.res.Bytes += n
			s.res.IOs += s.fl.ioCount() - ios
			addStats(&s.res.Stats, s.c.Stats(), before)
		}
	}
	return large, small, nil
}

// seqWrites writes total bytes sequentially from *pos and writes it all
// back.
func seqWrites(ctx context.Context, c *cache.Cache, fl *nopFlusher, pos *int64, buf []byte, total int64) (int64, error) {
	var n int64
	for ; n < total; n += int64(len(buf)) {
		if _, err := c.Write(ctx, 1, *pos, buf, nil); err != nil {
			return n, err
		}
		*pos += int64(len(buf))
	}
	return n, fl.sync()
}

// seqWritesFor writes sequentially for about d, then writes everything back
// (like fio's end_fsync), and returns the bytes written.
func seqWritesFor(ctx context.Context, c *cache.Cache, fl *nopFlusher, pos *int64, buf []byte, d time.Duration) (int64, error) {
	deadline := time.Now().Add(d)
	var n int64
	for i := 0; i == 0 || i%8 != 0 || time.Now().Before(deadline); i++ {
		if _, err := c.Write(ctx, 1, *pos, buf, nil); err != nil {
			return n, err
		}
		*pos += int64(len(buf))
		n += int64(len(buf))
	}
	return n, fl.sync()
}

// addStats adds the counters that changed from before to now into acc.
func addStats(acc *cache.Stats, now, before cache.Stats) {
	for k := range acc.FoliosCreated {
		acc.FoliosCreated[k] += now.FoliosCreated[k] - before.FoliosCreated[k]
	}
	acc.Evictions += now.Evictions - before.Evictions
	acc.WritebackExtents += now.WritebackExtents - before.WritebackExtents
	acc.WritebackBytes += now.WritebackBytes - before.WritebackBytes
	acc.Throttles += now.Throttles - before.Throttles
	acc.ThrottledTime += now.ThrottledTime - before.ThrottledTime
	acc.AllocWaits += now.AllocWaits - before.AllocWaits
	acc.StableWaits += now.StableWaits - before.StableWaits
}

// nopFlusher is a stand-in for the writeback layer over a storage-less
// device: each flush takes a file's dirty extents, merges file-contiguous
// ones into I/Os of at most maxIO bytes, and submits one NOP per I/O, all
// under one plug — exactly what the null: device will do with them. (The
// engine's own benchmark will go through the real null: device.)
type nopFlusher struct {
	c     *cache.Cache
	ring  *uring.Ring
	maxIO int64
	kick  chan struct{}
	quit  chan struct{}
	done  chan struct{}

	mu    sync.Mutex // one flush at a time; guards the fields below
	exts  []cache.Extent
	files []uint64
	group uring.Group
	ios   int64
	err   error
}

// ioCount is the merged I/Os submitted so far.
func (f *nopFlusher) ioCount() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ios
}

// poke is OnPressure: wake the flusher, never block.
func (f *nopFlusher) poke() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

func (f *nopFlusher) start() {
	f.quit, f.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(f.done)
		for {
			select {
			case <-f.quit:
				return
			case <-f.kick:
			}
			// Flush down to half the background level, so that the
			// writer is not woken again at once.
			for f.c.DirtyBytes() > f.c.BackgroundBytes()/2 {
				if f.flush() != nil {
					return
				}
			}
		}
	}()
}

func (f *nopFlusher) stop() {
	close(f.quit)
	<-f.done
}

// sync writes back everything dirty.
func (f *nopFlusher) sync() error {
	for f.c.DirtyBytes() > 0 {
		if err := f.flush(); err != nil {
			return err
		}
	}
	return nil
}

// flushBytes caps one flush of one file: a bounded chain.
const flushBytes = 16 << 20

func (f *nopFlusher) flush() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	f.files = f.c.DirtyFiles(f.files[:0])
	f.exts = f.exts[:0]
	for _, file := range f.files {
		f.exts = f.c.BeginWriteback(file, flushBytes, f.exts)
	}
	ios := mergedIOs(f.exts, f.maxIO)
	f.ring.Plug()
	f.group.Add(ios)
	var err error
	for i := range ios {
		if err = f.ring.Nop(&f.group); err != nil {
			for range ios - i {
				f.group.Complete(uring.Result{})
			}
			break
		}
	}
	if uerr := f.ring.Unplug(); err == nil {
		err = uerr
	}
	if _, werr := f.ring.WaitGroup(&f.group, "writeback nop"); err == nil {
		err = werr
	}
	f.c.EndWriteback(f.exts, err)
	f.ios += int64(ios)
	f.err = err
	return err
}

// mergedIOs counts the I/Os that extents (in file offset order per file)
// make when file-contiguous ones merge, up to maxIO bytes each.
func mergedIOs(exts []cache.Extent, maxIO int64) int {
	ios := 0
	var end, size int64 = -1, 0
	for _, e := range exts {
		n := int64(len(e.Data))
		if e.Off != end || size+n > maxIO {
			ios++
			size = 0
		}
		size += n
		end = e.Off + n
	}
	return ios
}

// benchStateLock alternates 1 KiB overwrites through a cache that sets
// uptodate and dirty in one critical section and one that uses two.
func benchStateLock(ctx context.Context, o foliosOpts) (one, split foliosSide, err error) {
	var caches [2]*cache.Cache
	for i, splitLock := range []bool{false, true} {
		arena := max(o.smallFile*2, 8<<20)
		c, err := cache.New(cache.Config{Bytes: arena, MaxOrder: cache.MaxOrder, BlockSize: o.blockSize,
			DirtyLimit: arena, SplitStateLock: splitLock})
		if err != nil {
			return one, split, err
		}
		defer c.Close()
		caches[i] = c
		// The file exists, in large folios, before the benchmark
		// overwrites it.
		chunk := make([]byte, 2<<20)
		for off := int64(0); off < o.smallFile; off += int64(len(chunk)) {
			n := min(int64(len(chunk)), o.smallFile-off)
			if _, err := c.Write(ctx, 1, off, chunk[:n], nil); err != nil {
				return one, split, err
			}
		}
	}
	buf := make([]byte, o.smallSize)
	res := [2]*foliosSide{&one, &split}
	var pos [2]int64
	per := o.duration / time.Duration(o.rounds)
	for r := range o.rounds {
		for j := range 2 {
			i := (r + j) % 2
			c := caches[i]
			before := c.Stats()
			start := time.Now()
			deadline := start.Add(per)
			var n int64
			for k := 0; k%64 != 0 || time.Now().Before(deadline); k++ {
				if _, err := c.Write(ctx, 1, pos[i], buf, nil); err != nil {
					return one, split, err
				}
				n += int64(len(buf))
				if pos[i] += int64(len(buf)); pos[i]+int64(len(buf)) > o.smallFile {
					pos[i] = 0
				}
			}
			res[i].Elapsed += time.Since(start)
			res[i].Bytes += n
			addStats(&res[i].Stats, c.Stats(), before)
		}
	}
	return one, split, nil
}

type foliosJSON struct {
	WriteSize            int      `json:"write_size"`
	LargeFolioRatio      float64  `json:"large_folio_ratio"`
	LargeFolioMBps       float64  `json:"large_folio_mbps"`
	SmallFolioMBps       float64  `json:"small_folio_mbps"`
	LargeFoliosByOrder   []uint64 `json:"large_folios_by_order"`
	SmallFoliosByOrder   []uint64 `json:"small_folios_by_order"`
	LargeWritebackIOs    int64    `json:"large_writeback_ios"`
	SmallWritebackIOs    int64    `json:"small_writeback_ios"`
	LargeWritebackExts   uint64   `json:"large_writeback_extents"`
	SmallWritebackExts   uint64   `json:"small_writeback_extents"`
	SmallWriteSize       int      `json:"small_write_size"`
	BlockSize            int      `json:"block_size"`
	StateLockRatio       float64  `json:"state_lock_ratio"`
	OneLockMBps          float64  `json:"one_lock_mbps"`
	SplitLockMBps        float64  `json:"split_lock_mbps"`
	OneLockFoliosByOrder []uint64 `json:"one_lock_folios_by_order"`
}

func printFolios(out io.Writer, o foliosOpts, large, small, one, split foliosSide) error {
	if o.json {
		return writeJSON(out, foliosJSON{
			WriteSize:       o.writeSize,
			LargeFolioRatio: ratio(large, small), LargeFolioMBps: large.mbps(), SmallFolioMBps: small.mbps(),
			LargeFoliosByOrder: large.Stats.FoliosCreated[:], SmallFoliosByOrder: small.Stats.FoliosCreated[:],
			LargeWritebackIOs: large.IOs, SmallWritebackIOs: small.IOs,
			LargeWritebackExts: large.Stats.WritebackExtents, SmallWritebackExts: small.Stats.WritebackExtents,
			SmallWriteSize: o.smallSize, BlockSize: o.blockSize,
			StateLockRatio: ratio(one, split), OneLockMBps: one.mbps(), SplitLockMBps: split.mbps(),
			OneLockFoliosByOrder: one.Stats.FoliosCreated[:],
		})
	}
	fmt.Fprintf(out, "folios: %d alternating rounds, %v per configuration\n\n", o.rounds, o.duration)
	tw := newTable(out)
	fmt.Fprintf(tw, "seq %d KiB writes + writeback\tMB/s\twb extents\twb I/Os\tevictions\t\n", o.writeSize>>10)
	for _, s := range []struct {
		name string
		side foliosSide
	}{{"max order 9", large}, {"max order 0", small}} {
		fmt.Fprintf(tw, "%s\t%.0f\t%d\t%d\t%d\t\n", s.name, s.side.mbps(),
			s.side.Stats.WritebackExtents, s.side.IOs, s.side.Stats.Evictions)
	}
	fmt.Fprintf(tw, "ratio\t%.2fx\t\t\t\t\n", ratio(large, small))
	fmt.Fprintln(tw, "\t\t\t\t\t")
	fmt.Fprintf(tw, "%d B overwrites, %d B blocks\tMB/s\t\t\t\t\n", o.smallSize, o.blockSize)
	fmt.Fprintf(tw, "one critical section\t%.0f\t\t\t\t\n", one.mbps())
	fmt.Fprintf(tw, "two critical sections\t%.0f\t\t\t\t\n", split.mbps())
	fmt.Fprintf(tw, "ratio\t%.2fx\t\t\t\t\n", ratio(one, split))
	return tw.Flush()
}
