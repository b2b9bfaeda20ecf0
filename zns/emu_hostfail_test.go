package zns

import (
	"bytes"
	"path/filepath"
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
	path := filepath.Join(t.TempDir(), "dev")
	e, c := openEmuT(t, path, emuTestGeo)
	c.need(1)
	zone := c.seq[0]
	start := c.zone(zone).Start
	const n = 128 << 10
	a, b, d := c.buf(n, 1), c.buf(n, 2), c.buf(n, 3)
	c.append(zone, a)

	// The host refuses writes from the end of a on.
	var old unix.Rlimit
	c.ok("Getrlimit", unix.Getrlimit(unix.RLIMIT_FSIZE, &old))
	limit := unix.Rlimit{Cur: uint64(e.FileOffset(start + n)), Max: old.Max}
	c.ok("Setrlimit", unix.Setrlimit(unix.RLIMIT_FSIZE, &limit))
	_, err := c.tryAppend(zone, b)
	c.ok("Setrlimit", unix.Setrlimit(unix.RLIMIT_FSIZE, &old))
	if err == nil {
		t.Fatal("an append the host file refused succeeded")
	}
	t.Logf("the refused append: %v", err)

	off := c.append(zone, d)
	c.ok("Flush", e.Flush())
	c.ok("Close", e.Close())

	_, c2 := openEmuT(t, path, "")
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
}
