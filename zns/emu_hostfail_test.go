package zns

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// TestEmuFailedHostWriteKeepsFlushedData: an append that the host file
// refuses (its file system full, a write error: here RLIMIT_FSIZE makes
// the write fail with EFBIG) fails, and the appends around it in the
// same zone that succeeded are durable after a Flush that succeeded, as
// they would be on a zoned drive: a reopen serves them.
//
// The emu had advanced the zone's write pointer and its running
// checksum over the failed append's data when it was submitted; a Flush
// then recorded a checksum over data the file never got, and the next
// Open, finding it wrong, took the zone back to the Flush before (as
// after a power cut during a Flush), dropping every append since,
// those an acknowledged Flush had made durable among them.
func TestEmuFailedHostWriteKeepsFlushedData(t *testing.T) {
	e, c, path, zone, start := hostFailEmu(t)
	const n = 128 << 10
	a, b, d := c.buf(n, 1), c.buf(n, 2), c.buf(n, 3)
	c.append(zone, a)

	// The host refuses writes from the end of a on.
	err := appendHostRefuses(c, e, zone, start+n, b)
	t.Logf("the refused append: %v", err)

	off := c.append(zone, d)
	c.ok("Flush", e.Flush())

	closeReopen(c, e, path, func(c2 *conf) {
		z := c2.zone(zone)
		if z.WP-z.Start != off-start+n {
			t.Fatalf("zone %d after reopen: write pointer at +%d, want +%d (after the flushed appends)", zone, z.WP-z.Start, off-start+n)
		}
		if got := c2.read(start, n); !bytes.Equal(got, a) {
			t.Fatal("the append before the refused one, flushed, differs after reopen")
		}
		if got := c2.read(off, n); !bytes.Equal(got, d) {
			t.Fatal("the append after the refused one, flushed, differs after reopen")
		}
	})
}

// TestEmuFailedHostWriteReadsZeros: the range of a write the host file
// did not take, or took only part of, lies below the zone's write
// pointer (the emu moves it at submission); it reads as zeros, as a
// zoned drive's unwritten blocks do, from when the write's failure is
// reported, after a Flush and after a reopen. It used to read as
// whatever the file held there: after a reset, the zone's old data,
// whose whole records (the engine's, numbered above its checkpoint)
// recovery could then replay as new; here part of the failed write's
// own data too.
func TestEmuFailedHostWriteReadsZeros(t *testing.T) {
	e, c, path, zone, start := hostFailEmu(t)
	const n = 128 << 10
	// The zone's old data, flushed, then reset.
	for i := range 4 {
		c.append(zone, c.buf(n, byte(10+i)))
	}
	c.ok("Flush", e.Flush())
	c.ok("ResetZone", e.ResetZone(zone))

	a, b, d := c.buf(n, 1), c.buf(n, 2), c.buf(n, 3)
	c.append(zone, a)
	// The host refuses the write from the middle of b on: its first
	// half reaches the file, the rest does not (a short write).
	appendHostRefuses(c, e, zone, start+n+n/2, b)
	off := c.append(zone, d)
	check := func(c *conf, when string) {
		t.Helper()
		if got := c.read(start, n); !bytes.Equal(got, a) {
			t.Fatalf("%s: the append before the failed one differs", when)
		}
		if got := c.read(start+n, n); !bytes.Equal(got, make([]byte, n)) {
			nz := 0
			for _, x := range got {
				if x != 0 {
					nz++
				}
			}
			t.Fatalf("%s: the failed append's range reads %d nonzero bytes, want zeros", when, nz)
		}
		if got := c.read(off, n); !bytes.Equal(got, d) {
			t.Fatalf("%s: the append after the failed one differs", when)
		}
	}
	check(c, "before the flush")
	c.ok("Flush", e.Flush())
	check(c, "after the flush")
	closeReopen(c, e, path, func(c *conf) { check(c, "after reopen") })
}

// TestEmuFailedWriteZeroedByTheFlushThatClaimsIt: where the host cannot
// zero a failed write's range when the write fails, the Flush that
// claims the range zeroes it first, and fails, writing no table, while
// it cannot.
func TestEmuFailedWriteZeroedByTheFlushThatClaimsIt(t *testing.T) {
	e, c, path, zone, start := hostFailEmu(t)
	const n = 128 << 10
	c.append(zone, c.buf(n, 9))
	c.append(zone, c.buf(n, 8))
	c.ok("Flush", e.Flush())
	c.ok("ResetZone", e.ResetZone(zone))
	a := c.buf(n, 1)
	c.append(zone, a)
	broken := true
	e.zero = zeroRangeFailing(e, &broken)
	appendHostRefuses(c, e, zone, start+n, c.buf(n, 2))
	if err := e.Flush(); err == nil {
		t.Fatal("a Flush claiming a failed write's range it could not zero succeeded")
	}
	broken = false
	c.ok("Flush", e.Flush())
	closeReopen(c, e, path, func(c *conf) {
		if z := c.zone(zone); z.WP-z.Start != 2*n {
			t.Fatalf("write pointer at +%d after reopen, want +%d", z.WP-z.Start, 2*n)
		}
		c.expectZeros(start+n, n)
	})
}

