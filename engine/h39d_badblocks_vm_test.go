package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/zonefold/zonefold/uring"
	"github.com/zonefold/zonefold/zns"
)

// nullbBad drives null_blk's configfs badblocks attribute: I/O that
// touches a listed sector fails with EIO (reads and writes alike; on
// kernel 6.1 a write that touches one fails whole, its zone's write
// pointer stays).
type nullbBad struct {
	t    *testing.T
	attr string
}

func (b nullbBad) set(sign byte, from, to int64) {
	b.t.Helper()
	// Kernel 6.1's badblocks_set splits a range longer than 512 sectors
	// into entries it leaves out of order, and badblocks_check's binary
	// search then misses most of them: one range at most 512 sectors a
	// write, in ascending order, keeps the table sorted.
	for s := from / 512; s < (to+511)/512; s += 512 {
		e := min(s+512, (to+511)/512) - 1
		arg := fmt.Sprintf("%c%d-%d", sign, s, e)
		if err := os.WriteFile(b.attr, []byte(arg), 0); err != nil {
			b.t.Fatalf("badblocks %s: %v", arg, err)
		}
	}
	b.t.Logf("badblocks %c device bytes [%d, %d)", sign, from, to)
}

func (b nullbBad) add(from, to int64)   { b.set('+', from, to) }
func (b nullbBad) clear(from, to int64) { b.set('-', from, to) }

// badBlocksDevice is the null_blk device the VM made through configfs
// (testdata/vm/badblocks.sh sets ZONEFOLD_BADBLOCKS to its directory).
func badBlocksDevice(t *testing.T) (string, nullbBad) {
	dir := os.Getenv("ZONEFOLD_BADBLOCKS")
	if dir == "" {
		t.Skip("ZONEFOLD_BADBLOCKS is not set (testdata/vm/badblocks.sh sets it in the VM)")
	}
	return "/dev/" + filepath.Base(dir), nullbBad{t: t, attr: filepath.Join(dir, "badblocks")}
}

// zoneWP reports zone z's write pointer and condition on the device.
func zoneWP(t *testing.T, dev zns.Device, z int) (int64, zns.Cond) {
	t.Helper()
	var rz [1]zns.Zone
	if _, err := dev.Report(z, rz[:]); err != nil {
		t.Fatal(err)
	}
	return rz[0].WP, rz[0].Cond
}

