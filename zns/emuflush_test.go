package zns

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

// hangWindow is how long a test waits for an operation that must complete
// before it calls it a hang: a watchdog, not a timing assertion.
const hangWindow = 10 * time.Second

// holdFlush makes e's next Flush stop just before it syncs the data, and
// returns a channel closed when it got there and a function that lets it
// go on.
func holdFlush(t *testing.T, e *Emu) (held <-chan struct{}, release func()) {
	t.Helper()
	h, r := make(chan struct{}), make(chan struct{})
	var once bool
	e.testHookFlushSync = func() {
		if once {
			return
		}
		once = true
		close(h)
		<-r
	}
	released := false
	release = func() {
		if !released {
			released = true
			close(r)
		}
	}
	t.Cleanup(release)
	return h, release
}

// await waits for ch, failing the test if nothing comes within hangWindow.
func await[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(hangWindow):
		t.Fatalf("%s did not complete within %v: hung", what, hangWindow)
		panic("unreachable")
	}
}

// goFlush runs e.Flush in a goroutine; its error arrives on the channel.
func goFlush(e *Emu) <-chan error {
	done := make(chan error, 1)
	go func() { done <- e.Flush() }()
	return done
}

// goAppend appends buf to zone from a goroutine; the result arrives on the
// channel (submission errors included).
func goAppend(e *Emu, zone int, buf []byte) <-chan appendResult {
	w := &appendWaiter{ch: make(chan appendResult, 1)}
	go func() {
		if err := e.Append(zone, [][]byte{buf}, w); err != nil {
			w.ch <- appendResult{err: err}
			return
		}
		if err := e.Ring().Flush(); err != nil {
			w.ch <- appendResult{err: err}
		}
	}()
	return w.ch
}

// TestEmuFlushDoesNotBlockWrites: while a Flush syncs, appends to any
// zone (the one flushed included), reads and zone management go on.
func TestEmuFlushDoesNotBlockWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev")
	e, c := openEmuT(t, path, emuTestGeo)
	t.Cleanup(func() { e.Close() }) // after holdFlush's release
	a, b, d := c.buf(c.bs, 1), c.buf(c.bs, 2), c.buf(c.bs, 3)
	c.append(0, a)
	held, release := holdFlush(t, e)
	flushed := goFlush(e)
	<-held

	if r := await(t, "an append to another zone during a flush", goAppend(e, 1, b)); r.err != nil || r.off != c.g.ZoneSize {
		t.Fatalf("append during a flush: off %d, %v", r.off, r.err)
	}
	if r := await(t, "an append to the flushed zone during a flush", goAppend(e, 0, d)); r.err != nil || r.off != c.bs {
		t.Fatalf("append during a flush: off %d, %v", r.off, r.err)
	}
	mgmt := make(chan error, 1)
	go func() { mgmt <- e.FinishZone(2) }()
	c.ok("FinishZone during a flush", await(t, "FinishZone during a flush", mgmt))
	if got := c.read(0, 2*c.bs); !bytes.Equal(got[:c.bs], a) || !bytes.Equal(got[c.bs:], d) {
		t.Fatal("read during a flush: wrong bytes")
	}
	release()
	c.ok("Flush", await(t, "the held flush", flushed))

	// The flush persisted the table as of its start: a power cut now
	// keeps a and loses what came while it synced.
	c.ok("PowerCut", e.PowerCut())
	c.expectZone(0, CondClosed, c.bs)
	c.expectZone(1, CondEmpty, 0)
	c.expectZone(2, CondEmpty, 0)
	if got := c.read(0, 2*c.bs); !bytes.Equal(got[:c.bs], a) || !bytes.Equal(got[c.bs:], make([]byte, c.bs)) {
		t.Fatal("after the cut: want the block written before the flush, then zeros")
	}
}

