package zns

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const emuTestGeo = "?zone_size=1M&zones=8&zone_cap=768K&max_append=128K"

// openEmuT opens (or reopens) an emu device on path and returns its helper.
func openEmuT(t *testing.T, path, params string) (*Emu, *conf) {
	t.Helper()
	d := openT(t, "emu:"+path+params)
	e, ok := d.(*Emu)
	if !ok {
		t.Fatalf("Open gave %T, want *Emu", d)
	}
	return e, newConf(t, d)
}

func TestEmuReopenKeepsFlushedState(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev")
	e, c := openEmuT(t, path, emuTestGeo+"&max_open=2&max_active=3")
	a, b := c.buf(c.bs, 1), c.buf(c.bs, 2)
	c.append(0, a)
	c.append(1, a)
	c.ok("CloseZone", e.CloseZone(1))
	c.ok("FinishZone", e.FinishZone(2))
	c.ok("OpenZone", e.OpenZone(3))
	c.ok("Flush", e.Flush())
	c.append(0, b) // not flushed: lost on reopen
	c.ok("Close", e.Close())

	// Reopen without geometry: it comes from the header.
	e2, c2 := openEmuT(t, path, "")
	if g := e2.Geometry(); g.Zones != 8 || g.ZoneCap != 768<<10 || g.MaxOpen != 2 || g.MaxActive != 3 || g.MaxAppend != 128<<10 {
		t.Fatalf("reopened geometry %+v", g)
	}
	c2.expectZone(0, CondImpOpen, c.bs) // conditions as flushed
	c2.expectZone(1, CondClosed, c.bs)
	c2.expectZone(2, CondFull, 768<<10)
	c2.expectZone(3, CondExpOpen, 0)
	if got := c2.read(0, 2*c.bs); !bytes.Equal(got[:c.bs], a) || !bytes.Equal(got[c.bs:], make([]byte, c.bs)) {
		t.Fatal("reopened zone 0: want the flushed block, then zeros where the unflushed append was")
	}
	// The accounting is rebuilt: three active zones, the limit.
	_, err := c2.tryAppend(4, a)
	c2.expectErr("append past the reopened active limit", err, ErrTooManyActive)
	c2.ok("ResetZone", e2.ResetZone(3))
	c2.append(4, a)
	// A mismatched geometry is refused.
	if _, err := Open("emu:"+path+"?zones=9", Options{}); err == nil {
		t.Fatal("reopen with another zone count succeeded")
	}
}

func TestEmuReopenWithoutFlush(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev")
	e, c := openEmuT(t, path, emuTestGeo+"&conv=2")
	c.append(3, c.buf(c.bs, 1)) // never flushed
	c.ok("Close", e.Close())
	e2, c2 := openEmuT(t, path, "")
	if g := e2.Geometry(); g.Zones != 8 || g.ZoneCap != 768<<10 {
		t.Fatalf("reopened geometry %+v", g)
	}
	c2.expectZone(3, CondEmpty, 0)
	if z := c2.zone(1); z.Type != TypeConventional {
		t.Fatalf("zone 1 reopened as %+v", z)
	}
}

func TestEmuTornHeaderFallsBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev")
	e, c := openEmuT(t, path, emuTestGeo)
	c.append(0, c.buf(c.bs, 1))
	c.ok("Flush", e.Flush()) // slot A: zone 0 at +1 block
	c.append(0, c.buf(c.bs, 2))
	c.ok("Flush", e.Flush()) // slot B: zone 0 at +2 blocks
	slot := int64(e.seq%2) * e.slotLen
	c.ok("Close", e.Close())
	// Corrupt the newest slot: the previous one must win.
	f, err := openFileRW(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff, 0xff, 0xff}, slot+emuHdrFixed); err != nil {
		t.Fatal(err)
	}
	f.Close()
	e2, c2 := openEmuT(t, path, "")
	c2.expectZone(0, CondImpOpen, c.bs)
	// The lost slot claimed a block past the one opened: the device
	// says so (the engine reports it, and refuses to write over it).
	if fb, ok := e2.SlotFallback(); !ok || !slices.Equal(fb.DataPast, []int{0}) || fb.DamagedSlot != int(slot/e.slotLen) {
		t.Fatalf("SlotFallback = %+v, %v; want slot %d damaged, data past zone 0's write pointer", fb, ok, slot/e.slotLen)
	}
	c2.ok("Flush", e2.Flush())
	if fb, ok := e2.SlotFallback(); ok {
		t.Fatalf("after a Flush repaired the slot, SlotFallback = %+v", fb)
	}
}

