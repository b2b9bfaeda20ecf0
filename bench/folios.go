package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/zonefold/zonefold/cache"
	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/internal/cachehook"
	"github.com/zonefold/zonefold/zns"
)

// FoliosOptions configure bench folios.
type FoliosOptions struct {
	Duration  time.Duration // total time per configuration and benchmark
	Rounds    int           // alternating rounds the time is split into
	CacheSize int64         // cache bytes for the large-folio benchmark
	WriteSize int           // write size of the large-folio benchmark
	SmallSize int           // write size of the state-lock benchmark
	SmallFile int64         // file size the state-lock benchmark overwrites
	BlockSize int           // cache block size of the state-lock benchmark
	MaxIO     int64         // largest append (one record: header and data)
	JSON      bool          // one JSON object instead of a table
}

// DefaultFolios is bench folios without flags.
var DefaultFolios = FoliosOptions{Duration: 2 * time.Second, Rounds: 8, CacheSize: 256 << 20,
	WriteSize: 128 << 10, SmallSize: 1024, SmallFile: 4 << 20, BlockSize: 1024, MaxIO: 1 << 20}

// foliosDevice is the storage-less device the large-folio benchmark writes
// through: appends complete as io_uring NOPs, so what is measured is the
// cache, writeback and the engine's record building. It is large enough
// that a run rarely fills half of it (the file starts over if it would);
// maxIO is its largest append.
func foliosDevice(maxIO int64) string {
	return fmt.Sprintf("null:?size=1T&zone_size=256M&max_append=%d", maxIO)
}

// foliosSide is what one configuration did over all its rounds.
type foliosSide struct {
	Bytes   int64
	Elapsed time.Duration
	Stats   cache.Stats
	IOs     int64 // appends the writeback made
}

func (s foliosSide) mibps() float64 { return mibPerS(s.Bytes, s.Elapsed) }

func ratio(a, b foliosSide) float64 {
	if b.mibps() == 0 {
		return 0
	}
	return a.mibps() / b.mibps()
}

func (o FoliosOptions) validate() error {
	switch {
	case o.Rounds < 1 || o.Duration <= 0:
		return fmt.Errorf("--rounds %d, --time %v: want both more than 0", o.Rounds, o.Duration)
	case o.BlockSize != 512 && o.BlockSize != 1024 && o.BlockSize != 2048 && o.BlockSize != 4096:
		return fmt.Errorf("--block-size %d: want 512, 1024, 2048 or 4096", o.BlockSize)
	case o.WriteSize < 4096 || o.WriteSize%4096 != 0:
		return fmt.Errorf("--bs %s: want a multiple of 4 KiB", given(int64(o.WriteSize)))
	case o.CacheSize < 8*int64(o.WriteSize) || o.CacheSize < 4<<20:
		return fmt.Errorf("--cache-size %s: want at least 4 MiB and 8 writes", human(int64(o.CacheSize)))
	case o.SmallSize < 1 || o.SmallFile < int64(o.SmallSize):
		return fmt.Errorf("--small-bs %d, --small-file %d: want 1 <= small-bs <= small-file", o.SmallSize, o.SmallFile)
	case o.MaxIO < 2*engine.BlockSize || o.MaxIO%engine.BlockSize != 0 || o.MaxIO > 64<<20:
		return fmt.Errorf("--max-io %s: want a multiple of %s from %s to 64 MiB (a record header and data)", given(int64(o.MaxIO)), human(engine.BlockSize), human(2*engine.BlockSize))
	}
	return nil
}

// Folios runs the large-folio and the state-lock comparisons and prints
// them.
func Folios(ctx context.Context, out io.Writer, o FoliosOptions) error {
	if err := o.validate(); err != nil {
		return badOption(err)
	}
	large, small, err := benchLargeFolios(ctx, o)
	if err != nil {
		return err
	}
	one, split, err := benchStateLock(ctx, o)
	if err != nil {
		return err
	}
	return printFolios(out, o, large, small, one, split)
}

// seqWriter writes one file sequentially through an engine.
type seqWriter struct {
	e   *engine.Engine
	f   *engine.File
	pos int64
	res *foliosSide
}

