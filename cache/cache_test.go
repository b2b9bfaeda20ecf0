package cache

import (
	"context"
	"errors"
	"math"
	"runtime"
	"syscall"
	"testing"
)

func TestOrderFor(t *testing.T) {
	for _, tc := range []struct {
		start, limit int64
		max, want    int
	}{
		{0, 128 << 10, 9, 5},
		{0, 128 << 10, 0, 0},
		{0, 128 << 10, 3, 3},
		{4 << 10, 132 << 10, 9, 0}, // 4 KiB-aligned only
		{64 << 10, 192 << 10, 9, 4},
		{0, 4 << 20, 9, 9}, // capped by the 2 MiB maximum
		{2 << 20, 2<<20 + 4096, 9, 0},
		{0, 12 << 10, 9, 1}, // 8 KiB fits, 16 KiB does not
	} {
		if got := orderFor(tc.start, tc.limit, tc.max); got != tc.want {
			t.Errorf("orderFor(%d, %d, max %d) = %d, want %d", tc.start, tc.limit, tc.max, got, tc.want)
		}
	}
}

// TestOrderHint checks which folios writes make: the largest aligned order
// each part of the write covers, capped, and no more than the gaps between
// existing folios — with every byte read back as written.
func TestOrderHint(t *testing.T) {
	const K, M = 1 << 10, 1 << 20
	type write struct{ off, n int64 }
	for _, tc := range []struct {
		name     string
		maxOrder int
		writes   []write
		want     map[int]uint64 // folios created by order
	}{
		{"128K aligned", 9, []write{{0, 128 * K}}, map[int]uint64{5: 1}},
		{"128K aligned, max 0", 0, []write{{0, 128 * K}}, map[int]uint64{0: 32}},
		{"128K aligned, max 3", 3, []write{{0, 128 * K}}, map[int]uint64{3: 4}},
		{"128K at 4K", 9, []write{{4 * K, 128 * K}}, map[int]uint64{0: 2, 1: 1, 2: 1, 3: 1, 4: 1}},
		{"128K at 1000 rounds out", 9, []write{{1000, 128 * K}}, map[int]uint64{5: 1, 0: 1}},
		{"sub-page", 9, []write{{100, 1000}}, map[int]uint64{0: 1}},
		{"2M", 9, []write{{0, 2 * M}}, map[int]uint64{9: 1}},
		{"4M at 1M", 9, []write{{1 * M, 4 * M}}, map[int]uint64{8: 2, 9: 1}},
		{"around a small folio", 9, []write{{8 * K, 4 * K}, {0, 128 * K}},
			map[int]uint64{0: 2, 1: 1, 2: 1, 3: 1, 4: 1}},
		{"inside a large folio", 9, []write{{0, 128 * K}, {8 * K, 4 * K}, {100 * K, 100 * K}},
			map[int]uint64{5: 1, 4: 1, 1: 1}}, // 100K..128K lands in the 128K folio
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCache(t, Config{Bytes: 16 * M, MaxOrder: tc.maxOrder})
			model := make([]byte, 8*M)
			for i, w := range tc.writes {
				p := fill(int(w.n), byte(i+1))
				mustWrite(t, c, 1, w.off, p, nil)
				copy(model[w.off:], p)
			}
			got := c.Stats().FoliosCreated
			for k := range got {
				if got[k] != tc.want[k] {
					t.Fatalf("folios created by order = %v, want %v", got, tc.want)
				}
			}
			checkBytes(t, "read back", mustRead(t, c, 1, 0, 8*M, nil), model)
		})
	}
}