func TestEmuPowerCut(t *testing.T) {
	e, c := openEmuT(t, filepath.Join(t.TempDir(), "dev"), emuTestGeo+"&conv=1")
	a, b := c.buf(c.bs, 1), c.buf(c.bs, 2)
	c.append(1, a)
	c.write(0, 0, a) // conventional: never reverted
	c.ok("Flush", e.Flush())
	c.append(1, b)
	c.append(2, b)
	c.ok("FinishZone", e.FinishZone(3))
	c.ok("PowerCut", e.PowerCut())
	c.expectZone(1, CondClosed, c.bs)
	c.expectZone(2, CondEmpty, 0)
	c.expectZone(3, CondEmpty, 0)
	c.expectZeros(c.zone(1).Start+c.bs, c.bs)
	c.expectZeros(c.zone(2).Start, c.bs)
	if !bytes.Equal(c.read(0, c.bs), a) || !bytes.Equal(c.read(c.zone(1).Start, c.bs), a) {
		t.Fatal("flushed data lost in a power cut")
	}
	// The device goes on: the next append lands where the lost one did.
	if off := c.append(1, b); off != c.zone(1).Start+c.bs {
		t.Fatalf("append after power cut at %d", off)
	}
}

func TestEmuTearLastWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev")
	e, c := openEmuT(t, path, emuTestGeo)
	if err := e.TearLastWrite(0); err == nil {
		t.Fatal("tear with no write succeeded")
	}
	a, b := c.buf(c.bs, 1), c.buf(4*c.bs, 2)
	c.append(1, a)
	c.ok("Flush", e.Flush())
	c.append(2, a) // unflushed, other zone: lost
	c.append(1, a) // unflushed, same zone, before the torn write: kept
	c.append(1, b) // torn after 1 block
	if err := e.TearLastWrite(3); err == nil {
		t.Fatal("tear of a non-block multiple succeeded")
	}
	if err := e.TearLastWrite(4 * c.bs); err == nil {
		t.Fatal("tear keeping the whole write succeeded")
	}
	c.ok("TearLastWrite", e.TearLastWrite(c.bs))
	check := func(c *conf) {
		t.Helper()
		c.expectZone(1, CondClosed, 3*c.bs)
		c.expectZone(2, CondEmpty, 0)
		got := c.read(c.zone(1).Start, 4*c.bs)
		if !bytes.Equal(got[:c.bs], a) || !bytes.Equal(got[c.bs:2*c.bs], a) || !bytes.Equal(got[2*c.bs:3*c.bs], b[:c.bs]) ||
			!bytes.Equal(got[3*c.bs:], make([]byte, c.bs)) {
			t.Fatal("torn zone content")
		}
	}
	check(c)
	if err := e.TearLastWrite(0); err == nil {
		t.Fatal("second tear succeeded")
	}
	c.ok("Close", e.Close())
	_, c2 := openEmuT(t, path, "")
	check(c2)
}

// A write a Flush made durable cannot be torn: the power cut that comes
// after the flush leaves it whole (the power-cut loop tore acknowledged
// data this way and reported it as lost).
func TestEmuTearLastWriteRefusesAFlushedWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev")
	e, c := openEmuT(t, path, emuTestGeo)
	a, b := c.buf(c.bs, 1), c.buf(2*c.bs, 2)
	c.append(1, a)
	c.append(1, b)
	c.ok("Flush", e.Flush())
	if err := e.TearLastWrite(c.bs); err == nil {
		t.Fatal("tear of a flushed write succeeded")
	}
	c.expectZone(1, CondImpOpen, 3*c.bs)
	c.ok("PowerCut", e.PowerCut())
	c.expectZone(1, CondClosed, 3*c.bs)
	if got := c.read(c.zone(1).Start, 3*c.bs); !bytes.Equal(got[:c.bs], a) || !bytes.Equal(got[c.bs:], b) {
		t.Fatal("flushed writes differ after the power cut")
	}
}

