package cache

import (
	"math/rand/v2"
	"testing"
)

// TestChunkFindMatchesFolios checks the packed spans against the folios
// they stand for: for every page of a chunk filled with folios of random
// orders and gaps, find gives the same answer as a scan of the folios.
func TestChunkFindMatchesFolios(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 50 {
		key := int64(round)
		ck := &chunk{key: key}
		descs := make([]folio, chunkSize/pageSize)
		base := key << chunkShift
		for page := 0; page < chunkSize/pageSize; {
			order := rng.IntN(MaxOrder + 1)
			for page&(1<<order-1) != 0 || page+1<<order > chunkSize/pageSize {
				order--
			}
			if rng.IntN(3) == 0 { // a gap
				page += 1 << order
				continue
			}
			f := &descs[page]
			f.order = uint8(order)
			f.off = base + int64(page)*pageSize
			f.mem = make([]byte, pageSize<<order)
			i, g := ck.find(f.off)
			if g != nil {
				t.Fatalf("page %d: found a folio before inserting one", page)
			}
			ck.insert(i, f)
			page += 1 << order
		}
		// Take some out again, as eviction does.
		for range len(ck.folios) / 4 {
			ck.removeAt(rng.IntN(len(ck.folios)))
		}
		for pos := base; pos < base+chunkSize; pos += 512 {
			want, wantI := (*folio)(nil), len(ck.folios)
			for i, f := range ck.folios {
				if f.end() > pos {
					wantI = i
					if f.off <= pos {
						want = f
					}
					break
				}
			}
			i, f := ck.find(pos)
			if i != wantI || f != want {
				t.Fatalf("round %d, pos %d: find = %d, %p; scan = %d, %p", round, pos, i, f, wantI, want)
			}
			wantNext := (key + 1) << chunkShift
			if wantI < len(ck.folios) {
				wantNext = ck.folios[wantI].off
			}
			if got := ck.nextStart(i); got != wantNext {
				t.Fatalf("round %d, pos %d: nextStart = %d, want %d", round, pos, got, wantNext)
			}
		}
		ck.reset()
		if len(ck.folios) != 0 || len(ck.spans) != 0 {
			t.Fatal("reset left folios or spans")
		}
	}
}