// TestPartialBlockReadsBacking: a write of part of a block that is not
// uptodate keeps the block's other bytes from storage.
func TestPartialBlockReadsBacking(t *testing.T) {
	b := newMemBacking()
	stored := fill(8192, 0x40)
	b.store(1, 0, stored)
	c := newTestCache(t, Config{Bytes: 1 << 20, MaxOrder: 9})
	mustWrite(t, c, 1, 10, []byte("hello"), b)
	want := append([]byte(nil), stored...)
	copy(want[10:], "hello")
	checkBytes(t, "read", mustRead(t, c, 1, 0, 8192, b), want)
	if s := c.Stats(); s.ReadThroughs != 1 {
		t.Errorf("read-throughs = %d, want 1", s.ReadThroughs)
	}
	// A write spanning two partial blocks reads both, once each.
	mustWrite(t, c, 2, 4000, make([]byte, 200), b)
	if s := c.Stats(); s.ReadThroughs != 3 {
		t.Errorf("read-throughs = %d, want 3", s.ReadThroughs)
	}
}

// TestNeverWrittenBlocksStayNotUptodate is the stale-data case of the
// iomap series: blocks of a folio that no write covered must not be marked
// uptodate, or recycled arena memory (0xA5 here) would be read.
func TestNeverWrittenBlocksStayNotUptodate(t *testing.T) {
	c := newTestCache(t, Config{Bytes: 1 << 20, MaxOrder: 9, BlockSize: 1024})
	b := newMemBacking()
	mustWrite(t, c, 1, 1024+10, fill(1000, 1), b) // block 1 of a 4 KiB folio, in part
	for blk, want := range []bool{false, true, false, false} {
		if up, dirty := blockState(c, 1, int64(blk)*1024); up != want || dirty != want {
			t.Errorf("block %d: uptodate %v dirty %v, want %v", blk, up, dirty, want)
		}
	}
	want := make([]byte, 4096)
	copy(want[1034:], fill(1000, 1))
	checkBytes(t, "read", mustRead(t, c, 1, 0, 4096, b), want)

	// Truncating inside a block that is not uptodate leaves it so: only
	// uptodate bytes are zeroed, nothing is zeroed into uptodate.
	c2 := newTestCache(t, Config{Bytes: 1 << 20, MaxOrder: 9, BlockSize: 1024})
	mustWrite(t, c2, 1, 0, fill(1024, 2), nil)      // block 0 whole
	mustWrite(t, c2, 1, 3*1024, fill(1024, 3), nil) // block 3 whole
	c2.Truncate(1, 2*1024+5)
	for blk, want := range []bool{true, false, false, false} {
		if up, _ := blockState(c2, 1, int64(blk)*1024); up != want {
			t.Errorf("after truncate, block %d uptodate %v, want %v", blk, up, want)
		}
	}
	want = make([]byte, 4096)
	copy(want, fill(1024, 2))
	checkBytes(t, "read after truncate", mustRead(t, c2, 1, 0, 4096, nil), want)
}

// TestTruncateZeroesTail: the uptodate block that holds the new size keeps
// its head and reads zeros past it; blocks past it are gone.
func TestTruncateZeroesTail(t *testing.T) {
	c := newTestCache(t, Config{Bytes: 1 << 20, MaxOrder: 9})
	b := newMemBacking()
	mustWrite(t, c, 1, 0, fill(64<<10, 9), b)
	c.Truncate(1, 5000)
	b.truncate(1, 5000)
	if got := c.DirtyBytes(); got != 8192 {
		t.Errorf("dirty after truncate = %d, want the 2 blocks below the size", got)
	}
	want := make([]byte, 64<<10)
	copy(want, fill(5000, 9))
	checkBytes(t, "read", mustRead(t, c, 1, 0, 64<<10, b), want)
	c.Truncate(1, 0)
	if got := c.DirtyBytes(); got != 0 {
		t.Errorf("dirty after truncate to 0 = %d", got)
	}
	if s := c.Stats(); s.CachedBytes != 0 {
		t.Errorf("cached %d bytes after truncate to 0", s.CachedBytes)
	}
}

