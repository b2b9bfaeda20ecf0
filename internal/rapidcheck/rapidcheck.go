// Package rapidcheck holds what the property tests built on
// pgregory.net/rapid share: the number of test cases a test runs, and an
// unbiased draw for weighted choices.
package rapidcheck

import (
	"flag"
	"math/bits"
	"os"
	"strconv"
	"testing"

	"pgregory.net/rapid"
)

// Checks makes rapid.Check run n test cases (n/5 with -short, as rapid
// does) during t, unless -rapid.checks or RAPID_CHECKS says how many:
// rapid's default (100) suits cheap properties, not ones that format a
// device or fill a cache per case. It must not be called from parallel
// tests (rapid reads its flags when Check starts).
func Checks(t testing.TB, n int) {
	_ = rapid.ID[int] // the flag is rapid's: make sure it is registered
	f := flag.Lookup("rapid.checks")
	if f == nil {
		t.Fatal("rapidcheck: rapid registered no -rapid.checks flag")
	}
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
	if set || os.Getenv("RAPID_CHECKS") != "" {
		return
	}
	old := f.Value.String()
	if err := f.Value.Set(strconv.Itoa(n)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Value.Set(old) })
}

// Uniform draws an int in [0, n), n <= 1<<16, about uniformly, from
// unbiased bits; it shrinks towards 0. rapid's own integer draws lean
// towards small values and the ends of the range, which suits offsets
// and lengths but skews a mix of operations chosen by weight (a draw in
// [0, 100) against thresholds) towards its first entries.
func Uniform(t *rapid.T, n int) int {
	if n < 1 || n > 1<<16 {
		panic("rapidcheck.Uniform: n out of range")
	}
	b := bits.Len(uint(n-1)) + 4 // 16 or more draws per value: no value is twice as likely as another
	v := 0
	for range b {
		v <<= 1
		if rapid.Bool().Draw(t, "bit") {
			v |= 1
		}
	}
	return v * n >> b
}
