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
	t   testTB
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

// modelKind is an operation of the model test.
type modelKind int

const (
	modelWrite modelKind = iota
	modelRead
	modelBegin    // begin a writeback, to be ended later
	modelEnd      // end the file's writebacks, some failing
	modelEvict    // evict clean bytes
	modelTruncate // down or up
	modelForget   // the file is removed
	modelFlushAll // write everything back
)

// modelKindOf maps v in [0, 100) to a kind: the model's mix of operations.
func modelKindOf(v int) modelKind {
	switch {
	case v < 35:
		return modelWrite
	case v < 60:
		return modelRead
	case v < 70:
		return modelBegin
	case v < 80:
		return modelEnd
	case v < 85:
		return modelEvict
	case v < 93:
		return modelTruncate
	case v < 96:
		return modelForget
	default:
		return modelFlushAll
	}
}

// modelOp is one operation of the model test.
type modelOp struct {
	kind  modelKind
	file  uint64
	off   int64  // write, read
	n     int    // read: length
	data  []byte // write: never a zero byte (unwritten bytes are)
	bytes int64  // begin: maxBytes; evict: how many
	size  int64  // truncate
}

const (
	modelSpan  = 3 << 20 // bytes of each file the test touches
	modelFiles = 3
)

var modelBlockSizes = []int{512, 1024, 4096}

// modelConfig is a test case's cache: arena bytes (1..4 MiB, so that
// evictions are routine), largest folio order, block size, and a dirty
// limit of half the arena or more than all of it (then writers wait for
// memory rather than for the dirty limit); split sets splitStateLock.
func modelConfig(e *modelEngine, arenaPages, maxOrder, blockSize int, bigLimit bool) Config {
	arena := int64(arenaPages) << 12
	limit := arena / 2
	if bigLimit {
		limit *= 4
	}
	return Config{
		Bytes:      arena,
		MaxOrder:   maxOrder,
		BlockSize:  blockSize,
		DirtyLimit: limit,
		OnPressure: func() { e.onPressure() },
	}
}

// modelRun is one run of the model test: the cache, the engine playing
// storage, and the model, a byte slice per file.
type modelRun struct {
	t     testTB
	c     *Cache
	e     *modelEngine
	model map[uint64][]byte
	// ok says whether the next writeback to end succeeds.
	ok func() bool
}

func newModelRun(t testTB, dir string, cfg func(*modelEngine) Config, split bool, ok func() bool) *modelRun {
	e := &modelEngine{t: t, dir: dir, files: map[uint64]*os.File{}}
	t.Cleanup(func() {
		for _, f := range e.files {
			f.Close()
		}
	})
	c := newTestCache(t, cfg(e))
	c.splitStateLock = split
	e.c = c
	return &modelRun{t: t, c: c, e: e, model: map[uint64][]byte{}, ok: ok}
}

func runModel(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	arenaPages := 256 + rng.IntN(768)
	maxOrder := rng.IntN(MaxOrder + 1)
	blockSize := modelBlockSizes[rng.IntN(len(modelBlockSizes))]
	bigLimit := rng.IntN(2) != 0
	split := rng.IntN(2) == 0
	r := newModelRun(t, t.TempDir(), func(e *modelEngine) Config {
		return modelConfig(e, arenaPages, maxOrder, blockSize, bigLimit)
	}, split, func() bool { return rng.IntN(5) != 0 })

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
		off := rng.Int64N(int64(modelSpan - n + 1))
		if rng.IntN(2) == 0 {
			off &^= pageSize - 1
		}
		return off
	}
	for step := range steps {
		o := modelOp{file: uint64(1 + rng.IntN(modelFiles)), kind: modelKindOf(rng.IntN(100))}
		switch o.kind {
		case modelWrite:
			n := length()
			o.off = offset(n)
			o.data = make([]byte, n)
			for i := range o.data {
				o.data[i] = byte(rng.Uint32()) | 1
			}
		case modelRead:
			o.n = length()
			o.off = offset(o.n)
		case modelBegin:
			o.bytes = int64(rng.IntN(4)) * int64(rng.IntN(64<<10))
		case modelEvict:
			o.bytes = int64(rng.IntN(512 << 10))
		case modelTruncate:
			o.size = rng.Int64N(modelSpan)
		}
		r.apply(step, o)
	}
	r.finish()
}

