package cache

import (
	"math/rand/v2"
	"testing"
)

// TestBitmapAgainstBools checks every range helper against a []bool, over
// ranges that start and end inside words, on word edges and across words.
func TestBitmapAgainstBools(t *testing.T) {
	const nbits = 200
	rng := rand.New(rand.NewPCG(1, 2))
	w := make([]uint64, (nbits+63)/64)
	ref := make([]bool, nbits)
	for range 20000 {
		from := rng.IntN(nbits + 1)
		to := from + rng.IntN(nbits+1-from)
		switch rng.IntN(6) {
		case 0:
			setBits(w, from, to)
			for i := from; i < to; i++ {
				ref[i] = true
			}
		case 1:
			clearBits(w, from, to)
			for i := from; i < to; i++ {
				ref[i] = false
			}
		case 2:
			want := 0
			for i := from; i < to; i++ {
				if ref[i] {
					want++
				}
			}
			if got := countBits(w, from, to); got != want {
				t.Fatalf("countBits(%d, %d) = %d, want %d", from, to, got, want)
			}
		case 3:
			want := to
			for i := from; i < to; i++ {
				if ref[i] {
					want = i
					break
				}
			}
			if got := nextSet(w, from, to); got != want {
				t.Fatalf("nextSet(%d, %d) = %d, want %d", from, to, got, want)
			}
		case 4:
			want := to
			for i := from; i < to; i++ {
				if !ref[i] {
					want = i
					break
				}
			}
			if got := nextClear(w, from, to); got != want {
				t.Fatalf("nextClear(%d, %d) = %d, want %d", from, to, got, want)
			}
		case 5:
			if from < nbits && bitSet(w, from) != ref[from] {
				t.Fatalf("bitSet(%d) = %v, want %v", from, !ref[from], ref[from])
			}
		}
	}
}

func TestRangeMask(t *testing.T) {
	for _, tc := range []struct {
		lo, hi int
		want   uint64
	}{
		{0, 64, ^uint64(0)},
		{0, 1, 1},
		{63, 64, 1 << 63},
		{4, 8, 0xf0},
	} {
		if got := rangeMask(tc.lo, tc.hi); got != tc.want {
			t.Errorf("rangeMask(%d, %d) = %#x, want %#x", tc.lo, tc.hi, got, tc.want)
		}
	}
}
