// Package stampfile is the crash tests' model of a file of stamped
// blocks: the power-cut loop (engine) and the kill -9 loop (cli) both
// overwrite runs of blocks with (file, block, stamp) triples, fsync now
// and then, and after each crash check that every block holds either the
// stamp an fsync acknowledged or one written after it.
//
// Invariant: for each block, Durable is the newest stamp a returned
// fsync covered, and Later holds every stamp written since; after a
// crash the block must hold Durable or a member of Later, intact.
//
// A File is not safe for concurrent use: the loops guard it with their
// own mutex, because a writer's Begin and the checker's Check must see
// one consistent model.
package stampfile

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
)

// File models one stamped file of fixed-size blocks.
type File struct {
	Name  string
	Index int // the file number stamped into every triple
	Block int // block size in bytes

	durable []uint64
	later   []map[uint64]bool
	next    uint64
}

// New returns the model of a file whose every block was written with
// stamp 1 and fsynced; Initial fills the matching content.
func New(name string, index, blocks, blockSize int) *File {
	f := &File{Name: name, Index: index, Block: blockSize,
		durable: make([]uint64, blocks), later: make([]map[uint64]bool, blocks), next: 2}
	for b := range f.durable {
		f.durable[b] = 1
	}
	return f
}

// Blocks is the file's length in blocks.
func (f *File) Blocks() int { return len(f.durable) }

// Initial fills p (the whole file) with every block's first stamp.
func (f *File) Initial(p []byte) {
	for b := range f.durable {
		Stamp(p[b*f.Block:(b+1)*f.Block], f.Index, b, 1)
	}
}

// Stamp fills a block with (file, block, stamp) triples.
func Stamp(p []byte, file, block int, k uint64) {
	for i := 0; i+24 <= len(p); i += 24 {
		binary.LittleEndian.PutUint64(p[i:], uint64(file)+1)
		binary.LittleEndian.PutUint64(p[i+8:], uint64(block))
		binary.LittleEndian.PutUint64(p[i+16:], k)
	}
}

// Begin records a write of blocks [b, b+n) with a fresh stamp, appends
// those blocks to since (the blocks the next fsync will cover) and
// returns the stamp. Fill the buffer with Fill before writing it.
func (f *File) Begin(b, n int, since []int) (uint64, []int) {
	k := f.next
	f.next++
	for j := range n {
		if f.later[b+j] == nil {
			f.later[b+j] = map[uint64]bool{}
		}
		f.later[b+j][k] = true
		since = append(since, b+j)
	}
	return k, since
}

// Fill stamps buf with n blocks starting at block b under stamp k.
func (f *File) Fill(buf []byte, b, n int, k uint64) {
	for j := range n {
		Stamp(buf[j*f.Block:(j+1)*f.Block], f.Index, b+j, k)
	}
}

// Synced records that an fsync returned after the writes to since:
// each block's newest stamp is now durable.
func (f *File) Synced(since []int) {
	for _, blk := range since {
		var newest uint64
		for s := range f.later[blk] {
			newest = max(newest, s)
		}
		if newest > 0 {
			f.durable[blk] = newest
		}
		f.later[blk] = nil
	}
}

// Check verifies block b's content after a crash. On success the stamp
// found becomes the durable one (the device now holds it for good); on
// failure the error says what the block held and what was allowed.
func (f *File) Check(b int, blk []byte) error {
	k := binary.LittleEndian.Uint64(blk[16:])
	want := make([]byte, f.Block)
	Stamp(want, f.Index, b, k)
	whole := f.Block / 24 * 24
	intact := bytes.Equal(blk[:whole], want[:whole])
	if !intact || (k != f.durable[b] && !f.later[b][k]) {
		return fmt.Errorf("%s block %d: holds stamp %d (intact %v); fsync acknowledged %d, later writes %v",
			f.Name, b, k, intact, f.durable[b], laterStamps(f.later[b]))
	}
	f.durable[b] = k
	f.later[b] = nil
	return nil
}

func laterStamps(m map[uint64]bool) []uint64 {
	ks := make([]uint64, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
