package engine

import (
	"math/rand/v2"
	"testing"
)

// blockModel is the extent map's meaning, one entry per block.
type blockModel map[int64]struct {
	dev int64
	ver uint64
}

func (bm blockModel) insert(e extent) {
	for b := e.off; b < e.end(); b += BlockSize {
		if cur, ok := bm[b]; ok && cur.ver > e.ver {
			continue
		}
		bm[b] = struct {
			dev int64
			ver uint64
		}{e.dev + b - e.off, e.ver}
	}
}

func checkAgainstModel(t *testing.T, m *extentMap, bm blockModel, limit int64) {
	t.Helper()
	got := blockModel{}
	var prevEnd int64 = -1
	m.each(func(e extent) bool {
		if e.len <= 0 || e.off < prevEnd {
			t.Fatalf("bad or overlapping extent %+v after end %d", e, prevEnd)
		}
		prevEnd = e.end()
		for b := e.off; b < e.end(); b += BlockSize {
			got[b] = struct {
				dev int64
				ver uint64
			}{e.dev + b - e.off, e.ver}
		}
		return true
	})
	if len(got) != len(bm) {
		t.Fatalf("map covers %d blocks, model %d", len(got), len(bm))
	}
	for b, want := range bm {
		if got[b] != want {
			t.Fatalf("block %d: map %+v, model %+v", b/BlockSize, got[b], want)
		}
	}
	// lookup of a random window agrees too.
	lo := rand.Int64N(limit/BlockSize) * BlockSize
	n := rand.Int64N(limit/BlockSize)*BlockSize + BlockSize
	covered := int64(0)
	m.lookup(lo, n, func(e extent) {
		if e.off < lo || e.end() > lo+n {
			t.Fatalf("lookup [%d,%d) returned %+v outside it", lo, lo+n, e)
		}
		covered += e.len
	})
	want := int64(0)
	for b := range bm {
		if b >= lo && b < lo+n {
			want += BlockSize
		}
	}
	if covered != want {
		t.Fatalf("lookup [%d,%d) covered %d bytes, model %d", lo, lo+n, covered, want)
	}
}

func TestExtentMapModel(t *testing.T) {
	const limit = 64 * BlockSize
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 1))
		m, bm := newExtentMap(), blockModel{}
		var ver uint64
		displacedBytes, insertedBytes := int64(0), int64(0)
		for range 300 {
			off := rng.Int64N(limit/BlockSize) * BlockSize
			n := (rng.Int64N(8) + 1) * BlockSize
			switch op := rng.IntN(10); {
			case op < 6: // a client write: always the newest version
				ver++
				e := extent{off: off, len: n, dev: rng.Int64N(1 << 30), ver: ver}
				m.insert(e, func(d extent) { displacedBytes += d.len })
				insertedBytes += n
				bm.insert(e)
			case op < 7: // replay of an old GC record: loses to newer data
				e := extent{off: off, len: n, dev: rng.Int64N(1 << 30), ver: rng.Uint64N(ver + 1)}
				var want int64
				for b := off; b < off+n; b += BlockSize {
					if cur, ok := bm[b]; !ok || cur.ver <= e.ver {
						want += BlockSize
					}
				}
				if got := m.insert(e, nil); got != want {
					t.Fatalf("seed %d: insert mapped %d bytes, model %d", seed, got, want)
				}
				bm.insert(e)
			case op < 9: // GC relocates whatever still has version v
				if ver == 0 {
					continue
				}
				v := rng.Uint64N(ver) + 1
				e := extent{off: off, len: n, dev: rng.Int64N(1 << 30), ver: v}
				moved := m.relocate(e, nil)
				var want int64
				for b := off; b < off+n; b += BlockSize {
					if cur, ok := bm[b]; ok && cur.ver == v {
						cur.dev = e.dev + b - off
						bm[b] = cur
						want += BlockSize
					}
				}
				if moved != want {
					t.Fatalf("seed %d: relocate moved %d, model %d", seed, moved, want)
				}
			default:
				size := rng.Int64N(limit)
				m.truncate(size, nil)
				cut := (size + BlockSize - 1) / BlockSize * BlockSize
				for b := range bm {
					if b >= cut {
						delete(bm, b)
					}
				}
			}
			checkAgainstModel(t, m, bm, limit)
		}
		if displacedBytes > insertedBytes {
			t.Fatalf("seed %d: displaced %d bytes of %d inserted", seed, displacedBytes, insertedBytes)
		}
	}
}

func TestExtentMapSplitAndDisplace(t *testing.T) {
	m := newExtentMap()
	m.insert(extent{off: 0, len: 8 * BlockSize, dev: 1000 * BlockSize, ver: 1}, nil)
	var displaced []extent
	m.insert(extent{off: 2 * BlockSize, len: 3 * BlockSize, dev: 5000 * BlockSize, ver: 2}, func(e extent) { displaced = append(displaced, e) })
	want := []extent{
		{off: 0, len: 2 * BlockSize, dev: 1000 * BlockSize, ver: 1},
		{off: 2 * BlockSize, len: 3 * BlockSize, dev: 5000 * BlockSize, ver: 2},
		{off: 5 * BlockSize, len: 3 * BlockSize, dev: 1005 * BlockSize, ver: 1},
	}
	var got []extent
	m.each(func(e extent) bool { got = append(got, e); return true })
	if len(got) != len(want) {
		t.Fatalf("extents %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("extent %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if len(displaced) != 1 || displaced[0] != (extent{off: 2 * BlockSize, len: 3 * BlockSize, dev: 1002 * BlockSize, ver: 1}) {
		t.Fatalf("displaced %+v", displaced)
	}
}
