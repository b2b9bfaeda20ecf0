package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestBenchFoliosJSON(t *testing.T) {
	var out, errOut bytes.Buffer
	code := Main([]string{"bench", "folios", "--json", "--time", "60ms", "--rounds", "2",
		"--cache-size", "8388608", "--small-file", "262144"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var got foliosJSON
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out.String())
	}
	if got.LargeFolioRatio <= 0 || got.LargeFolioMBps <= 0 || got.SmallFolioMBps <= 0 ||
		got.StateLockRatio <= 0 || got.OneLockMBps <= 0 || got.SplitLockMBps <= 0 {
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
	// and a flush under pressure carries at least 512 KiB (the flusher
	// runs while more than half the background level is dirty), so only
	// the tails that the end of each round syncs make small I/Os.
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

func TestBenchFoliosRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--rounds", "0"},
		{"--bs", "1000"},
		{"--cache-size", "4096"},
		{"--small-bs", "0"},
		{"--max-io", "10"},
	} {
		var out, errOut bytes.Buffer
		code := Main(append([]string{"bench", "folios", "--time", "10ms"}, args...), &out, &errOut)
		if code == 0 || !strings.HasPrefix(errOut.String(), "zonefold: ") {
			t.Errorf("%v: exit %d, stderr %q; want a one-line error", args, code, errOut.String())
		}
	}
}
