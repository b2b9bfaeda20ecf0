package zns

import "hash/crc32"

// SumBlock is the span of each checksum an AppendSums caller passes: the
// CRC-32C (Castagnoli) of one 4 KiB block of the append's data.
const SumBlock = 4096

// SumAppender is a Device that takes the CRC-32C of each SumBlock of an
// append's data from the caller instead of computing it again. The emu
// keeps a checksum of every zone's data since its last Flush (see Emu);
// the engine has already computed a CRC-32C of each 4 KiB block of every
// record it appends (the record header carries them), so the emu chains
// those (crcShift) instead of running CRC-32C over the bytes a second
// time: a profile of bench kernel's 4x1m-end-fsync on emu had CRC-32C at
// half of the daemon's CPU, half of that the emu's own pass, under the
// zone table's mutex.
type SumAppender interface {
	// AppendSums is Append with sums[i] the CRC-32C of bytes
	// [i*SumBlock, (i+1)*SumBlock) of bufs laid end to end. If the
	// lengths do not agree (the data is not a whole number of
	// SumBlocks, or len(sums) differs), it checksums the bytes itself.
	// A wrong sum makes the data it stands for count as lost if a power
	// cut interrupts the next Flush.
	AppendSums(zone int, bufs [][]byte, sums []uint32, c AppendCompletion) error
}

// shiftTab is the linear map that runs a CRC-32C through SumBlock zero
// bytes, one table per byte of the CRC: with U(c, d) = crc32.Update(c,
// crc32c, d), U(c, b) = shift(c) ^ U(0, b) for every block b of SumBlock
// bytes, since the update is affine in c and the constant part is U(0, b).
var shiftTab = func() (t [4][256]uint32) {
	zeros := make([]byte, SumBlock)
	base := crc32.Update(0, crc32c, zeros)
	var bit [32]uint32
	for i := range bit {
		bit[i] = crc32.Update(1<<i, crc32c, zeros) ^ base
	}
	for k := range t {
		for v := range 256 {
			var x uint32
			for j := range 8 {
				if v&(1<<j) != 0 {
					x ^= bit[8*k+j]
				}
			}
			t[k][v] = x
		}
	}
	return t
}()

// crcShift is crc32.Update(c, crc32c, d) for a block d of SumBlock bytes
// whose own CRC-32C (crc32.Update(0, crc32c, d)) is sum.
func crcShift(c, sum uint32) uint32 {
	return shiftTab[0][byte(c)] ^ shiftTab[1][byte(c>>8)] ^ shiftTab[2][byte(c>>16)] ^ shiftTab[3][byte(c>>24)] ^ sum
}
