package zns

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zonefold/zonefold/uring"
)

// RunConformance checks the zone rules of the package doc against the
// device that open returns. open is called once per subtest; the device
// is the test's to wreck (every subtest starts with ResetAll) and open
// registers its Close with t.Cleanup. Real devices, emu and null all run
// this one suite.
func RunConformance(t *testing.T, open func(t *testing.T) Device) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, c *conf)
	}{
		{"Geometry", confGeometry},
		{"WriteAdvancesWP", confWriteAdvancesWP},
		{"AppendAdvancesWP", confAppendAdvancesWP},
		{"AppendManyZonesInParallel", confAppendManyZones},
		{"WriteNotAtWP", confWriteNotAtWP},
		{"BadRequests", confBadRequests},
		{"FinishedZoneRefusesWrites", confFinished},
		{"FillToCapacity", confFillToCapacity},
		{"Conditions", confConditions},
		{"Conventional", confConventional},
		{"OpenLimit", confOpenLimit},
		{"ImplicitOpenLimit", confImplicitOpenLimit},
		{"ActiveLimit", confActiveLimit},
		{"ResetAll", confResetAll},
		{"AppendsUnderAnotherPlug", confAppendsUnderAnotherPlug},
		{"FailedWriteFailsAppendsQueuedBehindIt", confFailedWriteFailsQueued},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := open(t)
			if err := d.ResetAll(); err != nil {
				t.Fatalf("ResetAll: %v", err)
			}
			c := newConf(t, d)
			tc.fn(t, c)
		})
	}
}

// conf is one subtest's device and helpers; every helper fails the test on
// an unexpected error and returns expected ones.
type conf struct {
	t   *testing.T
	d   Device
	g   Geometry
	bs  int64
	seq []int // sequential zones
	cnv []int // conventional zones
	// data is false for a device without storage (null), whose reads
	// return zeros: data checks then expect zeros.
	data bool
}

func newConf(t *testing.T, d Device) *conf {
	_, null := d.(*Null)
	c := &conf{t: t, d: d, g: d.Geometry(), bs: int64(d.Geometry().BlockSize), data: !null}
	for i, z := range c.report(0, c.g.Zones) {
		if z.Type == TypeConventional {
			c.cnv = append(c.cnv, i)
		} else {
			c.seq = append(c.seq, i)
		}
	}
	return c
}

// buf is page-aligned memory outside the Go heap (O_DIRECT needs it),
// filled with a pattern unique to seed.
func (c *conf) buf(n int64, seed byte) []byte {
	c.t.Helper()
	b, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		c.t.Fatalf("mmap %d: %v", n, err)
	}
	c.t.Cleanup(func() { _ = unix.Munmap(b) })
	for i := range b {
		b[i] = seed ^ byte(i>>9) ^ byte(i*31)
	}
	return b
}

func (c *conf) report(first, n int) []Zone {
	c.t.Helper()
	zs := make([]Zone, n)
	got, err := c.d.Report(first, zs)
	if err != nil {
		c.t.Fatalf("Report(%d, %d): %v", first, n, err)
	}
	return zs[:got]
}

func (c *conf) zone(i int) Zone {
	c.t.Helper()
	zs := c.report(i, 1)
	if len(zs) != 1 {
		c.t.Fatalf("Report(%d) gave %d zones", i, len(zs))
	}
	return zs[0]
}

// need skips the test unless the device has n sequential zones.
func (c *conf) need(n int) {
	c.t.Helper()
	if len(c.seq) < n {
		c.t.Skipf("needs %d sequential zones, device has %d", n, len(c.seq))
	}
}

// appendWaiter is an AppendCompletion that a test waits on.
type appendWaiter struct {
	ch chan appendResult
}

type appendResult struct {
	off int64
	err error
}

func (w *appendWaiter) Appended(off int64, err error) { w.ch <- appendResult{off, err} }

