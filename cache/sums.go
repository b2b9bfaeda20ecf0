package cache

import "github.com/zonefold/zonefold/internal/crc32c"

// Page checksums. The engine stores a CRC32C of every 4 KiB block of
// data in each record's header. Computed at writeback, that pass read
// every byte back from the arena long after the client wrote it, on the
// one flusher, only to checksum it. The cache instead sums each page as a
// write fills it, while the bytes are still in the CPU's cache and on the
// writer's own goroutine, and hands the sums to writeback with the
// extents (Extent.Sums); the engine stores them as they are. They are the
// same CRC32Cs of the same bytes: nothing is checked less, and the sums
// now also cover the bytes' time in the arena.
//
// Only with 4 KiB blocks, where a page is one block: then the stable-page
// rule (a block under writeback never changes) also keeps the sums of an
// extent in flight from changing. A page's sum is valid only while its
// bytes are exactly what was summed: a write that covers part of a page,
// a fill from Backing, a truncate and a new folio invalidate it, and
// writeback computes what is not valid itself.

// sumPages sums the whole pages of f that bytes [lo, hi) of it cover, and
// invalidates the sums of pages they cover in part. Under fs.mu held for
// writing, after the bytes were copied.
func (c *Cache) sumPages(f *folio, lo, hi int) {
	if c.sums == nil {
		return
	}
	p0, p1 := lo>>pageShift, (hi+pageSize-1)>>pageShift
	base := int(f.page)
	for p := p0; p < p1; p++ {
		start, end := p<<pageShift, (p+1)<<pageShift
		if start < lo || end > hi {
			c.sumOK[base+p] = false
			continue
		}
		c.sums[base+p] = crc32c.Checksum(f.mem[start:end])
		c.sumOK[base+p] = true
	}
}

// unsumPages invalidates the sums of the pages of f that bytes [lo, hi)
// of it touch. Under fs.mu held for writing.
func (c *Cache) unsumPages(f *folio, lo, hi int) {
	if c.sums == nil || hi <= lo {
		return
	}
	base := int(f.page)
	clear(c.sumOK[base+lo>>pageShift : base+(hi+pageSize-1)>>pageShift])
}

// extentSums returns the sums of the pages of f that bytes [lo, hi) of
// it cover, or nil unless the range is whole pages whose sums are all
// valid. Under fs.mu.
func (c *Cache) extentSums(f *folio, lo, hi int) []uint32 {
	if c.sums == nil || lo&(pageSize-1) != 0 || hi&(pageSize-1) != 0 {
		return nil
	}
	base := int(f.page)
	p0, p1 := base+lo>>pageShift, base+hi>>pageShift
	for _, ok := range c.sumOK[p0:p1] {
		if !ok {
			return nil
		}
	}
	return c.sums[p0:p1:p1]
}