// Bytes that reached the file past the write pointer but were lost to a
// power cut stay unreadable when the zone is finished, as a ZNS device
// reads the unwritten blocks of a finished zone as zeros; the flushed
// finish keeps them so across a reopen.
func TestEmuFinishedZoneHidesLostWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev")
	e, c := openEmuT(t, path, emuTestGeo)
	a, b := c.buf(c.bs, 1), c.buf(2*c.bs, 2)
	c.append(1, a)
	c.ok("Flush", e.Flush())
	c.append(1, b) // reaches the file, never flushed
	c.ok("PowerCut", e.PowerCut())
	c.ok("FinishZone", e.FinishZone(1))
	check := func(c *conf) {
		t.Helper()
		c.expectZone(1, CondFull, 768<<10)
		if !bytes.Equal(c.read(c.zone(1).Start, c.bs), a) {
			t.Fatal("finished zone: the flushed block differs")
		}
		c.expectZeros(c.zone(1).Start+c.bs, 2*c.bs)
	}
	check(c)
	c.ok("Flush", e.Flush())
	c.ok("Close", e.Close())
	e2, c2 := openEmuT(t, path, "")
	check(c2)
	// A reset makes the whole zone writable and readable again.
	c2.ok("ResetZone", e2.ResetZone(1))
	c2.append(1, b)
	if !bytes.Equal(c2.read(c2.zone(1).Start, 2*c2.bs), b) {
		t.Fatal("zone rewritten after a reset reads back wrong")
	}
}

func TestEmuFailWriteAndRead(t *testing.T) {
	e, c := openEmuT(t, filepath.Join(t.TempDir(), "dev"), emuTestGeo)
	a := c.buf(c.bs, 1)
	e.FailWrite(2)
	c.append(1, a)
	_, err := c.tryAppend(1, make([]byte, 3)) // rule violation: does not count
	c.expectErr("misaligned append", err, ErrMisaligned)
	_, err = c.tryAppend(1, a)
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("second append: %v, want EIO", err)
	}
	c.expectZone(1, CondImpOpen, c.bs)
	c.append(1, a) // disarmed after firing
	e.FailWrite(1)
	if err := c.tryWrite(2, c.zone(2).Start, a); !errors.Is(err, syscall.EIO) {
		t.Fatalf("write: %v, want EIO", err)
	}
	c.expectZone(2, CondEmpty, 0)

	e.FailRead(1)
	buf := c.buf(c.bs, 0)
	w := newTestWaiter()
	c.ok("Read", e.Read(c.zone(1).Start, buf, w))
	if res := e.Ring().Wait(w); !errors.Is(CompletionErr("read", res), syscall.EIO) {
		t.Fatalf("read: %+v, want EIO", res)
	}
	if !bytes.Equal(c.read(c.zone(1).Start, c.bs), a) {
		t.Fatal("read after the injected failure differs")
	}
}

// TestEmuFailReadBad: FailReadBad's failed read finds bad media: every
// read that touches its range fails from then on, alone or as part of a
// larger read; reads beside it do not; FailRead(0) heals it.
func TestEmuFailReadBad(t *testing.T) {
	e, c := openEmuT(t, filepath.Join(t.TempDir(), "dev"), emuTestGeo)
	a := c.buf(4*c.bs, 1)
	c.append(1, a)
	start := c.zone(1).Start
	try := func(off, n int64) error {
		w := newTestWaiter()
		c.ok("Read", e.Read(off, c.buf(n, 0), w))
		return CompletionErr("read", e.Ring().Wait(w))
	}
	e.FailReadBad(1)
	if err := try(start+c.bs, c.bs); !errors.Is(err, syscall.EIO) {
		t.Fatalf("armed read: %v, want EIO", err)
	}
	for _, r := range [][2]int64{{start + c.bs, c.bs}, {start, 2 * c.bs}, {start, 4 * c.bs}} {
		if err := try(r[0], r[1]); !errors.Is(err, syscall.EIO) {
			t.Errorf("read [%d, +%d) over the bad range: %v, want EIO", r[0]-start, r[1], err)
		}
	}
	for _, r := range [][2]int64{{start, c.bs}, {start + 2*c.bs, 2 * c.bs}} {
		if err := try(r[0], r[1]); err != nil {
			t.Errorf("read [%d, +%d) beside the bad range: %v", r[0]-start, r[1], err)
		}
	}
	e.FailRead(0)
	if !bytes.Equal(c.read(start, 4*c.bs), a) {
		t.Fatal("read after FailRead(0) healed the range differs")
	}
}

