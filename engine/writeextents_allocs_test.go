package engine

import (
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/zonefold/zonefold/cache"
	"github.com/zonefold/zonefold/zns"
)

// countPending is a writeback.Pending that counts the records added and
// signals each Done on a channel.
type countPending struct {
	added *atomic.Int64
	ch    chan error
}

func (p *countPending) Add(n int)      { p.added.Add(int64(n)) }
func (p *countPending) Done(err error) { p.ch <- err }

// TestWriteExtentsDoesNotAllocate: once warmed up, writing back a flush
// of a file's dirty 8 KiB folios (random offsets, 1 to 8 of them, each
// over an older copy, as fio's 8 KiB random writes make) allocates
// nothing: packing, checksumming (appendSums), submitting, completing.
// Records of more extents and blocks than the warm-up's, and pad records
// where a zone fills, use the same ops: their slices are sized at Open.
// (Each op's header sums, extents and buffers grew on use, and a pad
// record dropped the op's sums, so the next data record on it grew
// them again: runtime.growslice under WriteExtents in the daemon's
// profile under fio.)
func TestWriteExtentsDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	t.Run("emu", func(t *testing.T) {
		testWriteExtentsAllocs(t, formatOpen(t, emuDevice(t, 128, "1M", ""), smallConfig()))
	})
	t.Run("null", func(t *testing.T) {
		dev, err := zns.Open("null:?size=512M&zone_size=1M", zns.Options{})
		if err != nil {
			t.Fatal(err)
		}
		e, err := FormatAndOpen(dev, smallConfig())
		if err != nil {
			t.Fatal(err)
		}
		testWriteExtentsAllocs(t, e)
	})
}

func testWriteExtentsAllocs(t *testing.T, e *Engine) {
	defer e.Close()
	h, err := e.Create("a")
	if err != nil {
		t.Fatal(err)
	}
	const folio, slots = 8 << 10, 64
	// Folios 16 KiB apart: each maps as an extent of its own, so that a
	// rewrite replaces it whole.
	mem := make([]byte, slots*folio)
	for i := range mem {
		mem[i] = byte(i / folio)
	}
	p := &countPending{added: new(atomic.Int64), ch: make(chan error, MaxRecordExtents)}
	var flushes, records int64
	exts := make([]cache.Extent, 0, slots)
	flush := func(idx []int) {
		exts = exts[:0]
		for _, s := range idx {
			exts = append(exts, cache.Extent{Off: int64(s) * 2 * folio, Data: mem[s*folio : (s+1)*folio]})
		}
		p.added.Store(0)
		e.ring.Plug()
		err := e.WriteExtents(h.f.id, exts, p)
		if uerr := e.ring.Unplug(); err == nil {
			err = uerr
		}
		if err != nil {
			t.Fatal(err)
		}
		flushes++
		records += p.added.Load()
		for range p.added.Load() {
			if err := <-p.ch; err != nil {
				t.Fatal(err)
			}
		}
	}
	// Warm-up: every op once, with one folio, and every slot mapped.
	one := make([]int, 1)
	for i := range max(cap(e.ops), slots) {
		one[0] = i % slots
		flush(one)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	perm := make([]int, slots)
	idx := make([]int, 0, 8)
	run := 0
	allocs := testing.AllocsPerRun(1000, func() {
		run++
		for i := range perm {
			perm[i] = i
		}
		rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
		idx = append(idx[:0], perm[:1+run%8]...)
		slices.Sort(idx)
		flush(idx)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per flush (one record) after warm-up", allocs)
	}
	if records <= flushes {
		t.Errorf("%d records for %d flushes: none split or padded, the zones never filled", records, flushes)
	}
	checkValidCounts(t, e)
}
