package cache

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

// The model test runs random sequences of writes (any offset and length,
// sub-block ones included), reads, writebacks begun and ended later (some
// failing), evictions, truncates and forgets against a plain byte slice
// per file, with real files as Backing. Every read must equal the model —
// so no read returns bytes that were neither written nor zero — and bytes
// in flight must never change (stable pages).

// modelEngine plays the engine: it owns the real files, writes extents
// into them when a writeback ends, and truncates them.
type modelEngine struct {
	t   *testing.T
	dir string
	c   *Cache

	mu      sync.Mutex // files, pending
	files   map[uint64]*os.File
	pending []*pendingBatch

	allocWaits uint64 // as onPressure last saw it; one op runs at a time
}

// pendingBatch is a writeback begun and not yet ended.
type pendingBatch struct {
	file  uint64
	exts  []Extent
	saved [][]byte // the bytes at Begin: they must not change in flight
	// clip is the smallest size the file had since Begin: bytes past it
	// were truncated away meanwhile and must not reach storage (the
	// engine's own rule for writebacks that race a truncate).
	clip int64
}

func (e *modelEngine) file(id uint64) *os.File {
	f := e.files[id]
	if f == nil {
		var err error
		f, err = os.Create(filepath.Join(e.dir, fmt.Sprint(id)))
		if err != nil {
			e.t.Fatal(err)
		}
		e.files[id] = f
	}
	return f
}

func (e *modelEngine) ReadBacking(file uint64, off int64, p []byte) error {
	e.mu.Lock()
	f := e.file(file)
	e.mu.Unlock()
	n, err := f.ReadAt(p, off)
	clear(p[n:]) // past EOF: never written
	if err != nil && n < len(p) && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

func (e *modelEngine) begin(file uint64, maxBytes int64) {
	exts := e.c.BeginWriteback(file, maxBytes, nil)
	if len(exts) == 0 {
		return
	}
	b := &pendingBatch{file: file, exts: exts, clip: math.MaxInt64}
	for _, x := range exts {
		b.saved = append(b.saved, bytes.Clone(x.Data))
	}
	e.mu.Lock()
	e.pending = append(e.pending, b)
	e.mu.Unlock()
}

// end finishes a batch: on success its bytes go to the real file first,
// then EndWriteback, as the engine would after the device completes.
func (e *modelEngine) end(b *pendingBatch, ok bool) {
	for i, x := range b.exts {
		if !bytes.Equal(x.Data, b.saved[i]) {
			e.t.Errorf("file %d: bytes at %d changed while under writeback", b.file, x.Off)
		}
	}
	var err error
	if ok {
		e.mu.Lock()
		f := e.file(b.file)
		for _, x := range b.exts {
			if n := min(int64(len(x.Data)), b.clip-x.Off); n > 0 {
				if _, werr := f.WriteAt(x.Data[:n], x.Off); werr != nil {
					e.t.Error(werr)
				}
			}
		}
		e.mu.Unlock()
	} else {
		err = syscall.EIO
	}
	e.c.EndWriteback(b.exts, err)
}

// takePending removes and returns the pending batches of file (all files
// if file is 0).
func (e *modelEngine) takePending(file uint64) []*pendingBatch {
	e.mu.Lock()
	defer e.mu.Unlock()
	var taken, kept []*pendingBatch
	for _, b := range e.pending {
		if file == 0 || b.file == file {
			taken = append(taken, b)
		} else {
			kept = append(kept, b)
		}
	}
	e.pending = kept
	return taken
}

// onPressure is a lazy writeback layer: it ignores the background
// threshold, so writers reach the dirty limit and are throttled, and
// flushes everything when a writer is about to wait for dirty bytes or
// memory.
func (e *modelEngine) onPressure() {
	s := e.c.Stats()
	if s.DirtyBytes > e.c.limit || s.AllocWaits != e.allocWaits {
		e.allocWaits = s.AllocWaits
		e.flushAll()
	}
}

// flushAll ends every pending batch and writes back everything.
func (e *modelEngine) flushAll() {
	for _, b := range e.takePending(0) {
		e.end(b, true)
	}
	for _, file := range e.c.DirtyFiles(nil) {
		e.begin(file, 0)
	}
	for _, b := range e.takePending(0) {
		e.end(b, true)
	}
}

func (e *modelEngine) truncate(file uint64, size int64) {
	e.mu.Lock()
	for _, b := range e.pending {
		if b.file == file {
			b.clip = min(b.clip, size)
		}
	}
	if err := e.file(file).Truncate(size); err != nil {
		e.t.Error(err)
	}
	e.mu.Unlock()
}

func TestModel(t *testing.T) {
	seeds := 48
	if raceEnabled || testing.Short() {
		seeds = 16 // the race detector makes each seed ~15x slower
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			runModel(t, uint64(seed), 400)
		})
	}
}

