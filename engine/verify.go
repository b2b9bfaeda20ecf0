package engine

import (
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/cache"
)

// ErrChecksum is a data block that does not match the checksum it was
// written with.
var ErrChecksum = fmt.Errorf("engine: data block fails its checksum: %w", syscall.EIO)

const (
	sumWays  = 4
	sumChunk = 16 // block sums per cache entry: 64 KiB of data
	// sumEntryBytes is an entry's memory, its sums and key.
	sumEntryBytes = sumChunk*4 + 24
)

// sumCache is a set-associative cache of the block sums of record headers
// (see "Checked reads" in the package doc), in chunks of sumChunk blocks
// so that records of a few blocks take no more room than they need. Its
// set locks are leaves: taken with nothing but a cache fill's file lock
// held, and nothing taken under them. Entries are keyed by the header's
// device offset, the chunk and the zone's generation (bumped at every
// reset, so entries of a reset zone are never hit again).
type sumCache struct {
	sets []sumSet
	sums []uint32 // sumChunk per way, set after set
}

type sumSet struct {
	mu   sync.Mutex
	tick uint32
	ways [sumWays]sumEntry
}

type sumEntry struct {
	hdr   int64 // -1: empty
	gen   uint32
	chunk uint16
	n     uint16 // sums held
	used  uint32 // set tick of the last use
}

// newSumCache makes a cache of about bytes of memory.
func newSumCache(bytes int64) *sumCache {
	sets := max(1, int(bytes/sumEntryBytes/sumWays))
	c := &sumCache{sets: make([]sumSet, sets), sums: make([]uint32, sets*sumWays*sumChunk)}
	for i := range c.sets {
		for w := range c.sets[i].ways {
			c.sets[i].ways[w].hdr = -1
		}
	}
	// Fault the sums' pages in now, as the cache does its arena: each
	// first touch of a page was a page fault in the read path (a
	// daemon's first cold GiB spent a sixth of its CPU there, in put's
	// copy).
	for i := 0; i < len(c.sums); i += 1024 {
		c.sums[i] = 0
	}
	return c
}

func (c *sumCache) set(hdr int64, chunk int) (int, *sumSet) {
	h := (uint64(hdr/BlockSize)*MaxRecordBlocks/sumChunk + uint64(chunk)) * 0x9e3779b97f4a7c15
	i := int((h >> 32) % uint64(len(c.sets)))
	return i, &c.sets[i]
}

// get copies the sums of blocks [first, first+len(dst)) of the record
// whose header is at hdr into dst, if the cache holds them all.
func (c *sumCache) get(hdr int64, gen uint32, first int, dst []uint32) bool {
	for len(dst) > 0 {
		chunk, in := first/sumChunk, first%sumChunk
		n := min(len(dst), sumChunk-in)
		if !c.getChunk(hdr, gen, chunk, in, dst[:n]) {
			return false
		}
		dst, first = dst[n:], first+n
	}
	return true
}

func (c *sumCache) getChunk(hdr int64, gen uint32, chunk, in int, dst []uint32) bool {
	i, s := c.set(hdr, chunk)
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.ways {
		en := &s.ways[w]
		if en.hdr != hdr || en.gen != gen || int(en.chunk) != chunk {
			continue
		}
		if in+len(dst) > int(en.n) {
			return false
		}
		base := (i*sumWays+w)*sumChunk + in
		copy(dst, c.sums[base:base+len(dst)])
		s.tick++
		en.used = s.tick
		return true
	}
	return false
}

// put keeps the sums of the record whose header is at hdr, each chunk in
// place of its set's least recently used entry.
func (c *sumCache) put(hdr int64, gen uint32, sums []uint32) {
	for chunk := 0; chunk*sumChunk < len(sums); chunk++ {
		part := sums[chunk*sumChunk : min(len(sums), (chunk+1)*sumChunk)]
		i, s := c.set(hdr, chunk)
		s.mu.Lock()
		victim := 0
		for w := range s.ways {
			en := &s.ways[w]
			if en.hdr == hdr && en.gen == gen && int(en.chunk) == chunk {
				victim = w
				break
			}
			if en.used < s.ways[victim].used {
				victim = w
			}
		}
		s.tick++
		s.ways[victim] = sumEntry{hdr: hdr, gen: gen, chunk: uint16(chunk), n: uint16(len(part)), used: s.tick}
		copy(c.sums[(i*sumWays+victim)*sumChunk:], part)
		s.mu.Unlock()
	}
}

// maxReadPieces is how many mapped pieces one batched device read takes.
const maxReadPieces = 32

// readScratch is what one checked read needs beside the data: header
// blocks in aligned memory, a header to decode into, and the sums the
// pieces' blocks must have. A fixed set is made at Open.
type readScratch struct {
	mem   []byte // maxReadPieces header blocks
	hdr   RecordHeader
	want  []uint32 // the pieces' blocks' sums, back to back
	start [maxReadPieces]int
	from  [maxReadPieces]int // header read that gives piece i's sums; -1: from the cache
	hdrAt [maxReadPieces]int64
	cold  coldRead // File.StartRead's read, which holds the scratch
}

// scratchPool is the fixed set of read scratch.
type scratchPool struct {
	mem  []byte
	free chan *readScratch
}