func TestWritebackExtents(t *testing.T) {
	c := newTestCache(t, Config{Bytes: 16 << 20, MaxOrder: 9})
	mustWrite(t, c, 1, 4<<20, fill(8192, 1), nil) // later chunk first
	mustWrite(t, c, 1, 0, fill(128<<10, 2), nil)
	mustWrite(t, c, 1, 256<<10, fill(4096, 3), nil)
	exts := c.BeginWriteback(1, 64<<10, nil)
	if len(exts) != 1 || exts[0].Off != 0 || len(exts[0].Data) != 64<<10 {
		t.Fatalf("first 64K: %d extents, first at %d", len(exts), exts[0].Off)
	}
	exts = c.BeginWriteback(1, 0, exts)
	var offs []int64
	for _, e := range exts {
		offs = append(offs, e.Off, int64(len(e.Data)))
	}
	want := []int64{0, 64 << 10, 64 << 10, 64 << 10, 256 << 10, 4096, 4 << 20, 8192}
	if len(offs) != len(want) {
		t.Fatalf("extents (off, len) = %v, want %v", offs, want)
	}
	for i := range want {
		if offs[i] != want[i] {
			t.Fatalf("extents (off, len) = %v, want %v", offs, want)
		}
	}
	if more := c.BeginWriteback(1, 0, nil); len(more) != 0 {
		t.Errorf("data under writeback taken again: %d extents", len(more))
	}
	dirty := c.DirtyBytes()
	c.EndWriteback(exts[:2], syscall.EIO)
	if c.DirtyBytes() != dirty {
		t.Errorf("failed writeback changed dirty bytes %d -> %d", dirty, c.DirtyBytes())
	}
	again := c.BeginWriteback(1, 0, nil)
	if len(again) != 1 || again[0].Off != 0 || len(again[0].Data) != 128<<10 {
		t.Errorf("after a failed writeback the data is not offered again whole: %d extents", len(again))
	}
	c.EndWriteback(again, nil)
	c.EndWriteback(exts[2:], nil)
	if c.DirtyBytes() != 0 || len(c.DirtyFiles(nil)) != 0 {
		t.Errorf("after writeback: %d dirty bytes, dirty files %v", c.DirtyBytes(), c.DirtyFiles(nil))
	}
	if s := c.Stats(); s.WritebackErrors != 2 {
		t.Errorf("writeback errors = %d, want 2", s.WritebackErrors)
	}
}

// BeginWriteback goes round a file: a call with a budget starts where the
// last one ran out, so data dirtied again before that point waits its
// turn behind the rest of the file instead of being taken first (and
// each call does not pass again over everything the earlier ones took),
// and the call that reaches the end wraps round to the start.
func TestWritebackGoesRoundTheFile(t *testing.T) {
	c := newTestCache(t, Config{Bytes: 16 << 20, MaxOrder: 9})
	for i := range int64(3) { // three chunks: A at 0, B at 2M, C at 4M
		mustWrite(t, c, 1, i<<21, fill(64<<10, byte(i+1)), nil)
	}
	take := func(want int64) []Extent {
		t.Helper()
		exts := c.BeginWriteback(1, 64<<10, nil)
		if len(exts) != 1 || exts[0].Off != want {
			var offs []int64
			for _, e := range exts {
				offs = append(offs, e.Off)
			}
			t.Fatalf("took extents at %v, want one at %d", offs, want)
		}
		return exts
	}
	a := take(0)
	c.EndWriteback(a, nil)
	mustWrite(t, c, 1, 0, fill(64<<10, 9), nil) // A dirty again
	b := take(2 << 20)                          // B before A's new data
	cc := take(4 << 20)
	a = take(0) // then round to A
	if more := c.BeginWriteback(1, 0, nil); len(more) != 0 {
		t.Errorf("nothing left dirty, yet %d extents taken", len(more))
	}
	c.EndWriteback(b, nil)
	c.EndWriteback(cc, nil)
	c.EndWriteback(a, nil)
	if c.DirtyBytes() != 0 {
		t.Errorf("%d dirty bytes after every extent ended", c.DirtyBytes())
	}
}

