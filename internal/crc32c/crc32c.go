// Package crc32c computes CRC32C (Castagnoli), the checksum of zonefold's
// records, faster than hash/crc32 on amd64 for buffers of 64 bytes and
// more: it folds 64 bytes at a time with carry-less multiplication
// (PCLMULQDQ), the method of hash/crc32's IEEE code ("Fast CRC
// Computation for Generic Polynomials Using PCLMULQDQ Instruction",
// Intel, 2009), with the Castagnoli constants. hash/crc32 computes
// Castagnoli with the SSE4.2 CRC32 instruction, three streams
// interleaved; on the 2-core AMD EPYC this project runs on, that is 6.0
// GB/s on 4 KiB against 9.2 GB/s for the folded IEEE code (go test
// -bench in this package compares the two).
//
// Invariant: Update and Checksum return exactly what hash/crc32 returns
// with a Castagnoli table, for every input: the tail of fewer than 16
// bytes, short buffers and machines without PCLMULQDQ and SSE4.1 go to
// hash/crc32. They allocate nothing.
package crc32c

import "hash/crc32"

var table = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns the CRC32C of p.
func Checksum(p []byte) uint32 { return Update(0, p) }

// Update returns the CRC32C of the bytes crc covers followed by p.
func Update(crc uint32, p []byte) uint32 {
	if useCLMUL && len(p) >= 64 {
		n := len(p) &^ 15
		crc = ^foldCLMUL(^crc, p[:n])
		p = p[n:]
	}
	if len(p) == 0 {
		return crc
	}
	return crc32.Update(crc, table, p)
}