// tryAppend appends and waits; it returns the offset or the error, whether
// the device refused at submission or in the completion.
func (c *conf) tryAppend(zone int, bufs ...[]byte) (int64, error) {
	w := &appendWaiter{ch: make(chan appendResult, 1)}
	if err := c.d.Append(zone, bufs, w); err != nil {
		return 0, err
	}
	if err := c.d.Ring().Flush(); err != nil {
		c.t.Fatalf("ring flush: %v", err)
	}
	r := <-w.ch
	return r.off, r.err
}

func (c *conf) append(zone int, bufs ...[]byte) int64 {
	c.t.Helper()
	off, err := c.tryAppend(zone, bufs...)
	if err != nil {
		c.t.Fatalf("Append zone %d: %v", zone, err)
	}
	return off
}

func (c *conf) tryWrite(zone int, off int64, bufs ...[]byte) error {
	w := uring.NewWaiter()
	if err := c.d.Write(zone, off, bufs, w); err != nil {
		return err
	}
	res := c.d.Ring().Wait(w)
	if err := CompletionErr("write", res); err != nil {
		return err
	}
	if n := totalLen(bufs); int64(res.Res) != n {
		return fmt.Errorf("write of %d bytes reported %d", n, res.Res)
	}
	return nil
}

func (c *conf) write(zone int, off int64, bufs ...[]byte) {
	c.t.Helper()
	if err := c.tryWrite(zone, off, bufs...); err != nil {
		c.t.Fatalf("Write zone %d at %d: %v", zone, off, err)
	}
}

func (c *conf) read(off, n int64) []byte {
	c.t.Helper()
	b := c.buf(n, 0xa5) // garbage that must be overwritten
	w := uring.NewWaiter()
	if err := c.d.Read(off, b, w); err != nil {
		c.t.Fatalf("Read %d at %d: %v", n, off, err)
	}
	res := c.d.Ring().Wait(w)
	if err := CompletionErr("read", res); err != nil {
		c.t.Fatalf("Read %d at %d: %v", n, off, err)
	}
	if int64(res.Res) != n {
		c.t.Fatalf("Read %d at %d reported %d bytes", n, off, res.Res)
	}
	return b
}

func (c *conf) expectErr(what string, err, want error) {
	c.t.Helper()
	if !errors.Is(err, want) {
		c.t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
}

func (c *conf) ok(what string, err error) {
	c.t.Helper()
	if err != nil {
		c.t.Fatalf("%s: %v", what, err)
	}
}

// expectZone checks a zone's condition and write pointer (relative).
func (c *conf) expectZone(i int, cond Cond, wpRel int64) {
	c.t.Helper()
	z := c.zone(i)
	if z.Cond != cond || z.WP-z.Start != wpRel {
		c.t.Fatalf("zone %d: %s wp +%d, want %s wp +%d", i, z.Cond, z.WP-z.Start, cond, wpRel)
	}
}

// same compares what was read with what was written (zeros without storage).
func (c *conf) same(got, want []byte) bool {
	if !c.data {
		return bytes.Equal(got, make([]byte, len(got)))
	}
	return bytes.Equal(got, want)
}

func (c *conf) expectZeros(off, n int64) {
	c.t.Helper()
	if b := c.read(off, n); !bytes.Equal(b, make([]byte, n)) {
		c.t.Fatalf("read %d at %d: not zeros", n, off)
	}
}

func (c *conf) countOpen() (open, active int) {
	for _, z := range c.report(0, c.g.Zones) {
		if z.Cond.Open() {
			open++
		}
		if z.Cond.Active() {
			active++
		}
	}
	return open, active
}

func confGeometry(t *testing.T, c *conf) {
	g := c.g
	if g.Zones <= 0 || g.ZoneSize <= 0 || g.ZoneCap <= 0 || g.ZoneCap > g.ZoneSize {
		t.Fatalf("bad geometry %+v", g)
	}
	if g.BlockSize < 512 || g.BlockSize&(g.BlockSize-1) != 0 || g.ZoneCap%c.bs != 0 {
		t.Fatalf("bad block size in %+v", g)
	}
	if g.MaxAppend < g.BlockSize || int64(g.MaxAppend)%c.bs != 0 {
		t.Fatalf("bad max append in %+v", g)
	}
	if g.MaxOpen < 0 || g.MaxActive < 0 || (g.MaxActive > 0 && g.MaxOpen > g.MaxActive) {
		t.Fatalf("bad limits in %+v", g)
	}
	zs := c.report(0, g.Zones+3)
	if len(zs) != g.Zones {
		t.Fatalf("Report gave %d zones, geometry says %d", len(zs), g.Zones)
	}
	for i, z := range zs {
		if z.Start != int64(i)*g.ZoneSize || z.Len != g.ZoneSize || z.Cap > z.Len {
			t.Fatalf("zone %d: %+v", i, z)
		}
		if z.Type == TypeSeqRequired && (z.Cond != CondEmpty || z.WP != z.Start || z.Cap != g.ZoneCap) {
			t.Fatalf("zone %d after ResetAll: %+v (geometry cap %d)", i, z, g.ZoneCap)
		}
	}
	if got := c.report(g.Zones-1, 4); len(got) != 1 {
		t.Fatalf("Report of the last zone gave %d zones", len(got))
	}
	if got := c.report(g.Zones, 4); len(got) != 0 {
		t.Fatalf("Report past the end gave %d zones", len(got))
	}
	if _, err := c.d.Report(-1, make([]Zone, 1)); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("Report(-1): %v, want ErrOutOfRange", err)
	}
	if len(c.seq) == 0 {
		t.Fatal("no sequential zone")
	}
}