func runModel(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	const span = 3 << 20 // bytes of each file the test touches
	const nfiles = 3
	blockSizes := []int{512, 1024, 4096}
	e := &modelEngine{t: t, dir: t.TempDir(), files: map[uint64]*os.File{}}
	t.Cleanup(func() {
		for _, f := range e.files {
			f.Close()
		}
	})
	arena := int64(256+rng.IntN(768)) << 12 // 1..4 MiB: evictions are routine
	cfg := Config{
		Bytes:     arena,
		MaxOrder:  rng.IntN(MaxOrder + 1),
		BlockSize: blockSizes[rng.IntN(len(blockSizes))],
		// Half the arena, or more than all of it: then writers wait
		// for memory rather than for the dirty limit.
		DirtyLimit: arena / 2 * int64(1+3*rng.IntN(2)),
		OnPressure: func() { e.onPressure() },
	}
	split := rng.IntN(2) == 0
	c := newTestCache(t, cfg)
	c.splitStateLock = split
	e.c = c
	model := make(map[uint64][]byte)

	length := func() int {
		switch r := rng.IntN(10); {
		case r < 4:
			return 1 + rng.IntN(2000)
		case r < 7:
			return 1 + rng.IntN(64<<10)
		default:
			return 1 + rng.IntN(512<<10)
		}
	}
	offset := func(n int) int64 {
		off := rng.Int64N(int64(span - n + 1))
		if rng.IntN(2) == 0 {
			off &^= pageSize - 1
		}
		return off
	}
	// run does op on file: inline, or — if the file has writebacks in
	// flight, which op may have to wait for — on its own goroutine, and
	// ends those writebacks once op is done or has started to wait.
	run := func(file uint64, op func()) {
		batches := e.takePending(file)
		if len(batches) == 0 {
			op()
			return
		}
		waits := func() uint64 { s := c.Stats(); return s.StableWaits + s.AllocWaits + s.Throttles }
		before := waits()
		done := make(chan struct{})
		go func() { defer close(done); op() }()
		waitUntil(func() bool {
			select {
			case <-done:
				return true
			default:
				return waits() != before
			}
		})
		for _, b := range batches {
			e.end(b, rng.IntN(5) != 0)
		}
		<-done
	}

	for step := range steps {
		file := uint64(1 + rng.IntN(nfiles))
		switch r := rng.IntN(100); {
		case r < 35: // write
			n := length()
			off := offset(n)
			p := make([]byte, n)
			for i := range p {
				p[i] = byte(rng.Uint32()) | 1 // never zero: unwritten bytes are
			}
			run(file, func() { mustWrite(t, c, file, off, p, e) })
			m := model[file]
			if end := off + int64(n); end > int64(len(m)) {
				m = append(m, make([]byte, end-int64(len(m)))...)
			}
			copy(m[off:], p)
			model[file] = m
		case r < 60: // read
			n := length()
			off := offset(n)
			var got []byte
			run(file, func() { got = mustRead(t, c, file, off, n, e) })
			want := make([]byte, n)
			if m := model[file]; off < int64(len(m)) {
				copy(want, m[off:])
			}
			if !bytes.Equal(got, want) {
				i := 0
				for got[i] == want[i] {
					i++
				}
				t.Fatalf("step %d: read file %d [%d, +%d): byte %d (file offset %d) = %#x, want %#x",
					step, file, off, n, i, off+int64(i), got[i], want[i])
			}
		case r < 70: // begin a writeback, to be ended later
			e.begin(file, int64(rng.IntN(4))*int64(rng.IntN(64<<10)))
		case r < 80: // end a writeback, one in five failing
			if b := e.takePending(file); len(b) > 0 {
				for _, x := range b {
					e.end(x, rng.IntN(5) != 0)
				}
			}
		case r < 85:
			c.EvictClean(int64(rng.IntN(512 << 10)))
		case r < 93: // truncate, down or up
			size := rng.Int64N(span)
			e.truncate(file, size)
			run(file, func() { c.Truncate(file, size) })
			m := model[file]
			if size < int64(len(m)) {
				m = m[:size]
			} else {
				m = append(m, make([]byte, size-int64(len(m)))...)
			}
			model[file] = m
		case r < 96: // the file is removed
			e.truncate(file, 0)
			c.Forget(file)
			delete(model, file)
		default:
			e.flushAll()
			if d := c.DirtyBytes(); d != 0 {
				t.Fatalf("step %d: %d dirty bytes after writing everything back", step, d)
			}
		}
		checkAccounting(t, c)
	}

	if s := c.Stats(); s.Evictions == 0 || s.ReadThroughs == 0 {
		t.Errorf("the run never evicted (%d) or read through (%d): it tested less than it should", s.Evictions, s.ReadThroughs)
	}
	// Everything written back, the real files hold the model, and an
	// empty cache reads it back from them.
	e.flushAll()
	if d, files := c.DirtyBytes(), c.DirtyFiles(nil); d != 0 || len(files) != 0 {
		t.Fatalf("at the end: %d dirty bytes, dirty files %v", d, files)
	}
	c.EvictClean(math.MaxInt64)
	if s := c.Stats(); s.CachedBytes != 0 {
		t.Fatalf("at the end: %d bytes still cached with nothing dirty or in flight", s.CachedBytes)
	}
	for file := uint64(1); file <= nfiles; file++ {
		want := make([]byte, span)
		copy(want, model[file])
		checkBytes(t, fmt.Sprintf("file %d from storage", file), mustRead(t, c, file, 0, span, e), want)
	}
}

// checkAccounting: folio counts add up to the memory in use, and dirty
// bytes are whole blocks.
func checkAccounting(t *testing.T, c *Cache) {
	t.Helper()
	s := c.Stats()
	var pages int64
	for k, n := range s.Folios {
		pages += n << k
	}
	if pages*pageSize != s.CachedBytes {
		t.Fatalf("folios by order %v hold %d bytes, but %d are in use", s.Folios, pages*pageSize, s.CachedBytes)
	}
	if s.DirtyBytes < 0 || s.DirtyBytes%int64(c.BlockSize()) != 0 || s.DirtyBytes > s.CachedBytes {
		t.Fatalf("dirty bytes %d (cached %d, block size %d)", s.DirtyBytes, s.CachedBytes, c.BlockSize())
	}
}