func newScratchPool(n int) (*scratchPool, error) {
	mem, err := unix.Mmap(-1, 0, n*maxReadPieces*BlockSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("engine: map read scratch: %w", err)
	}
	p := &scratchPool{mem: mem, free: make(chan *readScratch, n)}
	for i := range n {
		// want is sized for a fill of the largest folio, so that no
		// read grows it (StartRead's allocate nothing).
		p.free <- &readScratch{mem: mem[i*maxReadPieces*BlockSize : (i+1)*maxReadPieces*BlockSize],
			want: make([]uint32, 0, (4096<<cache.MaxOrder)/BlockSize)}
	}
	return p, nil
}

func (p *scratchPool) close() { _ = unix.Munmap(p.mem) }

// readChecked reads the mapped pieces into p (which starts at file
// offset base) with the headers whose sums the cache lacks, in one
// batch, and checks every block (checkSums; quiet, its).
func (e *Engine) readChecked(fileID uint64, pieces []extent, p []byte, base int64, quiet bool) error {
	s := <-e.scratch.free
	defer func() { e.scratch.free <- s }()
	nh := e.planSums(s, pieces)
	_, err := e.readBatch(len(pieces)+nh, func(i int) (int64, []byte) {
		if i < len(pieces) {
			x := pieces[i]
			return x.dev, p[x.off-base : x.off-base+x.len]
		}
		j := i - len(pieces)
		return s.hdrAt[j], s.mem[j*BlockSize : (j+1)*BlockSize]
	})
	e.stats.devRead.Add(int64(nh) * BlockSize)
	e.stats.sumReads.Add(int64(nh))
	if err != nil {
		return err
	}
	return e.checkSums(s, nh, fileID, pieces, p, base, quiet)
}

// planSums sets s up for a checked read of pieces: the sums the cache
// holds go into s.want, and it returns how many headers must be read
// (into s.mem, from s.hdrAt) for the rest.
func (e *Engine) planSums(s *readScratch, pieces []extent) int {
	s.want = s.want[:0]
	nh := 0
	for i, x := range pieces {
		s.start[i] = len(s.want)
		s.want = slices.Grow(s.want, int(x.len/BlockSize))[:s.start[i]+int(x.len/BlockSize)]
		s.from[i] = -1
		if e.sums.get(x.hdr, e.zoneGen(x.hdr), x.firstBlock(), s.want[s.start[i]:]) {
			continue
		}
		for j := range nh {
			if s.hdrAt[j] == x.hdr {
				s.from[i] = j
			}
		}
		if s.from[i] < 0 {
			s.hdrAt[nh] = x.hdr
			s.from[i] = nh
			nh++
		}
	}
	return nh
}

// checkSums checks the blocks of pieces, read into p (which starts at
// file offset base), against their sums: planSums' from the cache, and
// those of the nh headers read into s.mem, which it keeps in the cache.
// A failure is counted (Stats.ChecksumErrs) and a bad data block logged
// unless quiet: bytes read ahead, no reader's (cache.AheadBacking).
func (e *Engine) checkSums(s *readScratch, nh int, fileID uint64, pieces []extent, p []byte, base int64, quiet bool) error {
	count := func() {
		if !quiet {
			e.stats.csumErrs.Add(1)
		}
	}
	for j := range nh {
		at := s.hdrAt[j]
		err := DecodeHeader(s.mem[j*BlockSize:(j+1)*BlockSize], &s.hdr)
		if err == nil && (s.hdr.FS != e.sb.FS() || s.hdr.File != fileID || s.hdr.Kind == KindPad) {
			err = fmt.Errorf("%w: not a record of file %d", ErrCorruptRecord, fileID)
		}
		if err != nil {
			count()
			return fmt.Errorf("engine: header of the record at device offset %d: %v: %w", at, err, ErrChecksum)
		}
		e.sums.put(at, e.zoneGen(at), s.hdr.Sums)
		for i, x := range pieces {
			if s.from[i] != j {
				continue
			}
			first, n := x.firstBlock(), int(x.len/BlockSize)
			if first+n > len(s.hdr.Sums) {
				count()
				return fmt.Errorf("engine: the record at device offset %d has %d blocks, file %d maps block %d of it: %w",
					at, len(s.hdr.Sums), fileID, first+n-1, ErrChecksum)
			}
			copy(s.want[s.start[i]:s.start[i]+n], s.hdr.Sums[first:first+n])
		}
	}
	for i, x := range pieces {
		data := p[x.off-base : x.off-base+x.len]
		if b := badBlock(data, s.want[s.start[i]:s.start[i]+int(x.len/BlockSize)]); b >= 0 {
			count()
			off, dev := x.off+int64(b)*BlockSize, x.dev+int64(b)*BlockSize
			if !quiet {
				slog.Warn("engine: read: a data block fails its checksum", "file", fileID, "offset", off, "device_offset", dev, "version", x.ver)
			}
			return fmt.Errorf("engine: file %d at offset %d (device offset %d): %w", fileID, off, dev, ErrChecksum)
		}
	}
	return nil
}

// zoneGen is the reset generation of the zone holding device offset off.
func (e *Engine) zoneGen(off int64) uint32 {
	if z := e.zoneAt(off); z != nil {
		return z.gen.Load()
	}
	return 0
}
