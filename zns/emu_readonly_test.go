package zns

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/zonefold/zonefold/uring"
)

// TestEmuReopensAFinishedZoneGoneReadOnly: a zone finished with part of
// it unwritten, then gone read-only (media failure), is persisted by a
// Flush; the device must open again with it read-only, its written part
// readable. (A file system whose finished metadata zone fails would
// otherwise not open at all.)
//
// Failed before: loadZones took "unwritten bytes" for a mark only a full
// zone may carry and refused the whole device as corrupt.
func TestEmuReopensAFinishedZoneGoneReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev")
	e, c := openEmuT(t, path, emuTestGeo)
	a := c.buf(c.bs, 1)
	c.append(0, a)
	c.ok("FinishZone", e.FinishZone(0))
	c.ok("ZoneReadOnly", e.ZoneReadOnly(0))
	c.append(1, a) // a change for the Flush to persist
	c.ok("Flush", e.Flush())
	c.ok("Close", e.Close())

	e2, c2 := openEmuT(t, path, "")
	defer e2.Close()
	z := c2.zone(0)
	if z.Cond != CondReadOnly {
		t.Fatalf("reopened zone 0 is %s, want read-only", z.Cond)
	}
	if got := c2.read(0, c.bs); !bytes.Equal(got, a) {
		t.Fatal("reopened read-only zone 0 lost its written block")
	}
}

// TestEmuZoneOffline: a zone gone offline reads no more, takes no append,
// finish or reset, gives up its place among the active zones, and stays
// offline across a Flush and a reopen; its neighbours are untouched.
func TestEmuZoneOffline(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev")
	e, c := openEmuT(t, path, emuTestGeo)
	a := c.buf(c.bs, 1)
	c.append(0, a)
	c.append(1, a)
	c.ok("ZoneOffline", e.ZoneOffline(0))
	if z := c.zone(0); z.Cond != CondOffline || z.Cond.Active() {
		t.Fatalf("zone 0 is %s after ZoneOffline", z.Cond)
	}
	_, err := c.tryAppend(0, a)
	c.expectErr("append to an offline zone", err, ErrReadOnly)
	c.expectErr("finish an offline zone", e.FinishZone(0), ErrReadOnly)
	c.expectErr("reset an offline zone", e.ResetZone(0), ErrReadOnly)
	c.expectErr("read an offline zone", e.Read(0, c.buf(c.bs, 0), uring.NewWaiter()), ErrReadOnly)
	c.ok("Flush", e.Flush())
	c.ok("Close", e.Close())

	e2, c2 := openEmuT(t, path, "")
	defer e2.Close()
	if z := c2.zone(0); z.Cond != CondOffline {
		t.Fatalf("reopened zone 0 is %s, want offline", z.Cond)
	}
	c2.expectErr("read the reopened offline zone", e2.Read(0, c2.buf(c2.bs, 0), uring.NewWaiter()), ErrReadOnly)
	if got := c2.read(c2.zone(1).Start, c.bs); !bytes.Equal(got, a) {
		t.Fatal("zone 1 lost its block")
	}
}