// allocAppender is an AppendCompletion that does not allocate.
type allocAppender struct{ ch chan error }

func (a *allocAppender) Appended(_ int64, err error) { a.ch <- err }

func TestEmuAppendDoesNotAllocate(t *testing.T) {
	for _, dev := range []string{
		"emu:" + filepath.Join(t.TempDir(), "dev") + "?zone_size=4M&zones=2",
		"null:?size=8M&zone_size=4M",
		"null:?size=8M&zone_size=4M&completion_nsec=20000",
		"null:?size=8M&zone_size=4M&completion_nsec=20000&zone_serial=1",
	} {
		d := openT(t, dev)
		c := newConf(t, d)
		bufs := [][]byte{c.buf(c.bs, 1), c.buf(c.bs, 2)}
		a := &allocAppender{ch: make(chan error, 1)}
		read := c.buf(c.bs, 3)
		w := newTestWaiter()
		allocs := testing.AllocsPerRun(200, func() {
			if err := d.Append(0, bufs, a); err != nil {
				t.Fatal(err)
			}
			if err := <-a.ch; err != nil {
				t.Fatal(err)
			}
			if err := d.Read(0, read, w); err != nil {
				t.Fatal(err)
			}
			d.Ring().Wait(w)
		})
		if allocs != 0 {
			t.Errorf("%s: %.1f allocations per Append+Read, want 0", dev, allocs)
		}
	}
}

// One damaged header slot used to make the device unopenable (when it was
// slot 0, which names the zone count) with advice to format=1, which
// erases it. Either slot alone opens it now, with a warning, and the next
// Flush repairs the other.
func TestEmuOpensFromEitherIntactSlot(t *testing.T) {
	for damaged := range 2 {
		t.Run(fmt.Sprint("slot", damaged), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "dev")
			e, c := openEmuT(t, path, emuTestGeo)
			c.append(0, c.buf(c.bs, 1))
			c.ok("Flush", e.Flush()) // seq 3 in slot 1; seq 2 (zone 0 empty) in slot 0
			slotLen := e.slotLen
			c.ok("Close", e.Close())
			damageFile(t, path, bytes.Repeat([]byte{0xa5}, 64), int64(damaged)*slotLen)
			log := captureLog(t)
			e2, c2 := openEmuT(t, path, "")
			if want := fmt.Sprintf("damaged_slot=%d opened_slot=%d", damaged, 1-damaged); !strings.Contains(log.String(), want) {
				t.Fatalf("log %q lacks %q", log.String(), want)
			}
			wp := c.bs // slot 1 has the last flush
			if damaged == 1 {
				wp = 0
			}
			c2.expectZone(0, map[bool]Cond{true: CondEmpty, false: CondImpOpen}[wp == 0], wp)
			// Slot 1 lost: the block it claimed is past the write
			// pointer; slot 0 lost (the older): nothing is.
			fb, ok := e2.SlotFallback()
			if want := map[bool][]int{true: {0}, false: nil}[damaged == 1]; !ok || !slices.Equal(fb.DataPast, want) {
				t.Fatalf("SlotFallback = %+v, %v; want data past in zones %v", fb, ok, want)
			}
			c2.ok("Flush", e2.Flush())
			c2.ok("Close", e2.Close())
			log.Reset()
			openEmuT(t, path, "")
			if log.Len() != 0 {
				t.Fatalf("a Flush did not repair the damaged slot: %s", log.String())
			}
		})
	}
}