// TestEmuCutDuringHeldFlush: a power cut (PowerCut, TearLastWrite, or
// Close, which persists nothing) that comes while a Flush is syncing waits
// for it: everything that completed before the Flush was called survives,
// in memory and on reopen, and nothing that came after it does.
func TestEmuCutDuringHeldFlush(t *testing.T) {
	for _, cut := range []string{"PowerCut", "TearLastWrite", "Close"} {
		t.Run(cut, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "dev")
			e, c := openEmuT(t, path, emuTestGeo)
			t.Cleanup(func() { e.Close() }) // after holdFlush's release
			a, b, d := c.buf(2*c.bs, 1), c.buf(c.bs, 2), c.buf(c.bs, 3)
			c.append(0, a)
			c.append(3, d)
			c.ok("Flush", e.Flush()) // zone 3: flushed before
			c.ok("ResetZone", e.ResetZone(3))
			held, release := holdFlush(t, e)
			flushed := goFlush(e)
			<-held
			// Completed after the flush started: not part of it.
			if r := await(t, "an append during a flush", goAppend(e, 1, b)); r.err != nil {
				t.Fatalf("append during a flush: %v", r.err)
			}
			started := make(chan struct{})
			cutDone := make(chan error, 1)
			go func() {
				close(started)
				switch cut {
				case "PowerCut":
					cutDone <- e.PowerCut()
				case "TearLastWrite":
					cutDone <- e.TearLastWrite(0)
				default:
					cutDone <- e.Close()
				}
			}()
			<-started
			release()
			c.ok("Flush", await(t, "the held flush", flushed))
			c.ok(cut, await(t, cut, cutDone))

			check := func(c *conf, when string) {
				t.Helper()
				// Closed by the power cycle; a plain reopen keeps
				// the flushed condition (see Emu).
				if z := c.zone(0); z.WP-z.Start != 2*c.bs || z.Cond != CondClosed && z.Cond != CondImpOpen {
					t.Fatalf("%s: zone 0 %s wp +%d, want closed or implicitly open at +%d", when, z.Cond, z.WP-z.Start, 2*c.bs)
				}
				c.expectZone(1, CondEmpty, 0)
				c.expectZone(3, CondEmpty, 0) // the reset was flushed
				if got := c.read(0, 2*c.bs); !bytes.Equal(got, a) {
					t.Fatalf("%s: the data completed before the flush is lost", when)
				}
				c.expectZeros(c.g.ZoneSize, c.bs)
			}
			if cut != "Close" {
				check(c, "after the cut")
				c.ok("Close", e.Close())
			}
			e2, c2 := openEmuT(t, path, "")
			defer e2.Close()
			check(c2, "reopened")
		})
	}
}

// TestEmuFlushSyncsOnlyWhatChanged: a Flush syncs the data only if
// something was written since the last one, and writes and syncs the zone
// table only if it changed, one sync for both; a Flush with nothing new
// costs no I/O at all.
// What it skips is durable already: a power cut, and a reopen, still give
// the state of the last Flush.
func TestEmuFlushSyncsOnlyWhatChanged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev")
	e, c := openEmuT(t, path, emuTestGeo)
	defer func() { e.Close() }()
	step := func(what string, syncs, tables int) {
		t.Helper()
		before := e.flushIO
		c.ok(what+": Flush", e.Flush())
		got := e.flushIO
		got.syncs -= before.syncs
		got.tableWrites -= before.tableWrites
		if got.syncs != syncs || got.tableWrites != tables {
			t.Fatalf("%s: Flush did %d syncs and %d table writes, want %d and %d",
				what, got.syncs, got.tableWrites, syncs, tables)
		}
	}
	a := c.buf(2*c.bs, 1)
	c.append(0, a)
	step("after an append", 1, 1)
	step("with nothing new", 0, 0)
	step("again with nothing new", 0, 0)
	// A reset is durable when ResetZone returns: it runs the Flush.
	resetIO := e.flushIO
	c.ok("ResetZone", e.ResetZone(0))
	if got := e.flushIO; got.syncs-resetIO.syncs != 1 || got.tableWrites-resetIO.tableWrites != 1 {
		t.Fatalf("a reset did %d syncs and %d table writes, want 1 and 1",
			got.syncs-resetIO.syncs, got.tableWrites-resetIO.tableWrites)
	}
	step("after a reset (no data)", 0, 0)
	c.ok("OpenZone", e.OpenZone(1))
	step("after an explicit open (a condition)", 1, 1)
	c.ok("CloseZone", e.CloseZone(1)) // a cut would close it: the table would change
	step("after a close", 1, 1)
	c.append(2, a)
	c.ok("PowerCut", e.PowerCut()) // the append is lost: the table is the flushed one
	step("after a cut that lost an append", 1, 0)
	step("with nothing new after the cut", 0, 0)
	c.append(3, a)
	step("after another append", 1, 1)

	c.ok("PowerCut", e.PowerCut())
	check := func(c *conf, when string) {
		t.Helper()
		c.expectZone(0, CondEmpty, 0)
		c.expectZone(2, CondEmpty, 0)
		if z := c.zone(3); z.WP-z.Start != 2*c.bs {
			t.Fatalf("%s: zone 3 wp +%d, want +%d", when, z.WP-z.Start, 2*c.bs)
		}
		if got := c.read(3*c.g.ZoneSize, 2*c.bs); !bytes.Equal(got, a) {
			t.Fatalf("%s: zone 3 lost its flushed data", when)
		}
	}
	check(c, "after the cut")
	c.ok("Close", e.Close())
	e, c = openEmuT(t, path, "")
	check(c, "reopened")
}