// write writes at least n bytes, or for about d if d > 0, then syncs the
// file (like fio's end_fsync) and returns the bytes written.
func (s *seqWriter) write(ctx context.Context, buf []byte, n int64, d time.Duration) (int64, error) {
	deadline := time.Now().Add(d)
	var done int64
	for i := 0; ; i++ {
		if d > 0 && i%8 == 0 && i > 0 && !time.Now().Before(deadline) {
			break
		}
		if d <= 0 && done >= n {
			break
		}
		if s.pos+int64(len(buf)) > s.e.Capacity()/2 {
			// Start the file over before the device fills: a removed
			// file's zones hold nothing valid, and GC resets them
			// without reading them (the null: device keeps no data).
			if err := s.restart(); err != nil {
				return done, err
			}
		}
		if _, err := s.f.WriteAtContext(ctx, buf, s.pos); err != nil {
			return done, err
		}
		s.pos += int64(len(buf))
		done += int64(len(buf))
	}
	return done, s.f.SyncContext(ctx)
}

func (s *seqWriter) restart() error {
	if s.f != nil {
		s.f.Close()
		if err := s.e.Remove("seq"); err != nil {
			return err
		}
	}
	var err error
	s.f, s.pos = nil, 0
	s.f, err = s.e.Create("seq")
	return err
}

