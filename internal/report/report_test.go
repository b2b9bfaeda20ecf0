package report

import (
	"bytes"
	"math"
	"slices"
	"testing"
	"time"
)

func TestHuman(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"}, {513, "513 B"}, {1023, "1023 B"}, {1024, "1 KiB"}, {1536, "1.5 KiB"},
		{64 << 20, "64 MiB"}, {513 << 20, "513 MiB"}, {20968 << 10, "20.48 MiB"}, {1<<30 + 1<<20, "1 GiB"},
		{3 << 40, "3 TiB"}, {7 << 60, "7 EiB"}, {math.MaxInt64, "8 EiB"}, {-4096, "-4 KiB"},
		{math.MinInt64, "-8 EiB"},
		// Rounded: an amount at a glance (a size given is Exact's).
		{3000, "2.93 KiB"}, {1<<20 + 512, "1 MiB"}, {1280, "1.25 KiB"},
	} {
		if got := Human(tc.n); got != tc.want {
			t.Errorf("Human(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

func TestGiven(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"}, {513, "513 B"}, {1024, "1 KiB"}, {1536, "1.5 KiB"}, {1280, "1.25 KiB"},
		{3000, "3000 B"}, {1100, "1100 B"}, {1<<20 + 512, "1049088 B"}, {-3000, "-3000 B"},
		{64 << 20, "64 MiB"}, {20968 << 10, "20968 KiB"}, {41 << 19, "20.5 MiB"}, {6148 << 10, "6148 KiB"},
		{math.MaxInt64, "9223372036854775807 B"}, {math.MinInt64, "-8 EiB"},
	} {
		if got := Given(tc.n); got != tc.want {
			t.Errorf("Given(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

func TestExact(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"}, {3000, "3000 B"}, {1536, "1536 B"}, {6148 << 10, "6148 KiB"}, {64 << 20, "64 MiB"},
		{1 << 30, "1 GiB"}, {-4096, "-4 KiB"}, {math.MinInt64, "-8 EiB"}, {math.MaxInt64, "9223372036854775807 B"},
	} {
		if got := Exact(tc.n); got != tc.want {
			t.Errorf("Exact(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

func TestMiBps(t *testing.T) {
	if got := MiBps(3<<20, 2*time.Second); got != 1.5 {
		t.Fatalf("MiBps = %v, want 1.5", got)
	}
	if got := MiBps(1, 0); got != 0 {
		t.Fatalf("MiBps with no time = %v", got)
	}
}

func TestWriteJSONDoesNotEscape(t *testing.T) {
	var b bytes.Buffer
	if err := WriteJSON(&b, map[string]string{"device": "emu:/x?zone_size=1M&zones=8"}); err != nil {
		t.Fatal(err)
	}
	if want := "{\n  \"device\": \"emu:/x?zone_size=1M&zones=8\"\n}\n"; b.String() != want {
		t.Fatalf("WriteJSON = %q, want %q", b.String(), want)
	}
}

func TestMedianAndSpread(t *testing.T) {
	for _, c := range []struct {
		xs             []float64
		median, spread float64
	}{
		{nil, 0, 0},
		{[]float64{3}, 3, 1},
		{[]float64{4, 1}, 2.5, 4},
		{[]float64{5, 1, 3}, 3, 5},
		{[]float64{9, 2, 4, 3}, 3.5, 4.5},
		{[]float64{0, 2}, 1, 0},
	} {
		in := slices.Clone(c.xs)
		if got := Median(c.xs); got != c.median {
			t.Errorf("Median(%v) = %v, want %v", c.xs, got, c.median)
		}
		if got := Spread(c.xs); got != c.spread {
			t.Errorf("Spread(%v) = %v, want %v", c.xs, got, c.spread)
		}
		if !slices.Equal(in, c.xs) {
			t.Errorf("Median reordered its input: %v, was %v", c.xs, in)
		}
	}
}

func TestPlural(t *testing.T) {
	for _, c := range []struct {
		n    int
		want string
	}{{0, "0 streams"}, {1, "1 stream"}, {2, "2 streams"}} {
		if got := Plural(c.n, "stream"); got != c.want {
			t.Errorf("Plural(%d, stream) = %q; want %q", c.n, got, c.want)
		}
	}
	if got := Plural(int64(1), "zone"); got != "1 zone" {
		t.Errorf("Plural(int64 1, zone) = %q", got)
	}
}