func confWriteAdvancesWP(t *testing.T, c *conf) {
	c.need(1)
	z := c.seq[0]
	start := c.zone(z).Start
	a, b := c.buf(c.bs, 1), c.buf(2*c.bs, 2)
	c.write(z, start, a)
	c.expectZone(z, CondImpOpen, c.bs)
	c.write(z, start+c.bs, b[:c.bs], b[c.bs:]) // vectored
	c.expectZone(z, CondImpOpen, 3*c.bs)
	got := c.read(start, 4*c.bs)
	want := append(append(append([]byte{}, a...), b...), make([]byte, c.bs)...)
	if !c.same(got, want) {
		t.Fatal("read after write: data differs (or the block past the write pointer is not zeros)")
	}
	c.expectZeros(start+3*c.bs, c.bs)
}

func confAppendAdvancesWP(t *testing.T, c *conf) {
	c.need(1)
	z := c.seq[0]
	start := c.zone(z).Start
	const n = 8
	bufs := make([][]byte, n)
	ws := make([]*appendWaiter, n)
	c.d.Ring().Plug()
	for i := range n {
		bufs[i] = c.buf(2*c.bs, byte(10+i))
		ws[i] = &appendWaiter{ch: make(chan appendResult, 1)}
		// two buffers per append: the data must land in order
		if err := c.d.Append(z, [][]byte{bufs[i][:c.bs], bufs[i][c.bs:]}, ws[i]); err != nil {
			_ = c.d.Ring().Unplug()
			t.Fatalf("Append %d: %v", i, err)
		}
	}
	c.ok("Unplug", c.d.Ring().Unplug())
	seen := map[int64]bool{}
	for i := range n {
		r := <-ws[i].ch
		if r.err != nil {
			t.Fatalf("append %d: %v", i, r.err)
		}
		rel := r.off - start
		if rel < 0 || rel >= n*2*c.bs || rel%(2*c.bs) != 0 || seen[rel] {
			t.Fatalf("append %d landed at +%d", i, rel)
		}
		seen[rel] = true
		if got := c.read(r.off, 2*c.bs); !c.same(got, bufs[i]) {
			t.Fatalf("append %d: data at its reported offset differs", i)
		}
	}
	c.expectZone(z, CondImpOpen, n*2*c.bs)
	if off := c.append(z, c.buf(c.bs, 99)); off != start+n*2*c.bs {
		t.Fatalf("append after %d appends at +%d, want +%d", n, off-start, n*2*c.bs)
	}
}

