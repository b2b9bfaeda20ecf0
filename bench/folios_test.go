package bench

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

func TestFoliosJSON(t *testing.T) {
	o := DefaultFolios
	o.JSON, o.Duration, o.Rounds, o.CacheSize, o.SmallFile = true, 60*time.Millisecond, 2, 8<<20, 256<<10
	var out bytes.Buffer
	if err := Folios(t.Context(), &out, o); err != nil {
		t.Fatal(err)
	}
	var got foliosJSON
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out.String())
	}
	if got.LargeFolioRatio <= 0 || got.LargeFolioMiBps <= 0 || got.SmallFolioMiBps <= 0 ||
		got.StateLockRatio <= 0 || got.OneLockMiBps <= 0 || got.SplitLockMiBps <= 0 {
		t.Errorf("missing measurements: %+v", got)
	}
	// The order hint shows in the counters, whatever the timing: 128 KiB
	// aligned writes make order-5 folios at max order 9, and only order-0
	// ones at max order 0.
	for k, n := range got.LargeFoliosByOrder {
		if (k == 5) != (n > 0) {
			t.Errorf("max order 9: folios by order %v, want order 5 only", got.LargeFoliosByOrder)
			break
		}
	}
	for k, n := range got.SmallFoliosByOrder {
		if (k == 0) != (n > 0) {
			t.Errorf("max order 0: folios by order %v, want order 0 only", got.SmallFoliosByOrder)
			break
		}
	}
	// Writeback merged contiguous extents: each 4 KiB folio is an extent,
	// and the engine packs a file's contiguous extents into records of up
	// to a max append (1 MiB here), so only the tails that the end of each
	// round syncs make small appends.
	if got.SmallWritebackIOs <= 0 || got.SmallWritebackExts < 4*uint64(got.SmallWritebackIOs) {
		t.Errorf("max order 0: %d extents in %d I/Os; want them merged", got.SmallWritebackExts, got.SmallWritebackIOs)
	}
	// The overwrites ran on the file's existing 2 MiB folios: no new ones.
	for k, n := range got.OneLockFoliosByOrder {
		if n != 0 {
			t.Errorf("state-lock benchmark made %d folios of order %d", n, k)
		}
	}
}
