// Package rapidcheck holds what the property tests built on
// pgregory.net/rapid share: the number of test cases a test runs.
package rapidcheck

import (
	"flag"
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
