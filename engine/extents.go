package engine

import "github.com/google/btree"

// extent maps a run of a file's bytes to where they live on the device.
type extent struct {
	off int64  // file offset
	len int64  // bytes
	dev int64  // device byte offset of the first byte
	ver uint64 // sequence number of the write that produced the bytes
	// hdr is the device offset of the header of the record that holds
	// the bytes: it has their block checksums.
	hdr int64
}

// firstBlock is the index, among its record's data blocks, of e's first.
func (e extent) firstBlock() int { return int((e.dev - e.hdr - BlockSize) / BlockSize) }

func (e extent) end() int64 { return e.off + e.len }

// clip returns the part of e inside [lo, hi).
func (e extent) clip(lo, hi int64) extent {
	if lo > e.off {
		e.dev += lo - e.off
		e.len -= lo - e.off
		e.off = lo
	}
	if hi < e.end() {
		e.len = hi - e.off
	}
	return e
}

// extentMap is one file's mapping: non-overlapping extents ordered by file
// offset, in a B-tree (google/btree: sorted, copy-free iteration, and
// O(log n) splits, which a slice would turn into O(n) copies for files
// with many small extents). The caller serialises access.
type extentMap struct {
	t       *btree.BTreeG[extent]
	scratch []extent
}

func newExtentMap() *extentMap {
	return &extentMap{t: btree.NewG(16, func(a, b extent) bool { return a.off < b.off })}
}

// overlapping collects, in order, the extents that overlap [lo, hi), in
// scratch: only for callers holding the file's lock exclusively. The
// result stays valid while the tree changes (insert, relocate and
// truncate walk it while they edit the tree) until the next call; reusing
// it keeps the append-completion path free of allocation.
func (m *extentMap) overlapping(lo, hi int64) []extent {
	m.scratch = m.scratch[:0]
	m.t.DescendLessOrEqual(extent{off: lo}, func(e extent) bool {
		if e.end() > lo {
			m.scratch = append(m.scratch, e)
		}
		return false
	})
	m.t.AscendGreaterOrEqual(extent{off: lo}, func(e extent) bool {
		if e.off >= hi {
			return false
		}
		if len(m.scratch) == 0 || m.scratch[len(m.scratch)-1].off != e.off {
			m.scratch = append(m.scratch, e)
		}
		return true
	})
	return m.scratch
}

// insert maps e's range to e, except where the mapping already holds a
// newer version (a record that completes after a newer one of the same
// bytes, or replay of a GC record). displaced is called with every piece
// that no longer maps anywhere. It returns the bytes of e now mapped.
func (m *extentMap) insert(e extent, displaced func(extent)) int64 {
	var kept int64
	over := m.overlapping(e.off, e.end())
	cursor := e.off
	for _, o := range over {
		m.t.Delete(o)
		if o.ver > e.ver {
			// The newer piece stays; e fills only around it.
			m.t.ReplaceOrInsert(o)
			if o.off > cursor {
				m.t.ReplaceOrInsert(e.clip(cursor, o.off))
			}
			kept += min(o.end(), e.end()) - max(o.off, e.off)
			cursor = max(cursor, o.end())
			continue
		}
		if o.off < e.off {
			m.t.ReplaceOrInsert(o.clip(o.off, e.off))
		}
		if o.end() > e.end() {
			m.t.ReplaceOrInsert(o.clip(e.end(), o.end()))
		}
		if displaced != nil {
			displaced(o.clip(e.off, e.end()))
		}
	}
	if cursor < e.end() {
		m.t.ReplaceOrInsert(e.clip(cursor, e.end()))
	}
	return e.len - kept
}

// relocate points the pieces of [e.off, e.end()) that still hold version
// e.ver at e's device location (GC moved them there). Pieces that were
// overwritten or truncated meanwhile are left alone. It returns how many
// bytes moved; moved is called with each old piece that was replaced.
func (m *extentMap) relocate(e extent, moved func(old extent)) int64 {
	over := m.overlapping(e.off, e.end())
	var n int64
	for _, o := range over {
		if o.ver != e.ver {
			continue
		}
		in := o.clip(e.off, e.end())
		m.t.Delete(o)
		if o.off < in.off {
			m.t.ReplaceOrInsert(o.clip(o.off, in.off))
		}
		if o.end() > in.end() {
			m.t.ReplaceOrInsert(o.clip(in.end(), o.end()))
		}
		m.t.ReplaceOrInsert(e.clip(in.off, in.end()))
		n += in.len
		if moved != nil {
			moved(in)
		}
	}
	return n
}

// lookup calls fn with every mapped piece of [off, off+n), clipped to it,
// in order; holes are skipped. It only reads the tree (no scratch), so
// readers holding the file's lock shared may call it at once.
func (m *extentMap) lookup(off, n int64, fn func(extent)) {
	end := off + n
	startsAtOff := false // the descent gave an extent starting at off
	m.t.DescendLessOrEqual(extent{off: off}, func(e extent) bool {
		if e.end() > off {
			fn(e.clip(off, end))
		}
		startsAtOff = e.off == off
		return false
	})
	m.t.AscendGreaterOrEqual(extent{off: off}, func(e extent) bool {
		if e.off >= end {
			return false
		}
		if e.off == off && startsAtOff {
			return true // already given by the descent
		}
		fn(e.clip(off, end))
		return true
	})
}

// truncate unmaps everything at or past size (rounded up to a block: the
// engine zeroes the tail of a partial last block through the cache).
func (m *extentMap) truncate(size int64, removed func(extent)) {
	size = (size + BlockSize - 1) / BlockSize * BlockSize
	over := m.overlapping(size, 1<<62)
	for _, o := range over {
		m.t.Delete(o)
		if o.off < size {
			m.t.ReplaceOrInsert(o.clip(o.off, size))
		}
		if removed != nil {
			removed(o.clip(size, o.end()))
		}
	}
}

// punch unmaps [lo, hi) (block aligned), calling removed with each piece
// it unmaps.
func (m *extentMap) punch(lo, hi int64, removed func(extent)) {
	for _, o := range m.overlapping(lo, hi) {
		m.t.Delete(o)
		if o.off < lo {
			m.t.ReplaceOrInsert(o.clip(o.off, lo))
		}
		if o.end() > hi {
			m.t.ReplaceOrInsert(o.clip(hi, o.end()))
		}
		if removed != nil {
			removed(o.clip(lo, hi))
		}
	}
}

// each calls fn with every extent in order.
func (m *extentMap) each(fn func(extent) bool) { m.t.Ascend(fn) }

// len is the number of extents.
func (m *extentMap) count() int { return m.t.Len() }