func badFormat(t *testing.T, dev string) {
	t.Helper()
	d, err := zns.Open(dev, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Format(d, FormatOptions{Force: true}); err != nil {
		d.Close()
		t.Fatal(err)
	}
	d.Close()
}

// readRange reads [off, off+n) of name through a fresh handle.
func readRange(e *Engine, name string, off int64, n int) ([]byte, error) {
	h, err := e.Open(name)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	b := make([]byte, n)
	got, err := h.ReadAt(b, off)
	if err == io.EOF && got == n {
		err = nil
	}
	return b[:got], err
}

// TestH39dBadBlocks red-teams the engine against media errors on a real
// zoned device (null_blk zoned, in the VM): bad sectors where it
// appends, under a file's data, in the metadata zone, and over every
// data zone while writers run, then removed.
func TestH39dBadBlocks(t *testing.T) {
	dev, bad := badBlocksDevice(t)
	cfg := Config{CacheBytes: 8 << 20, DirtyLimit: 4 << 20}

	t.Run("probe", func(t *testing.T) {
		badFormat(t, dev)
		d, err := zns.Open(dev, zns.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		g := d.Geometry()
		w := uring.NewWaiter()
		buf := h19gAligned(t, make([]byte, BlockSize))
		try := func(z int, off int64) error {
			if err := d.Write(z, int64(z)*g.ZoneSize+off, [][]byte{buf}, w); err != nil {
				return err
			}
			return d.Ring().Wait(w).Err("write")
		}
		for _, c := range []struct {
			z        int
			from, to int64
		}{{5, 0, 1 << 20}, {6, 0, g.ZoneCap}, {7, 8192, g.ZoneCap}} {
			zs := int64(c.z) * g.ZoneSize
			bad.add(zs+c.from, zs+c.to)
			a, _ := os.ReadFile(bad.attr)
			t.Logf("attr: %.200q", a)
			var errs []error
			for _, off := range []int64{0, 4096, 8192} {
				errs = append(errs, try(c.z, off))
			}
			t.Logf("zone %d bad [+%d,+%d): writes at 0, 4K, 8K: %v", c.z, c.from, c.to, errs)
			bad.clear(zs+c.from, zs+c.to)
		}
	})

	t.Run("append-zone", func(t *testing.T) {
		badFormat(t, dev)
		e := reopen(t, dev, cfg)
		defer func() { e.Close() }()
		first := pattern(256<<10, 1)
		f := createSynced(t, e, "a", first)
		z := f.f.mru.Load()
		if z == nil {
			t.Fatal("no zone")
		}
		wp, cond := zoneWP(t, e.dev, z.idx)
		zs := int64(z.idx) * e.geo.ZoneSize
		t.Logf("file a in zone %d, wp +%d %s", z.idx, wp-zs, cond)
		bad.add(wp, wp+1<<20)
		cleared := false
		defer func() {
			if !cleared {
				bad.clear(wp, wp+1<<20)
			}
		}()
		second := pattern(256<<10, 2)
		if _, err := f.WriteAt(second, int64(len(first))); err != nil {
			t.Fatal(err)
		}
		err1 := f.Sync()
		t.Logf("first fsync over the bad range: %v", err1)
		if err1 != nil && !errors.Is(err1, syscall.EIO) {
			t.Errorf("fsync over a bad range: %v, want nil or EIO", err1)
		}
		if err := f.Sync(); err != nil {
			t.Fatalf("second fsync: %v (the data should go elsewhere)", err)
		}
		st := e.Stats()
		t.Logf("stats: append errs %d, finish errs %d, read errs %d", st.AppendErrs, st.ZoneFinishErrs, st.ReadErrs)
		if st.AppendErrs == 0 {
			t.Errorf("no append error counted: the bad range was never written?")
		}
		nwp, ncond := zoneWP(t, e.dev, z.idx)
		t.Logf("zone %d after: wp +%d %s, engine state %d", z.idx, nwp-zs, ncond, z.state.Load())
		if nwp < wp {
			t.Errorf("zone %d write pointer went back from %d to %d", z.idx, wp, nwp)
		}
		want := append(slices.Clone(first), second...)
		if got := readAll(t, e, "a"); !bytes.Equal(got, want) {
			t.Fatal("content differs after the failed append")
		}
		if err := e.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		// Cold, with the bad range still there.
		e = reopen(t, dev, cfg)
		if got := readAll(t, e, "a"); !bytes.Equal(got, want) {
			t.Fatal("content differs after reopen")
		}
		// GC may take the retired zone: nothing of a is lost.
		for i := 0; i < 8 && e.gc.reclaim(nil, minGCGain); i++ {
		}
		if got := readAll(t, e, "a"); !bytes.Equal(got, want) {
			t.Fatal("content differs after GC")
		}
		if err := e.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		bad.clear(wp, wp+1<<20)
		cleared = true
		checkFsck(t, dev)
	})

	t.Run("append-zone-crash", func(t *testing.T) {
		// As append-zone, killed once the zone is retired, before a
		// checkpoint records it: recovery scans the zone to its
		// finished write pointer, over the bad range.
		badFormat(t, dev)
		e := reopen(t, dev, cfg)
		first := pattern(256<<10, 1)
		f := createSynced(t, e, "a", first)
		z := f.f.mru.Load()
		wp, _ := zoneWP(t, e.dev, z.idx)
		bad.add(wp, wp+1<<20)
		defer bad.clear(wp, wp+1<<20)
		second := pattern(256<<10, 2)
		if _, err := f.WriteAt(second, int64(len(first))); err != nil {
			t.Fatal(err)
		}
		err1 := f.Sync()
		t.Logf("fsync over the bad range: %v", err1)
		for deadline := time.Now().Add(10 * time.Second); z.state.Load() != zoneFull && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		}
		nwp, ncond := zoneWP(t, e.dev, z.idx)
		t.Logf("zone %d: engine state %d, device wp +%d %s", z.idx, z.state.Load(), nwp-int64(z.idx)*e.geo.ZoneSize, ncond)
		e.crashForTest()
		e.dev.Close()
		e2, err := Open(dev, cfg)
		if err != nil {
			t.Fatalf("open after a crash with the retired zone's bad range still there: %v", err)
		}
		defer e2.Close()
		if got := readAll(t, e2, "a"); !bytes.Equal(got[:len(first)], first) {
			t.Fatal("acknowledged data differs after the crash")
		}
	})

	t.Run("recover-header", func(t *testing.T) {
		// A record header past the checkpoint goes bad; a crash makes
		// recovery scan it.
		badFormat(t, dev)
		e := reopen(t, dev, cfg)
		a := pattern(64<<10, 7)
		f := createSynced(t, e, "a", a)
		a2 := pattern(64<<10, 8)
		if _, err := f.WriteAt(a2, 64<<10); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		b := pattern(64<<10, 9)
		createSynced(t, e, "b", b)
		x := devOf(t, e, "a", 0)
		x2 := devOf(t, e, "a", 64<<10)
		xb := devOf(t, e, "b", 0)
		t.Logf("a's records' headers at %d and %d, b's at %d", x.hdr, x2.hdr, xb.hdr)
		e.crashForTest()
		e.dev.Close()
		bad.add(x.hdr, x.hdr+BlockSize)
		defer bad.clear(x.hdr, x.hdr+BlockSize)
		// a's second record follows the unreadable one in its zone:
		// recovery cannot replay the damaged record and refuses.
		e2, err := Open(dev, cfg)
		if err == nil {
			e2.Close()
			t.Fatal("open succeeded without a's record whose header fails to read")
		}
		t.Logf("open with a bad record header past the checkpoint: %v", err)
		if !errors.Is(err, syscall.EIO) {
			t.Fatalf("open: %v, want an error wrapping EIO", err)
		}
		// Healed (remapped), everything is back.
		bad.clear(x.hdr, x.hdr+BlockSize)
		e2 = reopen(t, dev, cfg)
		defer e2.Close()
		for _, c := range []struct {
			name string
			want []byte
		}{{"a", append(slices.Clone(a), a2...)}, {"b", b}} {
			if got, err := readRange(e2, c.name, 0, len(c.want)); err != nil || !bytes.Equal(got, c.want) {
				t.Errorf("%s after recovery: %v, equal %v", c.name, err, bytes.Equal(got, c.want))
			}
		}
	})

	t.Run("cold-neighbors", func(t *testing.T) {
		badFormat(t, dev)
		e := reopen(t, dev, cfg)
		a := pattern(512<<10, 3)
		createSynced(t, e, "a", a).Close()
		x := devOf(t, e, "a", 128<<10)
		blk := x.dev + (128<<10 - x.off)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		bad.add(blk, blk+BlockSize)
		defer bad.clear(blk, blk+BlockSize)
		for _, after := range []bool{false, true} {
			for _, c := range []struct{ off, n int64 }{{0, 128 << 10}, {0, 4096}, {124 << 10, 4096}, {132 << 10, 4096}, {132 << 10, 124 << 10}, {256 << 10, 256 << 10}, {128 << 10, 4096}} {
				e := reopen(t, dev, cfg)
				if after {
					_, err := readRange(e, "a", 128<<10, BlockSize)
					t.Logf("the bad block first: %v", err)
				}
				got, err := readRange(e, "a", c.off, int(c.n))
				touches := c.off < 128<<10+4096 && 128<<10 < c.off+c.n
				t.Logf("cold read [%d,+%d): %v, equal %v; stats read errs %d", c.off, c.n, err, bytes.Equal(got, a[c.off:c.off+c.n]), e.Stats().ReadErrs)
				switch {
				case touches && !errors.Is(err, syscall.EIO):
					t.Errorf("cold read [%d,+%d) over the bad block: %v, want EIO", c.off, c.n, err)
				case !touches && (err != nil || !bytes.Equal(got, a[c.off:c.off+c.n])):
					t.Errorf("cold read [%d,+%d) beside the bad block: %v", c.off, c.n, err)
				}
				e.Close()
			}
		}
	})

	t.Run("data-read", func(t *testing.T) {
		badFormat(t, dev)
		e := reopen(t, dev, cfg)
		defer func() { e.Close() }()
		a0 := pattern(512<<10, 3)
		fa := createSynced(t, e, "a", a0)
		// Garbage in a's zone: its second half again.
		a1 := pattern(256<<10, 4)
		if _, err := fa.WriteAt(a1, 256<<10); err != nil {
			t.Fatal(err)
		}
		if err := fa.Sync(); err != nil {
			t.Fatal(err)
		}
		b0 := pattern(512<<10, 5)
		createSynced(t, e, "b", b0)
		wantA := append(slices.Clone(a0[:256<<10]), a1...)
		x := devOf(t, e, "a", 128<<10)
		za := x.dev / e.geo.ZoneSize
		xb := devOf(t, e, "b", 0)
		t.Logf("a@128K at device %d (zone %d), b@0 at %d (zone %d)", x.dev, za, xb.dev, xb.dev/e.geo.ZoneSize)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		bad.add(x.dev, x.dev+BlockSize)
		cleared := false
		defer func() {
			if !cleared {
				bad.clear(x.dev, x.dev+BlockSize)
			}
		}()
		e = reopen(t, dev, cfg)
		got, err := readRange(e, "a", 128<<10, BlockSize)
		t.Logf("cold read of the bad block: %d bytes, %v", len(got), err)
		if !errors.Is(err, syscall.EIO) {
			t.Errorf("cold read of a bad block: %v, want EIO", err)
		}
		for _, r := range [][2]int64{{0, 128 << 10}, {132 << 10, 124 << 10}, {256 << 10, 256 << 10}} {
			got, err := readRange(e, "a", r[0], int(r[1]))
			if err != nil || !bytes.Equal(got, wantA[r[0]:r[0]+r[1]]) {
				t.Errorf("a [%d,+%d) beside the bad block: %v, equal %v", r[0], r[1], err, bytes.Equal(got, wantA[r[0]:r[0]+r[1]]))
			}
		}
		if got := readAll(t, e, "b"); !bytes.Equal(got, b0) {
			t.Error("b differs")
		}
		// GC of a's zone: it cannot read the bad block.
		before := e.Stats()
		n := 0
		for ; n < 8 && e.gc.reclaim(nil, minGCGain); n++ {
		}
		st := e.Stats()
		nx := devOf(t, e, "a", 128<<10)
		t.Logf("GC: %d passes with progress, resets %d -> %d, read errs %d -> %d, lost %d; a@128K now at %d (zone %d)",
			n, before.GCResets, st.GCResets, before.ReadErrs, st.ReadErrs, st.LostBytes, nx.dev, nx.dev/e.geo.ZoneSize)
		for _, r := range [][2]int64{{0, 128 << 10}, {132 << 10, 124 << 10}, {256 << 10, 256 << 10}} {
			got, err := readRange(e, "a", r[0], int(r[1]))
			if err != nil || !bytes.Equal(got, wantA[r[0]:r[0]+r[1]]) {
				t.Errorf("after GC: a [%d,+%d): %v, equal %v", r[0], r[1], err, bytes.Equal(got, wantA[r[0]:r[0]+r[1]]))
			}
		}
		if got := readAll(t, e, "b"); !bytes.Equal(got, b0) {
			t.Error("b differs after GC")
		}
		// The medium heals (the sector is remapped): everything reads,
		// with no restart.
		bad.clear(x.dev, x.dev+BlockSize)
		cleared = true
		if got, err := readRange(e, "a", 0, len(wantA)); err != nil || !bytes.Equal(got, wantA) {
			t.Errorf("a after the bad block healed: %v, equal %v", err, bytes.Equal(got, wantA))
		}
		for i := 0; i < 8 && e.gc.reclaim(nil, minGCGain); i++ {
		}
		if got := readAll(t, e, "a"); !bytes.Equal(got, wantA) {
			t.Error("a differs after GC once healed")
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		checkFsck(t, dev)
	})

	t.Run("meta", func(t *testing.T) {
		badFormat(t, dev)
		e := reopen(t, dev, cfg)
		defer func() { e.Close() }()
		createSynced(t, e, "a", pattern(64<<10, 6))
		e.meta.mu.Lock()
		mz, mwp := e.sb.MetaZones[e.meta.active], e.meta.wp
		e.meta.mu.Unlock()
		from := int64(mz)*e.geo.ZoneSize + mwp
		to := int64(mz)*e.geo.ZoneSize + e.geo.ZoneCap
		t.Logf("metadata log in zone %d at +%d", mz, mwp)
		bad.add(from, to)
		a, _ := os.ReadFile(bad.attr)
		t.Logf("attr: %.300q", a)
		cleared := false
		defer func() {
			if !cleared {
				bad.clear(from, to)
			}
		}()
		created := map[string]bool{"a": true}
		for i := range 4 {
			name := fmt.Sprintf("m%d", i)
			h, err := e.Create(name)
			t.Logf("create %s with the log's zone bad: %v", name, err)
			if err == nil {
				created[name] = true
				h.Close()
			}
		}
		e.meta.mu.Lock()
		t.Logf("metadata log now in half %d at +%d", e.meta.active, e.meta.wp)
		e.meta.mu.Unlock()
		bad.clear(from, to)
		cleared = true
		for i := range 4 {
			name := fmt.Sprintf("n%d", i)
			h, err := e.Create(name)
			if err != nil {
				t.Errorf("create %s after the log's zone healed: %v", name, err)
				continue
			}
			created[name] = true
			h.Close()
		}
		if err := e.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		e = reopen(t, dev, cfg)
		for name := range created {
			if _, err := e.Stat(name); err != nil {
				t.Errorf("%s created, gone after reopen: %v", name, err)
			}
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		checkFsck(t, dev)
	})

	t.Run("meta-both", func(t *testing.T) {
		// Both metadata halves bad past the log: namespace operations
		// and fsyncs fail cleanly; healed, they work again without a
		// restart.
		badFormat(t, dev)
		e := reopen(t, dev, cfg)
		defer func() { e.Close() }()
		fa := createSynced(t, e, "a", pattern(64<<10, 6))
		e.meta.mu.Lock()
		act, mwp := e.meta.active, e.meta.wp
		e.meta.mu.Unlock()
		var rs [][2]int64
		for h, z := range e.sb.MetaZones {
			zs := int64(z) * e.geo.ZoneSize
			from := zs
			if h == act {
				from += mwp
			}
			rs = append(rs, [2]int64{from, zs + int64(e.sb.MetaGroup)*e.geo.ZoneSize - (e.geo.ZoneSize - e.geo.ZoneCap)})
		}
		for _, r := range rs {
			bad.add(r[0], r[1])
		}
		cleared := false
		defer func() {
			if !cleared {
				for _, r := range rs {
					bad.clear(r[0], r[1])
				}
			}
		}()
		created := map[string]bool{"a": true}
		for i := range 3 {
			name := fmt.Sprintf("m%d", i)
			h, err := e.Create(name)
			t.Logf("create %s with both halves bad: %v", name, err)
			if err == nil {
				created[name] = true
				h.Close()
			} else if !errors.Is(err, syscall.EIO) {
				t.Errorf("create %s: %v, want EIO", name, err)
			}
		}
		if _, err := fa.WriteAt(pattern(64<<10, 7), 64<<10); err != nil {
			t.Fatal(err)
		}
		err := fa.Sync()
		t.Logf("fsync of a with both halves bad: %v", err)
		for _, r := range rs {
			bad.clear(r[0], r[1])
		}
		cleared = true
		var cerr error
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			var h *File
			if h, cerr = e.Create("n0"); cerr == nil {
				created["n0"] = true
				h.Close()
				break
			}
		}
		if cerr != nil {
			t.Fatalf("create 20 s after the metadata zones healed: %v", cerr)
		}
		if err := fa.Sync(); err != nil {
			t.Errorf("fsync of a after healing: %v", err)
		}
		want := append(pattern(64<<10, 6), pattern(64<<10, 7)...)
		if err := e.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		e = reopen(t, dev, cfg)
		for name := range created {
			if _, err := e.Stat(name); err != nil {
				t.Errorf("%s created, gone after reopen: %v", name, err)
			}
		}
		if got := readAll(t, e, "a"); !bytes.Equal(got, want) {
			t.Error("a differs after reopen")
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		checkFsck(t, dev)
	})

	t.Run("load", func(t *testing.T) {
		badFormat(t, dev)
		e := reopen(t, dev, cfg)
		defer func() { e.Close() }()
		const writers, chunk = 4, 64 << 10
		var mu sync.Mutex
		acked := make([]int64, writers) // bytes fsynced
		fails := make([]int, writers)
		werrs := make([]int, writers) // writes refused (EIO)
		var isHealed atomic.Bool
		phase := make(chan struct{})  // bad blocks are on
		healed := make(chan struct{}) // and off again
		var wg sync.WaitGroup
		files := make([]*File, writers)
		for w := range writers {
			files[w] = mustCreate(t, e, fmt.Sprintf("w%d", w))
		}
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				f := files[w]
				var off int64
				// healedSync: an fsync begun after the device healed
				// succeeded, so writeback works on the healed device.
				healedSync := false
				write := func(rounds int) {
					for range rounds {
						for range 4 {
							begunHealed, begunSynced := isHealed.Load(), healedSync
							if _, err := f.WriteAt(pattern(chunk, byte(off/chunk)), off); err != nil {
								// A writer the dirty limit throttles
								// while writeback keeps failing gets
								// EIO (rather than wait for ever).
								if !errors.Is(err, syscall.EIO) {
									t.Errorf("w%d write at %d: %v", w, off, err)
								}
								// The refusal counts the writeback
								// failures noted since the writer
								// joined the throttle, until one
								// writeback succeeds. Some of the bad
								// period's failures are noted after
								// the heal: appends to the zones still
								// bad while bad.clear goes through the
								// ranges (about a second), and to zones
								// that failed before the heal and had
								// room reserved before the engine
								// retired them (zns.ErrZoneFailed). A
								// write begun after the heal may be
								// refused for those; one begun after
								// its writer's fsync succeeded on the
								// healed device may not.
								switch {
								case begunSynced:
									t.Errorf("w%d write at %d, begun after an fsync succeeded on the healed device: %v", w, off, err)
								case begunHealed:
									t.Logf("w%d write at %d, begun after the device healed, refused for the bad period's failures: %v", w, off, err)
								case isHealed.Load():
									t.Logf("w%d write at %d, begun before the device healed, refused after: %v", w, off, err)
								}
								mu.Lock()
								werrs[w]++
								mu.Unlock()
								break
							}
							off += chunk
						}
						syncHealed := isHealed.Load()
						if err := f.Sync(); err != nil {
							mu.Lock()
							fails[w]++
							mu.Unlock()
							continue
						}
						healedSync = healedSync || syncHealed
						mu.Lock()
						acked[w] = off
						mu.Unlock()
					}
				}
				write(4)
				<-phase
				write(2)
				<-healed
				write(2)
				if err := f.Sync(); err != nil {
					t.Errorf("w%d: fsync after the device healed: %v", w, err)
					return
				}
				mu.Lock()
				acked[w] = off
				mu.Unlock()
			}()
		}
		var ranges [][2]int64
		for z := range e.geo.Zones {
			if slices.Contains(e.sb.MetaZones[:], z) {
				continue
			}
			zs := int64(z) * e.geo.ZoneSize
			ranges = append(ranges, [2]int64{zs, zs + e.geo.ZoneCap})
		}
		for _, r := range ranges {
			bad.add(r[0], r[1])
		}
		close(phase)
		for _, r := range ranges {
			defer bad.clear(r[0], r[1])
		}
		// Heal once every writer's fsync failed at least once (or after
		// 30 s: a writer that never got to its fsync is stuck, which
		// the log says).
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			mu.Lock()
			all := true
			for w := range writers {
				all = all && fails[w]+werrs[w] > 0
			}
			mu.Unlock()
			if all {
				break
			}
			if time.Now().After(deadline) {
				mu.Lock()
				t.Logf("after 30 s of bad blocks, fsync failures per writer: %v", fails)
				mu.Unlock()
				break
			}
		}
		for _, r := range ranges {
			bad.clear(r[0], r[1])
		}
		isHealed.Store(true)
		close(healed)
		wg.Wait()
		st := e.Stats()
		t.Logf("writes refused per writer %v", werrs)
		t.Logf("fsync failures per writer %v; append errs %d, finish errs %d, read errs %d, GC resets %d",
			fails, st.AppendErrs, st.ZoneFinishErrs, st.ReadErrs, st.GCResets)
		if err := e.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		e = reopen(t, dev, cfg)
		for w := range writers {
			got, err := readRange(e, fmt.Sprintf("w%d", w), 0, int(acked[w]))
			if err != nil {
				t.Errorf("w%d: read of %d acknowledged bytes: %v", w, acked[w], err)
				continue
			}
			for off := int64(0); off < acked[w]; off += chunk {
				if !bytes.Equal(got[off:off+chunk], pattern(chunk, byte(off/chunk))) {
					t.Errorf("w%d: acknowledged chunk at %d differs", w, off)
					break
				}
			}
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		checkFsck(t, dev)
	})
}
