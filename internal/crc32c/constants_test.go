package crc32c

import (
	"math/bits"
	"testing"
)

// The folding constants of crc32c_amd64.s, derived here from the
// polynomial. The derivation is checked on the IEEE polynomial against
// hash/crc32's own constants (its crc32_amd64.s), then applied to
// Castagnoli's.

// xnMod is x^n mod P, normal bit order (bit i is x^i's coefficient); p is
// P without its x^32 term.
func xnMod(n int, p uint32) uint32 {
	r := uint32(1)
	for range n {
		hi := r & 0x80000000
		r <<= 1
		if hi != 0 {
			r ^= p
		}
	}
	return r
}

// x64Div is x^64 div P (33 bits), normal bit order.
func x64Div(p uint32) uint64 {
	full := uint64(1)<<32 | uint64(p)
	var q uint64
	hi, lo := uint64(1), uint64(0) // the dividend x^64 as hi:lo
	for d := 64; d >= 32; d-- {
		var bit uint64
		if d == 64 {
			bit = hi & 1
		} else {
			bit = lo >> uint(d) & 1
		}
		if bit == 0 {
			continue
		}
		sh := uint(d - 32)
		q |= 1 << sh
		lo ^= full << sh
		if sh > 31 {
			hi ^= full >> (64 - sh)
		}
	}
	return q
}

type foldConstants struct{ r1, r2, r3, r4, r5, poly, mu uint64 }

func derive(p uint32) foldConstants {
	k := func(n int) uint64 { return uint64(bits.Reverse32(xnMod(n, p))) << 1 }
	rev33 := func(x uint64) uint64 { return bits.Reverse64(x) >> 31 }
	return foldConstants{
		r1: k(4*128 + 32), r2: k(4*128 - 32), r3: k(128 + 32), r4: k(128 - 32), r5: k(64),
		poly: rev33(1<<32 | uint64(p)), mu: rev33(x64Div(p)),
	}
}

func TestFoldConstants(t *testing.T) {
	// hash/crc32's crc32_amd64.s, for the IEEE polynomial.
	ieee := foldConstants{0x154442bd4, 0x1c6e41596, 0x1751997d0, 0x0ccaa009e, 0x163cd6124, 0x1db710641, 0x1f7011641}
	if got := derive(0x04C11DB7); got != ieee {
		t.Fatalf("derivation gives %#x for IEEE, hash/crc32 has %#x", got, ieee)
	}
	// crc32c_amd64.s.
	castagnoli := foldConstants{0x0740eef02, 0x09e4addf8, 0x0f20c0dfe, 0x14cd00bd6, 0x0dd45aab8, 0x105ec76f1, 0x0dea713f1}
	if got := derive(0x1EDC6F41); got != castagnoli {
		t.Fatalf("derivation gives %#x for Castagnoli, crc32c_amd64.s has %#x", got, castagnoli)
	}
}