// Hostile backing files get a clear error, change nothing, and never hang.
func TestEmuRefusesHostileFiles(t *testing.T) {
	dir := t.TempDir()
	made := func(name string) string {
		path := filepath.Join(dir, name)
		e, c := openEmuT(t, path, emuTestGeo)
		c.append(7, c.buf(c.bs, 1))
		c.ok("Flush", e.Flush())
		c.ok("Close", e.Close())
		return path
	}
	truncated := made("truncated")
	st, err := os.Stat(truncated)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(truncated, st.Size()/2); err != nil {
		t.Fatal(err)
	}
	bothBad := made("both")
	f, err := openFileRW(bothBad)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(bytes.Repeat([]byte{0xff}, 4), emuHdrFixed)               // slot 0's first zone entry
	f.WriteAt(bytes.Repeat([]byte{0xff}, 4), emuSlotLen(8)+emuHdrFixed) // slot 1's
	f.Close()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, params, want string }{
		{truncated, "", fmt.Sprintf("the file has %d bytes, its geometry needs %d: it was truncated", st.Size()/2, st.Size())},
		// Its zone table is lost, not advised erased (format=1).
		{bothBad, "", "its zone table is lost: neither header slot holds a valid one (both hold bytes that fail their checks; the emu magic still reads)"},
		{fifo, emuTestGeo, "is a FIFO, not a regular file or a block device"},
		{fifo, "", "is a FIFO, not a regular file or a block device"},
		{dir, emuTestGeo, "is a directory, not a regular file or a block device"},
	} {
		done := make(chan error, 1)
		go func() {
			d, err := Open("emu:"+tc.path+tc.params, Options{})
			if err == nil {
				d.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open(%s%s) = %v, want an error with %q", tc.path, tc.params, err, tc.want)
			}
		case <-time.After(10 * time.Second):
			w, _ := os.OpenFile(tc.path, os.O_WRONLY, 0) // unblock it
			defer w.Close()
			t.Fatalf("Open(%s%s) hangs", tc.path, tc.params)
		}
	}
	if st2, err := os.Stat(truncated); err != nil || st2.Size() != st.Size()/2 {
		t.Fatalf("the truncated file was changed: %v, %v", st2.Size(), err)
	}
}

// Page-aligned appends go through the O_DIRECT descriptor, others through
// the buffered one (directAligned); mixed in one zone, every block reads
// back as written, before and after a flush and a reopen.
func TestEmuDirectAndBufferedWritesMix(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev")
	e, c := openEmuT(t, path, emuTestGeo)
	if !e.hasDirect {
		t.Skip("the temporary directory's file system refuses O_DIRECT")
	}
	a := c.buf(c.bs, 1)
	big := c.buf(2*c.bs, 2)
	b := big[8 : 8+c.bs] // not page-aligned: the buffered descriptor
	if directAligned([][]byte{b}, 0) || !directAligned([][]byte{a}, 0) || directAligned([][]byte{a}, 512) {
		t.Fatal("directAligned misjudges alignment")
	}
	want := slices.Concat(a, b, a, b)
	c.append(0, a)
	c.append(0, b)
	c.append(0, a, b)
	if got := c.read(0, 4*c.bs); !bytes.Equal(got, want) {
		t.Fatal("mixed direct and buffered appends read back wrong before the flush")
	}
	c.ok("Flush", e.Flush())
	c.ok("Close", e.Close())
	_, c2 := openEmuT(t, path, "")
	if got := c2.read(0, 4*c.bs); !bytes.Equal(got, want) {
		t.Fatal("mixed direct and buffered appends read back wrong after a reopen")
	}
}

