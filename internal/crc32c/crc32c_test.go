package crc32c

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// TestMatchesHashCRC32 compares with hash/crc32 on every length up to
// past a few folds, at every alignment, from random initial CRCs, and
// chained: a wrong constant or a wrong fold changes almost every result.
func TestMatchesHashCRC32(t *testing.T) {
	if !useCLMUL {
		t.Log("no PCLMULQDQ here: only the fallback is checked")
	}
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 4096+16)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	for n := 0; n <= 1100; n++ {
		for off := range 16 {
			p := buf[off : off+n]
			crc := r.Uint32()
			if got, want := Update(crc, p), crc32.Update(crc, table, p); got != want {
				t.Fatalf("Update(%#x, %d bytes at %d) = %#x, hash/crc32 %#x", crc, n, off, got, want)
			}
		}
	}
	p := buf[:4096]
	if got, want := Checksum(p), crc32.Checksum(p, table); got != want {
		t.Fatalf("Checksum(4 KiB) = %#x, hash/crc32 %#x", got, want)
	}
	if got, want := Update(Update(0, p[:1000]), p[1000:]), crc32.Checksum(p, table); got != want {
		t.Fatalf("chained Update = %#x, hash/crc32 %#x", got, want)
	}
	// Known answer: CRC32C("123456789") = 0xe3069283.
	if got := Checksum([]byte("123456789")); got != 0xe3069283 {
		t.Fatalf("Checksum(123456789) = %#x, want 0xe3069283", got)
	}
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(r.Uint32())
	}
	if got, want := Checksum(big), crc32.Checksum(big, table); got != want {
		t.Fatalf("Checksum(1 MiB) = %#x, hash/crc32 %#x", got, want)
	}
}

func TestChecksumDoesNotAllocate(t *testing.T) {
	p := make([]byte, 4096)
	if n := testing.AllocsPerRun(100, func() { Checksum(p) }); n != 0 {
		t.Fatalf("Checksum allocates %v times per call", n)
	}
}

func benchmark(b *testing.B, n int, f func([]byte) uint32) {
	p := make([]byte, n)
	b.SetBytes(int64(n))
	for b.Loop() {
		f(p)
	}
}

func BenchmarkChecksum4K(b *testing.B) { benchmark(b, 4096, Checksum) }
func BenchmarkHashCRC32_4K(b *testing.B) {
	benchmark(b, 4096, func(p []byte) uint32 { return crc32.Checksum(p, table) })
}
func BenchmarkChecksum1M(b *testing.B) { benchmark(b, 1<<20, Checksum) }
func BenchmarkHashCRC32_1M(b *testing.B) {
	benchmark(b, 1<<20, func(p []byte) uint32 { return crc32.Checksum(p, table) })
}