// run does op on file: inline, or — if the file has writebacks in
// flight, which op may have to wait for — on its own goroutine, and ends
// those writebacks once op is done or has started to wait.
func (r *modelRun) run(file uint64, op func()) {
	c, e := r.c, r.e
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
		e.end(b, r.ok())
	}
	<-done
}

// apply runs o, the step-th operation, on the cache and the model, and
// checks reads and the accounting.
func (r *modelRun) apply(step int, o modelOp) {
	t, c, e, file := r.t, r.c, r.e, o.file
	switch o.kind {
	case modelWrite:
		r.run(file, func() { mustWrite(t, c, file, o.off, o.data, e) })
		m := r.model[file]
		if end := o.off + int64(len(o.data)); end > int64(len(m)) {
			m = append(m, make([]byte, end-int64(len(m)))...)
		}
		copy(m[o.off:], o.data)
		r.model[file] = m
	case modelRead:
		var got []byte
		r.run(file, func() { got = mustRead(t, c, file, o.off, o.n, e) })
		want := make([]byte, o.n)
		if m := r.model[file]; o.off < int64(len(m)) {
			copy(want, m[o.off:])
		}
		if !bytes.Equal(got, want) {
			i := 0
			for got[i] == want[i] {
				i++
			}
			t.Fatalf("step %d: read file %d [%d, +%d): byte %d (file offset %d) = %#x, want %#x",
				step, file, o.off, o.n, i, o.off+int64(i), got[i], want[i])
		}
	case modelBegin:
		e.begin(file, o.bytes)
	case modelEnd:
		if b := e.takePending(file); len(b) > 0 {
			for _, x := range b {
				e.end(x, r.ok())
			}
		}
	case modelEvict:
		c.EvictClean(o.bytes)
	case modelTruncate:
		e.truncate(file, o.size)
		r.run(file, func() { c.Truncate(file, o.size) })
		m := r.model[file]
		if o.size < int64(len(m)) {
			m = m[:o.size]
		} else {
			m = append(m, make([]byte, o.size-int64(len(m)))...)
		}
		r.model[file] = m
	case modelForget:
		e.truncate(file, 0)
		c.Forget(file)
		delete(r.model, file)
	default:
		e.flushAll()
		if d := c.DirtyBytes(); d != 0 {
			t.Fatalf("step %d: %d dirty bytes after writing everything back", step, d)
		}
	}
	checkAccounting(t, c)
}

// finish checks the end of a run: the run evicted and read through, and,
// everything written back, the real files hold the model, and an empty
// cache reads it back from them.
func (r *modelRun) finish() {
	t, c := r.t, r.c
	if s := c.Stats(); s.Evictions == 0 || s.ReadThroughs == 0 {
		t.Errorf("the run never evicted (%d) or read through (%d): it tested less than it should", s.Evictions, s.ReadThroughs)
	}
	r.drain()
}

// drain writes everything back, empties the cache and checks that it
// reads the model back from storage.
func (r *modelRun) drain() {
	t, c, e := r.t, r.c, r.e
	e.flushAll()
	if d, files := c.DirtyBytes(), c.DirtyFiles(nil); d != 0 || len(files) != 0 {
		t.Fatalf("at the end: %d dirty bytes, dirty files %v", d, files)
	}
	c.EvictClean(math.MaxInt64)
	if s := c.Stats(); s.CachedBytes != 0 {
		t.Fatalf("at the end: %d bytes still cached with nothing dirty or in flight", s.CachedBytes)
	}
	for file := uint64(1); file <= modelFiles; file++ {
		want := make([]byte, modelSpan)
		copy(want, r.model[file])
		checkBytes(t, fmt.Sprintf("file %d from storage", file), mustRead(t, c, file, 0, modelSpan, e), want)
	}
}

// checkAccounting: folio counts add up to the memory in use, and dirty
// bytes are whole blocks.
func checkAccounting(t testTB, c *Cache) {
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
