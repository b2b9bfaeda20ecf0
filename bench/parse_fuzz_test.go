package bench

import (
	"math/big"
	"strconv"
	"strings"
	"testing"
)

// FuzzParseSkew: --skew accepts exactly two plain percentages in (0,
// 100) joined by one slash; anything else (a third field, trailing text,
// a sign, nan) is refused, so a typo is an error, not a different run.
func FuzzParseSkew(f *testing.F) {
	for _, s := range []string{"80/20", "90/10", "50.5/0.5", "80/20/30", "80x/20", "80/20 ", "/", "nan/20", "1e1/2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		share, files, err := ParseSkew(s)
		a, b, ok := strings.Cut(s, "/")
		x, errX := strconv.ParseFloat(a, 64)
		y, errY := strconv.ParseFloat(b, 64)
		want := ok && errX == nil && errY == nil && x > 0 && x < 100 && y > 0 && y < 100
		if (err == nil) != want {
			t.Fatalf("ParseSkew(%q) = %v, %v, %v; want accepted=%v", s, share, files, err, want)
		}
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		if share != x/100 || files != y/100 {
			t.Fatalf("ParseSkew(%q) = %v, %v; want %v, %v", s, share, files, x/100, y/100)
		}
	})
}

// FuzzParseFioSize: a size bench kernel scales is exact: a positive
// number of bytes equal to the digits times the suffix's power of 1024,
// or an error (never a size that overflowed int64).
func FuzzParseFioSize(f *testing.F) {
	for _, s := range []string{"64m", "4k", "1g", "16KiB", "2t", "9999999999999t", "8388608t", "0", "-1", "m", "4ib"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseFioSize(s)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		if n <= 0 {
			t.Fatalf("parseFioSize(%q) = %d", s, n)
		}
		// The exact value, by big integers: digits, then k/m/g/t (an
		// optional "i" and "b" after it) as powers of 1024.
		t2 := strings.ToLower(s)
		t2 = strings.TrimSuffix(strings.TrimSuffix(t2, "b"), "i")
		shift := uint(0)
		if i := strings.IndexByte("kmgt", t2[len(t2)-1]); i >= 0 {
			shift, t2 = uint(10*(i+1)), t2[:len(t2)-1]
		}
		d, ok := new(big.Int).SetString(t2, 10)
		if !ok {
			t.Fatalf("parseFioSize(%q) = %d from %q, not a number", s, n, t2)
		}
		if want := d.Lsh(d, shift); !want.IsInt64() || want.Int64() != n {
			t.Fatalf("parseFioSize(%q) = %d, want %v", s, n, want)
		}
	})
}
