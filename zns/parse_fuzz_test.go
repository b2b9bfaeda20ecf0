package zns

import (
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// sizeGrammar is ParseSize's documented grammar: digits, an optional
// fraction, an optional binary suffix in any case.
var sizeGrammar = regexp.MustCompile(`(?i)^([0-9]+(?:\.[0-9]+)?)(b|[kmgtpe](?:i?b)?)?$`)

// FuzzParseSize: a size is accepted exactly when it follows the grammar
// and comes to a whole number of bytes that fits an int64, and then it is
// that number; what ParseSize accepts it reads back from its own
// printing, in bytes and in KiB.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"4096", "64K", "1.5M", "2GiB", "7E", "8E", "1.3K", "0.5", "1e3", " 1", "99999999999999T", "3mb", "0.25k"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		want, wantOK := int64(0), false
		if m := sizeGrammar.FindStringSubmatch(s); m != nil {
			shift := uint(0)
			if m[2] != "" && !strings.EqualFold(m[2], "b") {
				shift = uint(10 * (strings.IndexByte("kmgtpe", strings.ToLower(m[2])[0]) + 1))
			}
			r, _ := new(big.Rat).SetString(m[1])
			r.Mul(r, new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), shift)))
			if r.IsInt() && r.Num().IsInt64() {
				want, wantOK = r.Num().Int64(), true
			}
		}
		if (err == nil) != wantOK || n != want {
			t.Fatalf("ParseSize(%q) = %d, %v; want %d ok=%v", s, n, err, want, wantOK)
		}
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		if back, err := ParseSize(strconv.FormatInt(n, 10)); err != nil || back != n {
			t.Fatalf("ParseSize(%d) = %d, %v", n, back, err)
		}
		if n%1024 == 0 {
			if back, err := ParseSize(strconv.FormatInt(n>>10, 10) + "KiB"); err != nil || back != n {
				t.Fatalf("ParseSize(%dKiB) = %d, %v", n>>10, back, err)
			}
		}
	})
}

// FuzzParseCount: a count is plain decimal digits up to MaxInt32, read
// exactly; everything else (signs, spaces, exponents, overflow) is a
// one-line error.
func FuzzParseCount(f *testing.F) {
	for _, s := range []string{"0", "8", "2147483647", "2147483648", "-4", "+4", " 4", "1e3", "99999999999", "007"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseCount(s)
		v, perr := strconv.ParseUint(s, 10, 64)
		wantOK := perr == nil && strings.Trim(s, "0123456789") == "" && v <= math.MaxInt32
		if (err == nil) != wantOK || (wantOK && uint64(n) != v) {
			t.Fatalf("ParseCount(%q) = %d, %v; want %d ok=%v", s, n, err, v, wantOK)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Fatalf("multi-line error %q", err)
		}
	})
}