// benchLargeFolios alternates sequential writes through an engine at max
// order 9 and one at max order 0, both on a null: device: the engine's own
// writeback takes the dirty folios, merges contiguous ones into records and
// appends them.
func benchLargeFolios(ctx context.Context, o FoliosOptions) (large, small foliosSide, err error) {
	var sides [2]seqWriter
	for i, order := range []int{cache.MaxOrder, -1} {
		dev, err := zns.Open(foliosDevice(o.MaxIO), zns.Options{})
		if err != nil {
			return large, small, err
		}
		e, err := engine.FormatAndOpen(dev, engine.Config{CacheBytes: o.CacheSize, MaxOrder: order})
		if err != nil {
			dev.Close()
			return large, small, err
		}
		defer e.Close()
		sides[i] = seqWriter{e: e, res: []*foliosSide{&large, &small}[i]}
		if err := sides[i].restart(); err != nil {
			return large, small, err
		}
		defer func() {
			if sides[i].f != nil {
				sides[i].f.Close()
			}
		}()
	}
	buf := make([]byte, o.WriteSize)
	for i := range buf {
		buf[i] = byte(i)
	}
	// Warm up: fill each cache once, so that both measure the steady state
	// of a stream (every new folio evicts old clean ones) on resident
	// memory.
	for i := range sides {
		if _, err := sides[i].write(ctx, buf, o.CacheSize, 0); err != nil {
			return large, small, err
		}
	}
	per := o.Duration / time.Duration(o.Rounds)
	for r := range o.Rounds {
		for j := range sides {
			s := &sides[(r+j)%2] // alternate which goes first
			before := s.e.Stats()
			start := time.Now()
			n, err := s.write(ctx, buf, 0, per)
			if err != nil {
				return large, small, err
			}
			s.res.Elapsed += time.Since(start)
			s.res.Bytes += n
			d := s.e.Stats().Sub(before)
			s.res.IOs += d.Appends
			addStats(&s.res.Stats, s.e.Stats().Cache, before.Cache)
		}
	}
	return large, small, nil
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

// benchStateLock alternates small overwrites through a cache that sets
// uptodate and dirty in one critical section and one that uses two.
func benchStateLock(ctx context.Context, o FoliosOptions) (one, split foliosSide, err error) {
	var caches [2]*cache.Cache
	for i, splitLock := range []bool{false, true} {
		arena := max(o.SmallFile*2, 8<<20)
		c, err := cache.New(cache.Config{Bytes: arena, MaxOrder: cache.MaxOrder, BlockSize: o.BlockSize,
			DirtyLimit: arena})
		if err != nil {
			return one, split, err
		}
		defer c.Close()
		cachehook.SetSplitStateLock(c, splitLock)
		caches[i] = c
		// The file exists, in large folios, before the benchmark
		// overwrites it.
		chunk := make([]byte, 2<<20)
		for off := int64(0); off < o.SmallFile; off += int64(len(chunk)) {
			n := min(int64(len(chunk)), o.SmallFile-off)
			if _, err := c.Write(ctx, c.File(1), off, chunk[:n], nil); err != nil {
				return one, split, err
			}
		}
	}
	buf := make([]byte, o.SmallSize)
	res := [2]*foliosSide{&one, &split}
	var pos [2]int64
	per := o.Duration / time.Duration(o.Rounds)
	for r := range o.Rounds {
		for j := range 2 {
			i := (r + j) % 2
			c := caches[i]
			before := c.Stats()
			start := time.Now()
			deadline := start.Add(per)
			var n int64
			for k := 0; k%64 != 0 || time.Now().Before(deadline); k++ {
				if _, err := c.Write(ctx, c.File(1), pos[i], buf, nil); err != nil {
					return one, split, err
				}
				n += int64(len(buf))
				if pos[i] += int64(len(buf)); pos[i]+int64(len(buf)) > o.SmallFile {
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
	LargeFolioMiBps      float64  `json:"large_folio_mib_per_s"`
	SmallFolioMiBps      float64  `json:"small_folio_mib_per_s"`
	LargeFoliosByOrder   []uint64 `json:"large_folios_by_order"`
	SmallFoliosByOrder   []uint64 `json:"small_folios_by_order"`
	LargeWritebackIOs    int64    `json:"large_writeback_ios"`
	SmallWritebackIOs    int64    `json:"small_writeback_ios"`
	LargeWritebackExts   uint64   `json:"large_writeback_extents"`
	SmallWritebackExts   uint64   `json:"small_writeback_extents"`
	SmallWriteSize       int      `json:"small_write_size"`
	BlockSize            int      `json:"block_size"`
	StateLockRatio       float64  `json:"state_lock_ratio"`
	OneLockMiBps         float64  `json:"one_lock_mib_per_s"`
	SplitLockMiBps       float64  `json:"split_lock_mib_per_s"`
	OneLockFoliosByOrder []uint64 `json:"one_lock_folios_by_order"`
}

func printFolios(out io.Writer, o FoliosOptions, large, small, one, split foliosSide) error {
	if o.JSON {
		return WriteJSON(out, foliosJSON{
			WriteSize:       o.WriteSize,
			LargeFolioRatio: ratio(large, small), LargeFolioMiBps: large.mibps(), SmallFolioMiBps: small.mibps(),
			LargeFoliosByOrder: large.Stats.FoliosCreated[:], SmallFoliosByOrder: small.Stats.FoliosCreated[:],
			LargeWritebackIOs: large.IOs, SmallWritebackIOs: small.IOs,
			LargeWritebackExts: large.Stats.WritebackExtents, SmallWritebackExts: small.Stats.WritebackExtents,
			SmallWriteSize: o.SmallSize, BlockSize: o.BlockSize,
			StateLockRatio: ratio(one, split), OneLockMiBps: one.mibps(), SplitLockMiBps: split.mibps(),
			OneLockFoliosByOrder: one.Stats.FoliosCreated[:],
		})
	}
	fmt.Fprintf(out, "folios: %d alternating rounds, %v per configuration\n\n", o.Rounds, o.Duration)
	tw := newTable(out)
	fmt.Fprintf(tw, "seq %d KiB writes + writeback (null:)\tMiB/s\twb extents\tappends\tevictions\t\n", o.WriteSize>>10)
	for _, s := range []struct {
		name string
		side foliosSide
	}{{"max order 9", large}, {"max order 0", small}} {
		fmt.Fprintf(tw, "%s\t%.0f\t%d\t%d\t%d\t\n", s.name, s.side.mibps(),
			s.side.Stats.WritebackExtents, s.side.IOs, s.side.Stats.Evictions)
	}
	fmt.Fprintf(tw, "ratio\t%.2fx\t\t\t\t\n", ratio(large, small))
	fmt.Fprintln(tw, "\t\t\t\t\t")
	fmt.Fprintf(tw, "%s overwrites, %s blocks\tMiB/s\t\t\t\t\n", given(int64(o.SmallSize)), given(int64(o.BlockSize)))
	fmt.Fprintf(tw, "one critical section\t%.0f\t\t\t\t\n", one.mibps())
	fmt.Fprintf(tw, "two critical sections\t%.0f\t\t\t\t\n", split.mibps())
	fmt.Fprintf(tw, "ratio\t%.2fx\t\t\t\t\n", ratio(one, split))
	return tw.Flush()
}