// waitUntil yields until cond holds: for states that a goroutine is sure to
// reach, with no time limit of its own (the test's deadline is the limit).
func waitUntil(cond func() bool) {
	for !cond() {
		runtime.Gosched()
	}
}

// TestStablePages: a write to a block under writeback waits, and the bytes
// in flight never change; a write to other blocks does not wait.
func TestStablePages(t *testing.T) {
	c := newTestCache(t, Config{Bytes: 1 << 20, MaxOrder: 9})
	old := fill(16<<10, 1)
	mustWrite(t, c, 1, 0, old, nil)
	exts := c.BeginWriteback(1, 8192, nil) // blocks 0 and 1 in flight
	mustWrite(t, c, 1, 12<<10, fill(100, 2), nil)

	done := make(chan error, 1)
	go func() {
		_, err := c.Write(context.Background(), c.File(1), 4000, fill(200, 3), nil)
		done <- err
	}()
	waitUntil(func() bool { return c.Stats().StableWaits > 0 })
	select {
	case err := <-done:
		t.Fatalf("write to a block in flight returned (%v) before EndWriteback", err)
	default:
	}
	checkBytes(t, "bytes in flight", exts[0].Data, old[:8192])
	c.EndWriteback(exts, nil)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if up, dirty := blockState(c, 1, 4000); !up || !dirty {
		t.Errorf("re-dirtied block: uptodate %v dirty %v", up, dirty)
	}
	if got := c.DirtyBytes(); got != 16<<10 {
		t.Errorf("dirty = %d, want all 4 blocks (2 never written back, 1 and 0 re-dirtied)", got)
	}

	// A context that ends while waiting fails the write, and it changed
	// nothing.
	exts = c.BeginWriteback(1, 0, exts[:0])
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, err := c.Write(ctx, c.File(1), 0, fill(10, 4), nil)
		done <- err
	}()
	waitUntil(func() bool { return c.Stats().StableWaits > 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled write: %v, want context.Canceled", err)
	}
	c.EndWriteback(exts, nil)
}

// TestThrottle: above the dirty limit a writer blocks, asks for writeback,
// and goes on when writeback brings dirty bytes down; a cancelled context
// unblocks it with an error.
func TestThrottle(t *testing.T) {
	pressure := make(chan struct{}, 100)
	c := newTestCache(t, Config{Bytes: 4 << 20, MaxOrder: 9, DirtyLimit: 64 << 10,
		OnPressure: func() { pressure <- struct{}{} }})
	mustWrite(t, c, 1, 0, fill(128<<10, 1), nil)
	<-pressure // crossed the background threshold

	done := make(chan error, 1)
	go func() {
		_, err := c.Write(context.Background(), c.File(2), 0, fill(4096, 2), nil)
		done <- err
	}()
	<-pressure // the writer asks for writeback before it waits
	select {
	case err := <-done:
		t.Fatalf("write over the dirty limit returned (%v) before writeback", err)
	default:
	}
	b := newMemBacking()
	b.flush(c)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	mustWrite(t, c, 1, 0, fill(128<<10, 3), nil)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		n, err := c.Write(ctx, c.File(2), 0, fill(4096, 4), nil)
		if n != 0 {
			err = errors.New("a throttled write wrote bytes")
		}
		done <- err
	}()
	for len(pressure) == 0 {
		runtime.Gosched()
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled throttled write: %v, want context.Canceled", err)
	}
	if s := c.Stats(); s.Throttles != 2 {
		t.Errorf("throttles = %d, want 2", s.Throttles)
	}
}