// hostFailEmu opens a new emu device for a host-failure test: the
// device, its conf, its image's path, the sequential zone the test
// writes and that zone's start.
func hostFailEmu(t *testing.T) (e *Emu, c *conf, path string, zone int, start int64) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "dev")
	e, c = openEmuT(t, path, emuTestGeo)
	c.need(1)
	zone = c.seq[0]
	return e, c, path, zone, c.zone(zone).Start
}

// closeReopen closes e, opens its image at path again, runs check on
// the reopened device and closes that.
func closeReopen(c *conf, e *Emu, path string, check func(c *conf)) {
	c.t.Helper()
	c.ok("Close", e.Close())
	e2, c2 := openEmuT(c.t, path, "")
	check(c2)
	c2.ok("Close", e2.Close())
}

// appendHostRefuses appends b to zone with the host file refusing every
// byte from the device offset end on (RLIMIT_FSIZE: as its file system
// full), and returns the append's error, which must not be nil.
func appendHostRefuses(c *conf, e *Emu, zone int, end int64, b []byte) error {
	c.t.Helper()
	var old unix.Rlimit
	c.ok("Getrlimit", unix.Getrlimit(unix.RLIMIT_FSIZE, &old))
	limit := unix.Rlimit{Cur: uint64(e.FileOffset(end)), Max: old.Max}
	c.ok("Setrlimit", unix.Setrlimit(unix.RLIMIT_FSIZE, &limit))
	_, err := c.tryAppend(zone, b)
	c.ok("Setrlimit", unix.Setrlimit(unix.RLIMIT_FSIZE, &old))
	if err == nil {
		c.t.Fatal("an append the host file refused succeeded")
	}
	return err
}

// zeroRangeFailing is e's zeroRange, failing while *broken.
func zeroRangeFailing(e *Emu, broken *bool) func(off, n int64) error {
	return func(off, n int64) error {
		if *broken {
			return unix.EIO
		}
		return e.zeroRange(off, n)
	}
}

// TestEmuRollbacksReported: data the last Flush claimed that no longer
// matches its checksum at Open (damaged at rest, here one bit) takes the
// zone back to the Flush before, and Rollbacks says so: the device
// cannot tell that from a power cut during the Flush, its user must
// report it (the engine does).
func TestEmuRollbacksReported(t *testing.T) {
	e, c, path, zone, start := hostFailEmu(t)
	c.append(zone, c.buf(c.bs, 1))
	c.ok("Flush", e.Flush())
	c.append(zone, c.buf(2*c.bs, 2))
	c.ok("Flush", e.Flush())
	if r := e.Rollbacks(); len(r) != 0 {
		t.Fatalf("a new device reports rollbacks %v", r)
	}
	at := e.FileOffset(start + c.bs + 10)
	c.ok("Close", e.Close())
	img, err := os.ReadFile(path)
	c.ok("ReadFile", err)
	img[at] ^= 1
	c.ok("WriteFile", os.WriteFile(path, img, 0o644))
	e, c = openEmuT(t, path, "")
	c.expectZone(zone, CondImpOpen, c.bs)
	want := []Rollback{{Zone: zone, From: c.bs, To: 3 * c.bs}}
	if r := e.Rollbacks(); !slices.Equal(r, want) {
		t.Fatalf("Rollbacks %v, want %v", r, want)
	}
	c.ok("Close", e.Close())
}

// TestEmuResetAllDropsFailedWrites: a failed write whose range could not
// be zeroed when it failed is zeroed by the Flush that claims it; but a
// ResetAll (as ResetZone) takes its range back, and new data written
// there since must not be zeroed by the next Flush. ResetAll kept the
// failed write, and that Flush zeroed the new data, then made the zeros
// durable.
func TestEmuResetAllDropsFailedWrites(t *testing.T) {
	e, c, path, zone, start := hostFailEmu(t)
	const n = 128 << 10
	c.append(zone, c.buf(n, 1))
	broken := true
	e.zero = zeroRangeFailing(e, &broken)
	appendHostRefuses(c, e, zone, start+n, c.buf(n, 2))
	broken = false
	c.ok("ResetAll", e.ResetAll())
	a, b := c.buf(n, 3), c.buf(n, 4)
	c.append(zone, a)
	c.append(zone, b)
	c.ok("Flush", e.Flush())
	check := func(c *conf, when string) {
		t.Helper()
		if got := c.read(start+n, n); !bytes.Equal(got, b) {
			t.Fatalf("data written after ResetAll over a failed write's range reads otherwise %s", when)
		}
	}
	check(c, "after a Flush")
	closeReopen(c, e, path, func(c *conf) { check(c, "after reopen") })
}
