package zns

import (
	"bytes"
	"hash/crc32"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCRCShiftChainsBlockSums: chaining the per-block CRC-32Cs with
// crcShift gives what crc32.Update over the bytes gives, from any
// starting checksum.
func TestCRCShiftChainsBlockSums(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 9*SumBlock)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	for _, start := range []uint32{0, 1, 0xffffffff, rng.Uint32()} {
		want := crc32.Update(start, crc32c, data)
		got := start
		for off := 0; off < len(data); off += SumBlock {
			got = crcShift(got, crc32.Checksum(data[off:off+SumBlock], crc32c))
		}
		if got != want {
			t.Errorf("start %#x: chained %#x, crc32.Update %#x", start, got, want)
		}
	}
}

// appendSumsT appends bufs with the given block sums and waits.
func appendSumsT(c *conf, e *Emu, zone int, sums []uint32, bufs ...[]byte) {
	c.t.Helper()
	w := &appendWaiter{ch: make(chan appendResult, 1)}
	if err := e.AppendSums(zone, bufs, sums, w); err != nil {
		c.t.Fatalf("AppendSums zone %d: %v", zone, err)
	}
	c.ok("ring flush", e.Ring().Flush())
	if r := <-w.ch; r.err != nil {
		c.t.Fatalf("AppendSums zone %d: %v", zone, r.err)
	}
}

func blockSums(bufs ...[]byte) []uint32 {
	var sums []uint32
	for _, b := range bufs {
		for off := 0; off+SumBlock <= len(b); off += SumBlock {
			sums = append(sums, crc32.Checksum(b[off:off+SumBlock], crc32c))
		}
	}
	return sums
}

// TestEmuAppendSumsChecksumsWhatReachedTheMedia: the zone checksums a
// one-sync Flush stores are chained from AppendSums' block sums, and an
// Open checks them against the file: right sums keep the zones (the
// chain equals the bytes' CRC, header and data, across appends and
// zones), a zone appended with a wrong sum goes back to the flush
// before, as a zone whose data did not reach the media does (so the
// caller's sums are what the emu uses), and sums that do not cover the
// data are ignored.
func TestEmuAppendSumsChecksumsWhatReachedTheMedia(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev")
	e, c := openEmuT(t, path, "?zone_size=1M&zones=8&max_append=128K")
	if c.bs > SumBlock || SumBlock%c.bs != 0 {
		t.Skipf("block size %d", c.bs)
	}
	hdr, data, more := c.buf(SumBlock, 1), c.buf(4*SumBlock, 2), c.buf(2*SumBlock, 3)
	appendSumsT(c, e, 0, blockSums(hdr, data), hdr, data)
	c.ok("Flush", e.Flush())
	appendSumsT(c, e, 0, blockSums(more), more)
	appendSumsT(c, e, 1, blockSums(hdr, more), hdr, more)
	bad := blockSums(data)
	bad[2] ^= 1
	appendSumsT(c, e, 2, bad, data)
	appendSumsT(c, e, 3, blockSums(data)[:3], data) // does not cover: checksummed by the emu
	c.ok("Flush", e.Flush())
	c.ok("Close", e.Close())
	log := captureLog(t)
	e2, c2 := openEmuT(t, path, "")
	defer e2.Close()
	for zone, want := range map[int]int64{0: 7 * SumBlock, 1: 3 * SumBlock, 2: 0, 3: 4 * SumBlock} {
		if z := c2.zone(zone); z.WP-z.Start != want {
			t.Errorf("zone %d reopened at +%d, want +%d", zone, z.WP-z.Start, want)
		}
	}
	if s := log.String(); !strings.Contains(s, "zone=2") || strings.Contains(s, "zone=0") || strings.Contains(s, "zone=1 ") || strings.Contains(s, "zone=3") {
		t.Errorf("want a lost-data warning for zone 2 alone: %s", s)
	}
	if got := c2.read(0, 7*SumBlock); !bytes.Equal(got, slices.Concat(hdr, data, more)) {
		t.Error("zone 0 reads back wrong after the reopen")
	}
}
