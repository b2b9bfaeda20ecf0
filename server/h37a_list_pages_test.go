package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// TestH37aListingCostsItsSizeNotPagesTimesFiles: Client.List pages
// through the namespace 64 KiB at a time, and the daemon took every
// file from the engine, sorted, for each page, so a listing of n files
// cost n per page: n²/250 with names of 255 bytes. By hand, `zonefold
// ls` of 52k such files took 12.5 s (26k files of 40 bytes: 0.85 s).
// What the daemon takes from the engine over a whole listing must stay
// within a small multiple of the files listed.
func TestH37aListingCostsItsSizeNotPagesTimesFiles(t *testing.T) {
	d := newDaemon(t)
	c := dial(t, d.socket)
	ctx := context.Background()
	const files = 2000 // 255-byte names: about 8 pages
	name := func(i int) string {
		s := fmt.Sprintf("%05d-", i)
		return s + strings.Repeat("n", 255-len(s))
	}
	for i := range files {
		h, _, err := c.Open(ctx, name(i), OpenCreate|OpenExcl|OpenDeferSync)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.CloseFile(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	before := d.srv.listScanned.Load()
	list, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	scanned := d.srv.listScanned.Load() - before
	if len(list) != files {
		t.Fatalf("listed %d files, want %d", len(list), files)
	}
	for i, e := range list {
		if e.Name != name(i) {
			t.Fatalf("entry %d is %q, want %q", i, e.Name, name(i))
		}
	}
	if scanned > 2*files {
		t.Fatalf("listing %d files took %d entries from the engine (%.1f per file listed); paging must cost about the listing, not the namespace per page",
			files, scanned, float64(scanned)/files)
	}
}
