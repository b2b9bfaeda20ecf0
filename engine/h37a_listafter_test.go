package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestH37aListAfterFollowsTheNamespace: ListAfter pages through the
// names in order from a B-tree kept beside byName (a listing used to
// sort every name for each page). Creates, removes, renames (onto free
// names and over files, open or not) and recovery's replay of them must
// keep the two the same: every name listed once, in order, and a page
// from any cursor starting just after it (after a Close, from the
// checkpoint; after a crash, from the operations replayed).
func TestH37aListAfterFollowsTheNamespace(t *testing.T) {
	dev := emuDevice(t, 16, "1M", "")
	e := formatOpen(t, dev, smallConfig())
	rng := rand.New(rand.NewPCG(37, 1))
	name := func() string { return fmt.Sprintf("n%03d", rng.IntN(300)) }
	var held []*File
	check := func(when string) {
		t.Helper()
		var want []string
		e.nsMu.RLock()
		for n := range e.byName {
			want = append(want, n)
		}
		e.nsMu.RUnlock()
		slices.Sort(want)
		var got []string
		if total := e.ListAfter("", func(fi FileInfo) bool { got = append(got, fi.Name); return true }); total != len(want) {
			t.Fatalf("%s: ListAfter says %d files, the namespace has %d", when, total, len(want))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: ListAfter lists %d names %v...,\nthe namespace holds %d %v...", when, len(got), got[:min(5, len(got))], len(want), want[:min(5, len(want))])
		}
		for _, after := range []string{"n1", "n150", name(), "n299", "o"} {
			var page []string
			e.ListAfter(after, func(fi FileInfo) bool { page = append(page, fi.Name); return len(page) < 7 })
			i, _ := slices.BinarySearch(want, after)
			if i < len(want) && want[i] == after {
				i++
			}
			if w := want[i:min(i+7, len(want))]; !slices.Equal(page, w) {
				t.Fatalf("%s: a page after %q is %v, want %v", when, after, page, w)
			}
		}
	}
	for round := range 4 {
		for range 600 {
			switch rng.IntN(4) {
			case 0:
				h, err := e.OpenFile(name(), OCreate|ODeferSync)
				if err != nil {
					t.Fatal(err)
				}
				if rng.IntN(8) == 0 {
					held = append(held, h)
				} else {
					h.Close()
				}
			case 1:
				e.RemoveDeferred(name())
			default:
				e.Rename(name(), name())
			}
		}
		check(fmt.Sprintf("round %d", round))
		if round%2 == 1 {
			// Recovery replays the operations logged after the
			// checkpoint (a Close would checkpoint them all).
			if err := e.SyncNamespace(); err != nil {
				t.Fatal(err)
			}
			e.crashForTest()
		} else {
			for _, h := range held {
				h.Close()
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
		}
		held = nil
		e = reopen(t, dev, smallConfig())
		check(fmt.Sprintf("round %d, reopened", round))
	}
	e.Close()
}