// TestEmuOneSyncFlushCutBeforeData: a Flush syncs once, after writing
// its table, so a power cut during that sync can leave the table on the
// media without the data it claims. Open must not expose such data: a
// zone whose claimed data does not match the checksums in the table goes
// back to what the Flush before made durable (its start, if the Flush
// persisted a reset), and the next Flush rewrites the table.
func TestEmuOneSyncFlushCutBeforeData(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev")
	e, c := openEmuT(t, path, emuTestGeo)
	a, b, d, r := c.buf(2*c.bs, 1), c.buf(c.bs, 2), c.buf(c.bs, 3), c.buf(c.bs, 4)
	c.append(0, a)
	c.append(2, d)
	c.ok("Flush", e.Flush())
	c.ok("ResetZone", e.ResetZone(2)) // durable at once (a Flush)
	c.append(0, b)                    // lost below
	c.append(1, d)                    // kept
	c.append(2, r)                    // lost below: the reset stays
	before := e.flushIO.syncs
	c.ok("Flush", e.Flush())
	if n := e.flushIO.syncs - before; n != 1 {
		t.Fatalf("a Flush with new data and a new table did %d syncs, want 1", n)
	}
	c.ok("Close", e.Close())
	// The cut kept the table but not zone 0's and zone 2's new blocks.
	damageFile(t, path, make([]byte, c.bs), e.FileOffset(2*c.bs), e.FileOffset(2*c.g.ZoneSize))
	log := captureLog(t)
	check := func(c *conf, when string) {
		t.Helper()
		if z := c.zone(0); z.WP-z.Start != 2*c.bs {
			t.Fatalf("%s: zone 0 wp +%d, want +%d (the data of the first flush)", when, z.WP-z.Start, 2*c.bs)
		}
		if got := c.read(0, 2*c.bs); !bytes.Equal(got, a) {
			t.Fatalf("%s: zone 0 lost the data of the first flush", when)
		}
		if z := c.zone(1); z.WP-z.Start != c.bs || !bytes.Equal(c.read(c.g.ZoneSize, c.bs), d) {
			t.Fatalf("%s: zone 1, whose data reached the media, wp +%d", when, z.WP-z.Start)
		}
		c.expectZone(2, CondEmpty, 0)
	}
	e2, c2 := openEmuT(t, path, "")
	check(c2, "reopened after the cut")
	if !strings.Contains(log.String(), "zone=0") || !strings.Contains(log.String(), "zone=2") {
		t.Fatalf("no warning for zones 0 and 2: %s", log.String())
	}
	c2.ok("Flush", e2.Flush()) // rewrites the table: nothing to check at the next Open
	c2.ok("Close", e2.Close())
	log.Reset()
	e3, c3 := openEmuT(t, path, "")
	defer e3.Close()
	check(c3, "reopened after a flush")
	if log.Len() != 0 {
		t.Fatalf("the Flush after the cut did not rewrite the table: %s", log.String())
	}
}