func confAppendManyZones(t *testing.T, c *conf) {
	zones := c.seq[:min(len(c.seq), 3)]
	if c.g.MaxOpen > 0 {
		zones = zones[:min(len(zones), c.g.MaxOpen)]
	}
	const per = 4
	type result struct {
		zone int
		buf  []byte
		w    *appendWaiter
	}
	var rs []result
	for i := range per {
		for _, z := range zones {
			r := result{z, c.buf(c.bs, byte(i*16+z)), &appendWaiter{ch: make(chan appendResult, 1)}}
			c.ok("Append", c.d.Append(z, [][]byte{r.buf}, r.w))
			rs = append(rs, r)
		}
	}
	c.ok("ring flush", c.d.Ring().Flush())
	var mu sync.Mutex
	seen := map[int64]bool{}
	for _, r := range rs {
		a := <-r.w.ch
		if a.err != nil {
			t.Fatalf("append to zone %d: %v", r.zone, a.err)
		}
		zs := c.zone(r.zone).Start
		mu.Lock()
		if a.off < zs || a.off >= zs+per*c.bs || seen[a.off] {
			t.Fatalf("append to zone %d landed at %d", r.zone, a.off)
		}
		seen[a.off] = true
		mu.Unlock()
		if !c.same(c.read(a.off, c.bs), r.buf) {
			t.Fatalf("zone %d: data at %d differs", r.zone, a.off)
		}
	}
	for _, z := range zones {
		c.expectZone(z, CondImpOpen, per*c.bs)
	}
}

func confWriteNotAtWP(t *testing.T, c *conf) {
	c.need(1)
	z := c.seq[0]
	start := c.zone(z).Start
	b := c.buf(c.bs, 3)
	c.expectErr("write past the WP of an empty zone", c.tryWrite(z, start+c.bs, b), ErrNotAtWP)
	c.expectZone(z, CondEmpty, 0)
	c.write(z, start, b)
	c.write(z, start+c.bs, b)
	for _, off := range []int64{start, start + c.bs, start + 3*c.bs} {
		c.expectErr(fmt.Sprintf("write at +%d with WP +%d", off-start, 2*c.bs), c.tryWrite(z, off, b), ErrNotAtWP)
	}
	c.expectZone(z, CondImpOpen, 2*c.bs)
	if got := c.read(start, 2*c.bs); !c.same(got[c.bs:], b) {
		t.Fatal("a refused write changed data")
	}
}

func confBadRequests(t *testing.T, c *conf) {
	c.need(1)
	z := c.seq[0]
	start := c.zone(z).Start
	if c.bs >= 1024 {
		half := c.buf(c.bs/2, 4)
		_, err := c.tryAppend(z, half)
		c.expectErr("append of half a block", err, ErrMisaligned)
		c.expectErr("write of half a block", c.tryWrite(z, start, half), ErrMisaligned)
	}
	big := c.buf(int64(c.g.MaxAppend)+c.bs, 5)
	if int64(c.g.MaxAppend)+c.bs <= c.g.ZoneCap {
		_, err := c.tryAppend(z, big)
		c.expectErr("append above MaxAppend", err, ErrTooLarge)
	}
	_, err := c.tryAppend(c.g.Zones, big[:c.bs])
	c.expectErr("append to a zone past the end", err, ErrOutOfRange)
	_, err = c.tryAppend(-1, big[:c.bs])
	c.expectErr("append to zone -1", err, ErrOutOfRange)
	c.expectErr("reset past the end", c.d.ResetZone(c.g.Zones), ErrOutOfRange)
	c.expectErr("open past the end", c.d.OpenZone(c.g.Zones), ErrOutOfRange)
	c.expectErr("finish past the end", c.d.FinishZone(-1), ErrOutOfRange)
	c.expectErr("close past the end", c.d.CloseZone(c.g.Zones+7), ErrOutOfRange)
	c.expectErr("read past the end", c.d.Read(int64(c.g.Zones)*c.g.ZoneSize, big[:c.bs], uring.NewWaiter()), ErrOutOfRange)
	if c.g.Zones > 1 {
		c.expectErr("read across a zone boundary", c.d.Read(c.g.ZoneSize-c.bs, big[:2*c.bs], uring.NewWaiter()), ErrOutOfRange)
	}
	c.expectZone(z, CondEmpty, 0)
}