// TestEvictionLRU: with the arena full, clean folios go oldest first, and
// one read since it was queued gets a second chance.
func TestEvictionLRU(t *testing.T) {
	c := newTestCache(t, Config{Bytes: 64 << 10, MaxOrder: 0, DirtyLimit: 64 << 10})
	b := newMemBacking()
	for i := range int64(16) {
		mustWrite(t, c, 1, i*4096, fill(4096, byte(i)), b)
	}
	b.flush(c)
	mustRead(t, c, 1, 0, 4096, b) // page 0 used again
	mustWrite(t, c, 2, 0, fill(8192, 100), b)
	if s := c.Stats(); s.Evictions != 2 {
		t.Fatalf("evictions = %d, want 2", s.Evictions)
	}
	for i, want := range []bool{true, false, false, true} {
		if got := folioOf(c, 1, int64(i)*4096) != nil; got != want {
			t.Errorf("page %d cached %v, want %v", i, got, want)
		}
	}
	checkBytes(t, "evicted page read back", mustRead(t, c, 1, 4096, 4096, b), fill(4096, 1))
	if freed := c.EvictClean(1 << 20); freed != 64<<10-8192 {
		t.Errorf("EvictClean freed %d; want all but the dirty 8K", freed)
	}
}

// TestAllocWaitsForWriteback: with every folio dirty, a writer that needs
// memory asks for writeback and waits for it rather than failing.
func TestAllocWaitsForWriteback(t *testing.T) {
	pressure := make(chan struct{}, 100)
	c := newTestCache(t, Config{Bytes: 64 << 10, MaxOrder: 9, DirtyLimit: 1 << 30,
		BackgroundDirty: 1 << 30, OnPressure: func() { pressure <- struct{}{} }})
	mustWrite(t, c, 1, 0, fill(64<<10, 1), nil)
	done := make(chan error, 1)
	go func() {
		_, err := c.Write(context.Background(), c.File(2), 0, fill(8192, 2), nil)
		done <- err
	}()
	<-pressure
	select {
	case err := <-done:
		t.Fatalf("write with no memory returned (%v) before writeback", err)
	default:
	}
	b := newMemBacking()
	b.flush(c)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	checkBytes(t, "file 1", mustRead(t, c, 1, 0, 64<<10, b), fill(64<<10, 1))
	checkBytes(t, "file 2", mustRead(t, c, 2, 0, 8192, b), fill(8192, 2))
	if s := c.Stats(); s.AllocWaits == 0 {
		t.Error("no allocation wait counted")
	}
}