// damageFile overwrites the file at path with b at off, behind the
// device's back.
func damageFile(t *testing.T, path string, b []byte, offs ...int64) {
	t.Helper()
	f, err := openFileRW(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, off := range offs {
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
	}
}

// captureLog sends the default logger to a buffer until the test ends.
func captureLog(t *testing.T) *bytes.Buffer {
	var log bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&log, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	return &log
}

// Page-aligned reads go through the O_DIRECT descriptor as appends do:
// through the page cache, every miss cost the submitting io_uring_enter
// a page cache insertion, under the ring's lock, and cached the bytes
// a second time beside the engine's own cache. After a read, none of
// the read range is in the host's page cache, and the bytes are right.
func TestEmuAlignedReadsBypassThePageCache(t *testing.T) {
	// Memory is all a tmpfs has: its pages are always resident (and
	// recent kernels take O_DIRECT there), so the check needs a disk
	// file system; TMPDIR may be a tmpfs, /var/tmp usually is not.
	dir := t.TempDir()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err == nil && st.Type == unix.TMPFS_MAGIC {
		var err error
		if dir, err = os.MkdirTemp("/var/tmp", "zf-emu-direct-"); err != nil {
			t.Skipf("the temporary directory is a tmpfs, and /var/tmp: %v", err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := unix.Statfs(dir, &st); err == nil && st.Type == unix.TMPFS_MAGIC {
			t.Skip("the temporary directory and /var/tmp are tmpfs: nothing to bypass")
		}
	}
	path := filepath.Join(dir, "dev")
	e, c := openEmuT(t, path, emuTestGeo)
	if !e.hasDirect {
		t.Skip("the file system of " + dir + " refuses O_DIRECT")
	}
	const n = 64 << 10
	want := c.buf(n, 7)
	c.append(0, want)
	c.ok("Flush", e.Flush())
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Whatever the append left cached goes, so that what is cached
	// after the read is the read's.
	c.ok("fadvise", unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED))
	if got := c.read(0, n); !bytes.Equal(got, want) {
		t.Fatal("an aligned read returned other bytes than were appended")
	}
	off := emuDataOff(8)
	m, err := unix.Mmap(int(f.Fd()), off, n, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, n/os.Getpagesize())
	// x/sys has no Mincore wrapper.
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatalf("mincore: %v", errno)
	}
	cached := 0
	for _, v := range vec {
		cached += int(v & 1)
	}
	if cached != 0 {
		t.Fatalf("%d of %d pages of the read range are in the page cache after an aligned read", cached, len(vec))
	}
}

// TestEmuPowerCutKeeping: each zone keeps the prefix asked of what was
// written to it since the last Flush, whatever the order the zones were
// written in; a finish since is lost; a reopen sees the same.
func TestEmuPowerCutKeeping(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev")
	e, c := openEmuT(t, path, emuTestGeo)
	a, b := c.buf(c.bs, 1), c.buf(3*c.bs, 2)
	c.append(1, a)
	c.ok("Flush", e.Flush())
	c.append(1, b) // zone 1 keeps 2 of these 3 blocks
	c.append(2, b) // zone 2, written after, keeps all 3
	c.append(3, a) // zone 3 keeps nothing
	c.append(4, a)
	c.ok("FinishZone", e.FinishZone(4)) // zone 4 keeps its block, not the finish
	asked := map[int]int64{}
	keep := map[int]int64{1: 2 * c.bs, 2: 3 * c.bs, 3: 0, 4: c.bs}
	if err := e.PowerCutKeeping(func(zone int, n int64) int64 { return c.bs / 2 }); err == nil {
		t.Fatal("a cut keeping half a block succeeded")
	}
	c.ok("PowerCutKeeping", e.PowerCutKeeping(func(zone int, n int64) int64 {
		asked[zone] = n
		return keep[zone]
	}))
	if want := map[int]int64{1: 3 * c.bs, 2: 3 * c.bs, 3: c.bs, 4: c.bs}; !maps.Equal(asked, want) {
		t.Fatalf("asked about %v, want %v (the bytes written to each zone since the flush)", asked, want)
	}
	check := func(c *conf) {
		t.Helper()
		c.expectZone(1, CondClosed, 3*c.bs)
		c.expectZone(2, CondClosed, 3*c.bs)
		c.expectZone(3, CondEmpty, 0)
		c.expectZone(4, CondClosed, c.bs)
		z1 := c.read(c.zone(1).Start, 4*c.bs)
		if !bytes.Equal(z1[:c.bs], a) || !bytes.Equal(z1[c.bs:3*c.bs], b[:2*c.bs]) || !bytes.Equal(z1[3*c.bs:], make([]byte, c.bs)) {
			t.Fatal("zone 1 does not hold its flushed block and the 2 blocks kept")
		}
		if !bytes.Equal(c.read(c.zone(2).Start, 3*c.bs), b) {
			t.Fatal("zone 2 does not hold the 3 blocks kept")
		}
		c.expectZeros(c.zone(3).Start, c.bs)
	}
	check(c)
	c.ok("Close", e.Close())
	_, c2 := openEmuT(t, path, "")
	check(c2)
}