func confFinished(t *testing.T, c *conf) {
	c.need(2)
	z, e := c.seq[0], c.seq[1]
	start := c.zone(z).Start
	b := c.buf(c.bs, 6)
	c.write(z, start, b)
	c.ok("FinishZone", c.d.FinishZone(z))
	c.expectZone(z, CondFull, c.g.ZoneCap)
	_, err := c.tryAppend(z, b)
	c.expectErr("append to a full zone", err, ErrZoneFull)
	c.expectErr("write to a full zone at its WP", c.tryWrite(z, start+c.g.ZoneCap, b), ErrZoneFull)
	c.expectZone(z, CondFull, c.g.ZoneCap)
	if !c.same(c.read(start, c.bs), b) {
		t.Fatal("finish lost data")
	}
	// Finishing an empty zone fills it too.
	c.ok("FinishZone empty", c.d.FinishZone(e))
	c.expectZone(e, CondFull, c.g.ZoneCap)
	c.ok("FinishZone again", c.d.FinishZone(e))
	c.ok("ResetZone", c.d.ResetZone(z))
	c.expectZone(z, CondEmpty, 0)
	c.expectZeros(start, c.bs)
	c.append(z, b)
	c.expectZone(z, CondImpOpen, c.bs)
}

func confFillToCapacity(t *testing.T, c *conf) {
	c.need(1)
	z := c.seq[0]
	start := c.zone(z).Start
	chunk := int64(c.g.MaxAppend)
	b := c.buf(chunk, 7)
	// Leave less than a chunk, then ask for more than what is left.
	var fill int64
	for c.g.ZoneCap-fill > chunk {
		n := min(chunk, c.g.ZoneCap-fill-c.bs)
		var g appendGroup
		g.wg.Add(1)
		c.ok("Append", c.d.Append(z, [][]byte{b[:n]}, &g))
		c.ok("flush", c.d.Ring().Flush())
		g.wg.Wait()
		c.ok("append", g.err)
		fill += n
	}
	room := c.g.ZoneCap - fill
	c.expectZone(z, CondImpOpen, fill)
	if room+c.bs <= chunk {
		_, err := c.tryAppend(z, b[:room+c.bs])
		c.expectErr("append across the capacity", err, ErrBeyondCapacity)
		c.expectErr("write across the capacity", c.tryWrite(z, start+fill, b[:room+c.bs]), ErrBeyondCapacity)
		c.expectZone(z, CondImpOpen, fill)
	}
	if off := c.append(z, b[:room]); off != start+fill {
		t.Fatalf("last append at +%d, want +%d", off-start, fill)
	}
	c.expectZone(z, CondFull, c.g.ZoneCap)
	_, err := c.tryAppend(z, b[:c.bs])
	c.expectErr("append to a zone filled to capacity", err, ErrZoneFull)
	if !c.same(c.read(start+fill, room), b[:room]) {
		t.Fatal("last block before the capacity differs")
	}
	if c.g.ZoneCap < c.g.ZoneSize {
		c.expectZeros(start+c.g.ZoneCap, c.bs)
	}
}

// appendGroup waits for a set of appends and keeps the first error.
type appendGroup struct {
	wg  sync.WaitGroup
	mu  sync.Mutex
	err error
}

func (g *appendGroup) Appended(_ int64, err error) {
	if err != nil {
		g.mu.Lock()
		if g.err == nil {
			g.err = err
		}
		g.mu.Unlock()
	}
	g.wg.Done()
}

