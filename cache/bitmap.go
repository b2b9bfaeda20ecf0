package cache

import "math/bits"

// The helpers below work on bit ranges [from, to) of a []uint64, lowest bit
// first. Folio state lives in such words: uptodate, dirty and writeback bits
// of one folio side by side, as the kernel's iomap_folio_state keeps them.

// rangeMask returns the mask of bits [lo, hi) within one word, 0 <= lo < hi <= 64.
func rangeMask(lo, hi int) uint64 {
	m := ^uint64(0) << uint(lo)
	if hi < 64 {
		m &= (uint64(1) << uint(hi)) - 1
	}
	return m
}

func setBits(w []uint64, from, to int) {
	for from < to {
		i := from >> 6
		w[i] |= rangeMask(from&63, min(to-i<<6, 64))
		from = (i + 1) << 6
	}
}

func clearBits(w []uint64, from, to int) {
	for from < to {
		i := from >> 6
		w[i] &^= rangeMask(from&63, min(to-i<<6, 64))
		from = (i + 1) << 6
	}
}

// countBits returns how many bits of [from, to) are set.
func countBits(w []uint64, from, to int) int {
	n := 0
	for from < to {
		i := from >> 6
		n += bits.OnesCount64(w[i] & rangeMask(from&63, min(to-i<<6, 64)))
		from = (i + 1) << 6
	}
	return n
}

func bitSet(w []uint64, i int) bool { return w[i>>6]&(1<<uint(i&63)) != 0 }

// nextSet returns the first set bit in [from, to), or to.
func nextSet(w []uint64, from, to int) int {
	for from < to {
		i := from >> 6
		if word := w[i] >> uint(from&63); word != 0 {
			return min(from+bits.TrailingZeros64(word), to)
		}
		from = (i + 1) << 6
	}
	return to
}

// nextClear returns the first clear bit in [from, to), or to.
func nextClear(w []uint64, from, to int) int {
	for from < to {
		i := from >> 6
		// The zeros shifted in at the top stand for set bits, so they
		// are never taken for clear ones; the next word is read next.
		if word := ^w[i] >> uint(from&63); word != 0 {
			return min(from+bits.TrailingZeros64(word), to)
		}
		from = (i + 1) << 6
	}
	return to
}