// BenchmarkEmuFlush: a 64 KiB append then a Flush, on a file in
// $TMPDIR (put it on a disk, not tmpfs, to see the syncs): the one-sync
// Flush against the two-sync order it replaced (twoSync forces it).
// Run the two alternately (-bench 'EmuFlush/one' then '/two', ...) to
// compare them under the same load.
func BenchmarkEmuFlush(b *testing.B) {
	for _, mode := range []string{"one-sync", "two-sync"} {
		b.Run(mode, func(b *testing.B) {
			d, err := Open("emu:"+filepath.Join(b.TempDir(), "dev")+"?zone_size=64M&zones=64&max_append=64K", Options{RingEntries: 64})
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			e := d.(*Emu)
			buf := alignedBuf(64 << 10)
			w := &appendWaiter{ch: make(chan appendResult, 1)}
			zone := 0
			b.SetBytes(int64(len(buf)))
			b.ResetTimer()
			for range b.N {
				e.twoSync = mode == "two-sync"
				if err := e.Append(zone, [][]byte{buf}, w); err != nil {
					if !errors.Is(err, ErrBeyondCapacity) && !errors.Is(err, ErrZoneFull) {
						b.Fatal(err)
					}
					zone++ // full: the next zone (64 zones of 1024 appends)
					continue
				}
				if err := e.Ring().Flush(); err != nil {
					b.Fatal(err)
				}
				if r := <-w.ch; r.err != nil {
					b.Fatal(r.err)
				}
				if err := e.Flush(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// alignedBuf is n bytes of page-aligned memory (O_DIRECT takes it).
func alignedBuf(n int) []byte {
	b := make([]byte, n+directAlign)
	off := (directAlign - int(uintptr(unsafe.Pointer(&b[0]))%directAlign)) % directAlign
	return b[off : off+n]
}

// TestEmuFlushAfterResetToTheSameWP: a zone reset and written again up
// to the write pointer it had at the last Flush leaves the table as it
// was, but the data under it is new: the next Flush must not keep a
// slot whose checksums describe the old data, or the next Open finds
// them wrong and throws the new, flushed data away.
func TestEmuFlushAfterResetToTheSameWP(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev")
	e, c := openEmuT(t, path, emuTestGeo)
	a, b := c.buf(2*c.bs, 1), c.buf(2*c.bs, 2)
	c.append(0, a)
	c.ok("Flush", e.Flush()) // its slot carries zone 0's checksum of a
	c.ok("ResetZone", e.ResetZone(0))
	c.append(0, b) // same write pointer and condition as flushed
	c.ok("Flush", e.Flush())
	c.ok("Close", e.Close())
	log := captureLog(t)
	e2, c2 := openEmuT(t, path, "")
	defer e2.Close()
	c2.expectZone(0, CondImpOpen, 2*c.bs)
	if got := c2.read(0, 2*c.bs); !bytes.Equal(got, b) {
		t.Fatal("zone 0 does not hold the data its last Flush made durable")
	}
	if log.Len() != 0 {
		t.Fatalf("a reopen after a clean Flush warned: %s", log.String())
	}
}

// TestEmuFlushCutAtTheTableCopy: FlushCut calls its cut once, by the
// time it copied the zone table (held just after that copy): a write
// completed before the cut survives a power cut after the flush, one
// submitted after it does not; a Flush that fails before its copy never
// calls cut. The engine's group commit counts on both: a sync before the
// cut shares the flush, one after it must wait for the next.
func TestEmuFlushCutAtTheTableCopy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev")
	e, c := openEmuT(t, path, emuTestGeo)
	t.Cleanup(func() { e.Close() }) // after holdFlush's release
	a, b := c.buf(c.bs, 1), c.buf(c.bs, 2)
	c.append(0, a)
	var cuts atomic.Int32
	held, release := holdFlush(t, e)
	flushed := make(chan error, 1)
	go func() { flushed <- e.FlushCut(func() { cuts.Add(1) }) }()
	<-held
	if n := cuts.Load(); n != 1 {
		t.Fatalf("FlushCut held after its table copy: cut called %d times, want 1", n)
	}
	if r := await(t, "an append after the cut", goAppend(e, 0, b)); r.err != nil {
		t.Fatalf("append after the cut: %v", r.err)
	}
	release()
	c.ok("FlushCut", await(t, "the held flush", flushed))
	if n := cuts.Load(); n != 1 {
		t.Fatalf("cut called %d times by one FlushCut, want 1", n)
	}
	c.ok("PowerCut", e.PowerCut())
	c.expectZone(0, CondClosed, c.bs)
	if got := c.read(0, 2*c.bs); !bytes.Equal(got[:c.bs], a) || !bytes.Equal(got[c.bs:], make([]byte, c.bs)) {
		t.Fatal("after the power cut: want the block written before the cut, then zeros")
	}

	e.FailFlush(1)
	if err := e.FlushCut(func() { cuts.Add(1) }); err == nil {
		t.Fatal("FlushCut with a failure armed: nil error")
	}
	if n := cuts.Load(); n != 1 {
		t.Fatalf("a FlushCut that failed before its copy called cut (%d calls in all, want 1)", n)
	}
}