func confConditions(t *testing.T, c *conf) {
	c.need(1)
	z := c.seq[0]
	start := c.zone(z).Start
	b := c.buf(c.bs, 8)

	c.expectErr("close an empty zone", c.d.CloseZone(z), ErrBadTransition)
	c.expectZone(z, CondEmpty, 0)
	c.ok("OpenZone", c.d.OpenZone(z))
	c.expectZone(z, CondExpOpen, 0)
	c.ok("OpenZone again", c.d.OpenZone(z))
	c.ok("CloseZone", c.d.CloseZone(z))
	// ZBC and null_blk close an unwritten zone to empty; ZNS to closed.
	if got := c.zone(z); (got.Cond != CondEmpty && got.Cond != CondClosed) || got.WP != start {
		t.Fatalf("closed unwritten zone: %s wp +%d", got.Cond, got.WP-start)
	}
	c.ok("ResetZone", c.d.ResetZone(z))

	c.write(z, start, b)
	c.expectZone(z, CondImpOpen, c.bs)
	c.ok("CloseZone", c.d.CloseZone(z))
	c.expectZone(z, CondClosed, c.bs)
	c.ok("CloseZone again", c.d.CloseZone(z))
	c.expectZone(z, CondClosed, c.bs)
	c.append(z, b)
	c.expectZone(z, CondImpOpen, 2*c.bs)
	c.ok("OpenZone", c.d.OpenZone(z))
	c.expectZone(z, CondExpOpen, 2*c.bs)
	c.append(z, b)
	c.expectZone(z, CondExpOpen, 3*c.bs)
	c.ok("CloseZone", c.d.CloseZone(z))
	c.expectZone(z, CondClosed, 3*c.bs)
	c.ok("OpenZone", c.d.OpenZone(z))
	c.expectZone(z, CondExpOpen, 3*c.bs)
	c.ok("FinishZone", c.d.FinishZone(z))
	c.expectZone(z, CondFull, c.g.ZoneCap)
	c.expectErr("close a full zone", c.d.CloseZone(z), ErrBadTransition)
	if err := c.d.OpenZone(z); err == nil {
		t.Fatal("OpenZone of a full zone succeeded")
	}
	c.expectZone(z, CondFull, c.g.ZoneCap)
	c.ok("ResetZone", c.d.ResetZone(z))
	c.expectZone(z, CondEmpty, 0)
	c.ok("ResetZone of an empty zone", c.d.ResetZone(z))
	c.expectZeros(start, 4*c.bs)
}

func confConventional(t *testing.T, c *conf) {
	if len(c.cnv) == 0 {
		t.Skip("no conventional zone")
	}
	z := c.cnv[0]
	start := c.zone(z).Start
	b := c.buf(2*c.bs, 9)
	c.expectErr("reset a conventional zone", c.d.ResetZone(z), ErrConventional)
	c.expectErr("open a conventional zone", c.d.OpenZone(z), ErrConventional)
	c.expectErr("finish a conventional zone", c.d.FinishZone(z), ErrConventional)
	_, err := c.tryAppend(z, b)
	c.expectErr("append to a conventional zone", err, ErrConventional)
	// Written anywhere, in any order.
	c.write(z, start+4*c.bs, b)
	c.write(z, start+c.bs, b[:c.bs])
	if got := c.read(start+4*c.bs, 2*c.bs); !c.same(got, b) {
		t.Fatal("conventional zone: data differs")
	}
	if got := c.zone(z); got.Type != TypeConventional || got.Cond != CondNotWP {
		t.Fatalf("conventional zone reported %+v", got)
	}
}

func confOpenLimit(t *testing.T, c *conf) {
	mo := c.g.MaxOpen
	if mo == 0 {
		t.Skip("no open limit")
	}
	c.need(mo + 1)
	for _, z := range c.seq[:mo] {
		c.ok(fmt.Sprintf("OpenZone %d", z), c.d.OpenZone(z))
	}
	next := c.seq[mo]
	start := c.zone(next).Start
	c.expectErr("OpenZone past the open limit", c.d.OpenZone(next), ErrTooManyOpen)
	c.expectZone(next, CondEmpty, 0)
	c.expectErr("write past the open limit", c.tryWrite(next, start, c.buf(c.bs, 10)), ErrTooManyOpen)
	c.expectZone(next, CondEmpty, 0)
	if open, _ := c.countOpen(); open != mo {
		t.Fatalf("%d zones open, want %d", open, mo)
	}
	// Finishing one releases its open (and active) resource.
	c.ok("FinishZone", c.d.FinishZone(c.seq[0]))
	c.ok("OpenZone after a finish", c.d.OpenZone(next))
	c.expectZone(next, CondExpOpen, 0)
	// Closing a written zone releases its open resource only.
	c.append(c.seq[1], c.buf(c.bs, 11))
	c.ok("CloseZone", c.d.CloseZone(c.seq[1]))
	c.expectZone(c.seq[1], CondClosed, c.bs)
	if len(c.seq) > mo+1 && (c.g.MaxActive == 0 || c.g.MaxActive > mo) {
		c.ok("OpenZone after a close", c.d.OpenZone(c.seq[mo+1]))
		if open, _ := c.countOpen(); open != mo {
			t.Fatalf("%d zones open, want %d", open, mo)
		}
	}
}

