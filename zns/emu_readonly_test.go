package zns

import (
	"bytes"
	"path/filepath"
	"testing"
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
