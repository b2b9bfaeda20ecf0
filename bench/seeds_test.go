package bench

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestSeedsQuickJSON(t *testing.T) {
	var stdout bytes.Buffer
	if err := Seeds(t.Context(), &stdout, SeedsOptions{Quick: true, JSON: true}); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Quick bool      `json:"quick"`
		Seeds []seedRow `json:"seeds"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout.String())
	}
	want := []struct {
		idea string
		bar  float64
	}{
		{"bcachefs folio order hint", 1.5},
		{"iomap one-lock state update", 1.08},
		{"iomap large folios in writeback", 1},
		{"xfs per-file zone affinity", 1.11},
		{"aio batching", 2},
	}
	if !got.Quick || len(got.Seeds) != len(want) {
		t.Fatalf("quick %v, %d rows; want quick and %d rows: %+v", got.Quick, len(got.Seeds), len(want), got.Seeds)
	}
	for i, w := range want {
		r := got.Seeds[i]
		if r.Idea != w.idea || r.Bar != w.bar || r.Kernel == "" || r.Workload == "" || r.Detail == "" {
			t.Errorf("row %d: %+v; want idea %q with bar %v", i, r, w.idea, w.bar)
		}
		// Timing decides nothing here; that a ratio was measured does,
		// and that meets follows from it.
		if r.Measured <= 0 || r.Meets != (r.Measured >= r.Bar) {
			t.Errorf("row %d (%s): measured %v, meets %v", i, r.Idea, r.Measured, r.Meets)
		}
	}
	// --quick runs the affinity row on a small emu device, not the
	// null: device of a full run: the row says so (it said "null:").
	if w := got.Seeds[3].Workload; !strings.Contains(w, "emu") || strings.Contains(w, "null:") {
		t.Errorf("affinity row's workload %q; want it to name the emu device --quick runs on", w)
	}
}

// The affinity row calls rounds overlapping only where mru's and none's
// ranges meet: every mru round below every none round is a difference
// (against mru), and the row said "rounds overlap (1468-1468 vs
// 2174-2174)" for one.
func TestSeedAffinityRowOverlap(t *testing.T) {
	row := func(mbps, lo, hi float64) *gcRow {
		return &gcRow{HostMiBps: mbps, MiBpsMin: lo, MiBpsMax: hi}
	}
	for _, tc := range []struct {
		mru, none *gcRow
		overlap   bool
		meets     bool
	}{
		{row(1468, 1468, 1468), row(2174, 2174, 2174), false, false},
		{row(120, 90, 150), row(100, 80, 130), true, false},
		{row(200, 190, 210), row(100, 90, 110), false, true},
	} {
		ratio := tc.mru.HostMiBps / tc.none.HostMiBps
		tc.mru.MiBpsRatio = &ratio
		r := seedAffinityRow(16, "null:", 3, tc.mru, tc.none)
		if says := strings.Contains(r.Detail, "overlap"); says != tc.overlap || r.Meets != tc.meets {
			t.Errorf("mru %.0f-%.0f none %.0f-%.0f: %q: says overlap %v, meets %v; want %v, %v",
				tc.mru.MiBpsMin, tc.mru.MiBpsMax, tc.none.MiBpsMin, tc.none.MiBpsMax, r.Detail, says, r.Meets, tc.overlap, tc.meets)
		}
	}
}

// The table: its columns and rows (the measurements are
// TestSeedsQuickJSON's).
func TestSeedsTable(t *testing.T) {
	var stdout bytes.Buffer
	rows := []seedRow{newSeedRow("aio batching", "4k writes QD128", "2x", 2, 2.5, "10 vs 4 IOPS"),
		newSeedRow("xfs per-file zone affinity", "bench gc seed, /dev/nullb0", "+11% (1.11x)", 1.11, 0.9, "9 vs 10 MiB/s")}
	if err := printSeeds(&stdout, SeedsOptions{Quick: true}, rows); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"idea", "kernel", "zonefold", "meets", "aio batching", "smoke test", "2.50x", "yes", "0.90x", "NO", "/dev/nullb0"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, stdout.String())
		}
	}
}

// --check: a row that misses its bar makes bench seeds fail.
func TestCheckSeeds(t *testing.T) {
	rows := []seedRow{
		newSeedRow("a", "w", "k", 1.5, 2, "d"),
		newSeedRow("b", "w", "k", 1.11, 1.07, "d"),
	}
	if err := checkSeeds(rows[:1]); err != nil {
		t.Fatalf("every bar met: %v", err)
	}
	err := checkSeeds(rows)
	if err == nil || err.Error() != "1 of 2 comparisons miss their kernel series' bar: b (1.07x, bar 1.11x)" {
		t.Fatalf("a bar missed: %v", err)
	}
}