func confImplicitOpenLimit(t *testing.T, c *conf) {
	mo := c.g.MaxOpen
	if mo == 0 {
		t.Skip("no open limit")
	}
	if c.g.MaxActive > 0 && c.g.MaxActive <= mo {
		t.Skip("no active resource left to open another zone")
	}
	c.need(mo + 1)
	b := c.buf(c.bs, 13)
	for _, z := range c.seq[:mo] {
		c.append(z, b)
	}
	next := c.seq[mo]
	// ZNS lets the device close an implicitly open zone to make room;
	// a device that does not must refuse and change nothing.
	_, err := c.tryAppend(next, b)
	closed := 0
	for _, z := range c.seq[:mo] {
		switch got := c.zone(z); {
		case got.Cond == CondClosed && got.WP-got.Start == c.bs:
			closed++
		case got.Cond != CondImpOpen || got.WP-got.Start != c.bs:
			t.Fatalf("zone %d: %s wp +%d", z, got.Cond, got.WP-got.Start)
		}
	}
	if err != nil {
		c.expectErr("append past the open limit", err, ErrTooManyOpen)
		c.expectZone(next, CondEmpty, 0)
		if closed != 0 {
			t.Fatalf("refused append closed %d zones", closed)
		}
		return
	}
	c.expectZone(next, CondImpOpen, c.bs)
	if closed != 1 {
		t.Fatalf("implicit open past the limit closed %d zones, want 1", closed)
	}
	if open, _ := c.countOpen(); open != mo {
		t.Fatalf("%d zones open, limit %d", open, mo)
	}
}

func confActiveLimit(t *testing.T, c *conf) {
	ma := c.g.MaxActive
	if ma == 0 {
		t.Skip("no active limit")
	}
	c.need(ma + 1)
	b := c.buf(c.bs, 14)
	for _, z := range c.seq[:ma] {
		c.append(z, b)
		c.ok("CloseZone", c.d.CloseZone(z))
	}
	if _, act := c.countOpen(); act != ma {
		t.Fatalf("%d zones active, want %d", act, ma)
	}
	next := c.seq[ma]
	start := c.zone(next).Start
	_, err := c.tryAppend(next, b)
	c.expectErr("append past the active limit", err, ErrTooManyActive)
	c.expectZone(next, CondEmpty, 0)
	c.expectErr("write past the active limit", c.tryWrite(next, start, b), ErrTooManyActive)
	c.expectErr("OpenZone past the active limit", c.d.OpenZone(next), ErrTooManyActive)
	c.expectZone(next, CondEmpty, 0)
	// A closed zone is active already: writing it again needs no new resource.
	c.append(c.seq[0], b)
	c.expectZone(c.seq[0], CondImpOpen, 2*c.bs)
	// Finishing and resetting release active resources.
	c.ok("FinishZone", c.d.FinishZone(c.seq[0]))
	c.append(next, b)
	c.expectZone(next, CondImpOpen, c.bs)
	_, err = c.tryAppend(c.seq[ma-1]+0, b) // closed, active: fine
	c.ok("append to a closed zone", err)
	if len(c.seq) > ma+1 {
		other := c.seq[ma+1]
		_, err = c.tryAppend(other, b)
		c.expectErr("append past the active limit again", err, ErrTooManyActive)
		c.ok("ResetZone", c.d.ResetZone(c.seq[1]))
		c.append(other, b)
	}
}

