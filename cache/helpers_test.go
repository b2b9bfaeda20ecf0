package cache

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"pgregory.net/rapid"
)

// testTB is what the helpers need of a test: a *testing.T or *testing.B,
// or the *rapid.T of a property test.
type testTB interface {
	rapid.TB
	Cleanup(func())
}

// newTestCache makes a cache whose arena, and every folio it frees, is
// filled with 0xA5: a read that ever returns memory that was neither
// written nor read through Backing shows it.
func newTestCache(t testTB, cfg Config) *Cache {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.poison = true
	for i := range c.arena {
		c.arena[i] = 0xA5
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// memBacking is stored data kept in memory: what the engine would serve.
type memBacking struct {
	mu    sync.Mutex
	files map[uint64][]byte
	reads int
}

func newMemBacking() *memBacking { return &memBacking{files: map[uint64][]byte{}} }

func (m *memBacking) ReadBacking(file uint64, off int64, p []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads++
	clear(p)
	if d := m.files[file]; off < int64(len(d)) {
		copy(p, d[off:])
	}
	return nil
}

func (m *memBacking) store(file uint64, off int64, p []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.files[file]
	if end := off + int64(len(p)); end > int64(len(d)) {
		d = append(d, make([]byte, end-int64(len(d)))...)
	}
	copy(d[off:], p)
	m.files[file] = d
}

func (m *memBacking) truncate(file uint64, size int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if d := m.files[file]; int64(len(d)) > size {
		m.files[file] = d[:size]
	}
}

// flush writes back everything dirty, as the writeback layer would.
func (m *memBacking) flush(c *Cache) {
	for _, file := range c.DirtyFiles(nil) {
		exts := c.BeginWriteback(file, 0, nil)
		for _, e := range exts {
			m.store(file, e.Off, e.Data)
		}
		c.EndWriteback(exts, nil)
	}
}

func mustWrite(t testTB, c *Cache, file uint64, off int64, p []byte, b Backing) {
	t.Helper()
	if n, err := c.Write(context.Background(), c.File(file), off, p, b); err != nil || n != len(p) {
		t.Fatalf("Write(file %d, off %d, %d bytes) = %d, %v", file, off, len(p), n, err)
	}
}

func mustRead(t testTB, c *Cache, file uint64, off int64, n int, b Backing) []byte {
	t.Helper()
	p := make([]byte, n)
	if got, err := c.Read(context.Background(), c.File(file), off, p, b); err != nil || got != n {
		t.Fatalf("Read(file %d, off %d, %d bytes) = %d, %v", file, off, n, got, err)
	}
	return p
}

func fill(n int, seed byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = seed + byte(i*7)
	}
	return p
}

func checkBytes(t testTB, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("%s: differs at byte %d of %d (got %#x...)", what, i, len(want), got[i:min(i+8, len(got))])
	}
}

// folioOf returns the folio that caches file's byte off, or nil.
func folioOf(c *Cache, file uint64, off int64) *folio {
	fs := c.file(file)
	if fs == nil {
		return nil
	}
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	ck := fs.chunk(off >> chunkShift)
	if ck == nil {
		return nil
	}
	_, f := ck.find(off)
	return f
}

// blockState returns the uptodate and dirty bits of the block that holds
// file's byte off.
func blockState(c *Cache, file uint64, off int64) (uptodate, dirty bool) {
	f := folioOf(c, file, off)
	if f == nil {
		return false, false
	}
	b := int(off-f.off) >> c.blockShift
	f.stateMu.Lock()
	defer f.stateMu.Unlock()
	return bitSet(f.state, b), bitSet(f.state, f.nblocks+b)
}

// newKickCache is newTestCache with a 64 KiB dirty limit over a 4 MiB
// arena whose OnPressure signals on the returned channel (one pending
// signal at most): for tests that play the writeback layer themselves.
func newKickCache(t testing.TB) (*Cache, chan struct{}) {
	kick := make(chan struct{}, 1)
	c := newTestCache(t, Config{Bytes: 4 << 20, MaxOrder: 9, DirtyLimit: 64 << 10,
		OnPressure: func() {
			select {
			case kick <- struct{}{}:
			default:
			}
		}})
	return c, kick
}