// TestForgetDuringWriteback: a forgotten file's folios in flight keep
// their memory until EndWriteback, and its dirty bytes are gone at once.
func TestForgetDuringWriteback(t *testing.T) {
	c := newTestCache(t, Config{Bytes: 1 << 20, MaxOrder: 9})
	data := fill(64<<10, 1)
	mustWrite(t, c, 1, 0, data, nil)
	mustWrite(t, c, 1, 1<<20, fill(4096, 2), nil)
	exts := c.BeginWriteback(1, 64<<10, nil)
	c.Forget(1)
	if c.DirtyBytes() != 0 || len(c.DirtyFiles(nil)) != 0 {
		t.Fatalf("after Forget: %d dirty bytes, files %v", c.DirtyBytes(), c.DirtyFiles(nil))
	}
	if s := c.Stats(); s.CachedBytes != 64<<10 {
		t.Fatalf("after Forget: %d bytes cached, want the 64K in flight", s.CachedBytes)
	}
	checkBytes(t, "in flight after Forget", exts[0].Data, data)
	got := mustRead(t, c, 1, 0, 4096, nil)
	checkBytes(t, "forgotten file reads stored data", got, make([]byte, 4096))
	c.EndWriteback(exts, nil)
	if s := c.Stats(); s.CachedBytes != 4096 || s.DirtyBytes != 0 {
		t.Fatalf("after EndWriteback: %d cached (want the 4K read), %d dirty", s.CachedBytes, s.DirtyBytes)
	}
	if err := c.WaitWriteback(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
}

// TestTruncateWaitsForBlockInFlight: zeroing the tail of a block that is
// in flight waits for its writeback (stable pages).
func TestTruncateWaitsForBlockInFlight(t *testing.T) {
	c := newTestCache(t, Config{Bytes: 1 << 20, MaxOrder: 9})
	data := fill(8192, 1)
	mustWrite(t, c, 1, 0, data, nil)
	exts := c.BeginWriteback(1, 0, nil)
	done := make(chan struct{})
	go func() {
		c.Truncate(1, 100)
		close(done)
	}()
	waitUntil(func() bool { return c.Stats().StableWaits > 0 })
	checkBytes(t, "bytes in flight", exts[0].Data, data)
	c.EndWriteback(exts, nil)
	<-done
	want := make([]byte, 8192)
	copy(want, data[:100])
	checkBytes(t, "after truncate", mustRead(t, c, 1, 0, 8192, nil), want)
}

func TestDirtyFilesOldestFirst(t *testing.T) {
	c := newTestCache(t, Config{Bytes: 1 << 20, MaxOrder: 9})
	for _, f := range []uint64{3, 1, 2} {
		mustWrite(t, c, f, 0, fill(4096, 1), nil)
	}
	mustWrite(t, c, 3, 4096, fill(4096, 1), nil) // already dirty: keeps its age
	exts := c.BeginWriteback(1, 0, nil)
	c.EndWriteback(exts, nil)
	mustWrite(t, c, 1, 0, fill(4096, 1), nil)
	got := c.DirtyFiles(nil)
	if len(got) != 3 || got[0] != 3 || got[1] != 2 || got[2] != 1 {
		t.Errorf("DirtyFiles = %v, want [3 2 1]", got)
	}
	t3, ok3 := c.DirtySince(3)
	t1, ok1 := c.DirtySince(1)
	if !ok1 || !ok3 || t1.Before(t3) {
		t.Errorf("DirtySince: file 3 %v %v, file 1 %v %v", t3, ok3, t1, ok1)
	}
	if _, ok := c.DirtySince(99); ok {
		t.Error("DirtySince of an unknown file says dirty")
	}
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{Bytes: 0},
		{Bytes: 1 << 20, BlockSize: 3000},
		{Bytes: 1 << 20, BlockSize: 8192},
		{Bytes: 1 << 20, MaxOrder: 10},
		{Bytes: 1 << 20, MaxOrder: -1},
	} {
		if c, err := New(cfg); err == nil {
			c.Close()
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
	c := newTestCache(t, Config{Bytes: 1 << 20})
	if _, err := c.Write(context.Background(), c.File(1), -1, []byte{1}, nil); !errors.Is(err, ErrRange) {
		t.Errorf("negative offset: %v", err)
	}
	if _, err := c.Read(context.Background(), c.File(1), math.MaxInt64-10, make([]byte, 100), nil); !errors.Is(err, ErrRange) {
		t.Errorf("offset+length overflow: %v", err)
	}
	if n, err := c.Read(context.Background(), c.File(1), 0, nil, nil); n != 0 || err != nil {
		t.Errorf("empty read: %d, %v", n, err)
	}
}

// TestBackingErrors: a failed read through Backing fails the access with
// the error wrapped and marks nothing uptodate.
func TestBackingErrors(t *testing.T) {
	c := newTestCache(t, Config{Bytes: 1 << 20, MaxOrder: 9})
	bad := failingBacking{}
	if _, err := c.Write(context.Background(), c.File(1), 10, []byte("x"), bad); !errors.Is(err, syscall.EIO) {
		t.Errorf("write through failing backing: %v", err)
	}
	if _, err := c.Read(context.Background(), c.File(1), 0, make([]byte, 100), bad); !errors.Is(err, syscall.EIO) {
		t.Errorf("read through failing backing: %v", err)
	}
	if up, dirty := blockState(c, 1, 0); up || dirty {
		t.Errorf("after failures block 0 uptodate %v dirty %v", up, dirty)
	}
}

type failingBacking struct{}

func (failingBacking) ReadBacking(uint64, int64, []byte) error { return syscall.EIO }