func confResetAll(t *testing.T, c *conf) {
	zones := c.seq[:min(len(c.seq), 3)]
	b := c.buf(c.bs, 15)
	for _, z := range zones {
		c.append(z, b)
	}
	c.ok("FinishZone", c.d.FinishZone(zones[0]))
	c.ok("ResetAll", c.d.ResetAll())
	for _, z := range zones {
		c.expectZone(z, CondEmpty, 0)
		c.expectZeros(c.zone(z).Start, c.bs)
	}
	if open, act := c.countOpen(); open != 0 || act != 0 {
		t.Fatalf("after ResetAll: %d open, %d active", open, act)
	}
}

// confAppendsUnderAnotherPlug holds the ring's plug, as the engine's
// flusher does for a whole round, while appending several records to one
// zone and waiting for them: a backend that queues a zone's writes behind
// the one in flight must still get the queued ones submitted. (The block
// backend's dispatcher once only unplugged, and this hung.)
func confAppendsUnderAnotherPlug(t *testing.T, c *conf) {
	c.need(1)
	zone := c.seq[0]
	r := c.d.Ring()
	r.Plug()
	defer func() {
		if err := r.Unplug(); err != nil {
			t.Error(err)
		}
	}()
	const n = 4
	ws := make([]*appendWaiter, n)
	for i := range ws {
		ws[i] = &appendWaiter{ch: make(chan appendResult, 1)}
		if err := c.d.Append(zone, [][]byte{c.buf(c.bs, byte(i))}, ws[i]); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	for i, w := range ws {
		select {
		case res := <-w.ch:
			if res.err != nil {
				t.Fatalf("append %d: %v", i, res.err)
			}
			seen[res.off] = true
		case <-time.After(30 * time.Second):
			t.Fatalf("append %d never completed while another goroutine held the plug", i)
		}
	}
	if len(seen) != n {
		t.Fatalf("%d appends landed at %d distinct offsets", n, len(seen))
	}
	if wp := c.zone(zone).WP; wp != c.zone(zone).Start+n*c.bs {
		t.Fatalf("write pointer %d after %d appends of %d", wp, n, c.bs)
	}
}

// confFailedWriteFailsQueued: on a backend that queues a zone's writes
// behind the one in flight (a zoned block device), a write that fails
// fails every append queued behind it, and no append lands after it: the
// device may hold part of the failed write. The failure is provoked by
// resetting the zone behind the backend's back while its first append is
// plugged, so that the append is not at the device's write pointer. (The
// backend re-read the write pointer and sent the queued appends there:
// they landed at the zone's start.)
func confFailedWriteFailsQueued(t *testing.T, c *conf) {
	b, ok := c.d.(*Block)
	if !ok {
		t.Skip("only a zoned block device queues a zone's writes; NVMe and the emulated devices send them all at once")
	}
	c.need(1)
	zone := c.seq[0]
	c.append(zone, c.buf(c.bs, 1)) // the zone holds a block
	r := c.d.Ring()
	r.Plug()
	const n = 4
	ws := make([]*appendWaiter, n)
	for i := range ws {
		ws[i] = &appendWaiter{ch: make(chan appendResult, 1)}
		if err := c.d.Append(zone, [][]byte{c.buf(c.bs, byte(2+i))}, ws[i]); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	z := c.zone(zone)
	if err := blkZoneMgmt(b.fd, actReset, uint64(z.Start>>9), uint64(c.g.ZoneSize>>9)); err != nil {
		t.Fatalf("reset zone %d behind the backend: %v", zone, err)
	}
	if err := r.Unplug(); err != nil {
		t.Fatal(err)
	}
	for i, w := range ws {
		select {
		case res := <-w.ch:
			switch {
			case res.err == nil:
				t.Errorf("append %d landed at +%d after the failed one", i, res.off-z.Start)
			case i > 0 && !errors.Is(res.err, ErrZoneFailed):
				t.Errorf("append %d queued behind the failed one: %v, want ErrZoneFailed", i, res.err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("append %d never completed", i)
		}
	}
	c.expectZone(zone, CondEmpty, 0) // nothing landed
	c.ok("reset", c.d.ResetZone(zone))
	if off := c.append(zone, c.buf(c.bs, 9)); off != z.Start {
		t.Fatalf("append after reset at +%d, want +0", off-z.Start)
	}
}
