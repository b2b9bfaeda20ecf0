package engine

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"syscall"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// h46gFillingCopy is a copy whose writes past its first room fail (its
// destination full).
type h46gFillingCopy struct{ room int }

func (c *h46gFillingCopy) WriteAt(p []byte, _ int64) (int, error) {
	if c.room--; c.room < 0 {
		return 0, syscall.ENOSPC
	}
	return len(p), nil
}

// TestH46gSalvageStopListsTheRestInNameOrder: a copy that stops (its
// sink's write fails) in one file reports, in the order Salvage
// created them (name order, not the order the files were written in):
// those copied before it as they were, the one it stopped in with why
// and no holes (it is not kept, so its damaged block is no range of a
// copy), and each after it not reached; nothing more, none twice. A
// stop in the last file lists nothing after it.
func TestH46gSalvageStopListsTheRestInNameOrder(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	e := formatOpen(t, devName, smallConfig())
	// Written out of name order, and "d/x" before "d" and "dd".
	names := []string{"z", "d/x", "dd", "d", "b", "m"}
	for _, name := range names {
		createSynced(t, e, name, bytes.Repeat([]byte(name+"."), 16<<10)).Close()
	}
	var x extent
	e.byName["m"].ext.each(func(y extent) bool { x = y; return false })
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	salvageFlip(t, devName, x.dev+2*BlockSize+10) // m's third block: a hole if copied
	sorted := slices.Sorted(slices.Values(names))
	for i, stop := range sorted {
		sink := salvageSink{}
		dev, err := zns.Open(devName, zns.Options{})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := Salvage(dev, func(name string, size int64) (io.WriterAt, error) {
			switch {
			case name == stop && name == "m":
				// Its blocks before the damaged one fit: by
				// the write after them, that one is a hole.
				return &h46gFillingCopy{room: 1}, nil
			case name == stop:
				return &h46gFillingCopy{}, nil
			}
			return sink.create(name, size)
		})
		dev.Close()
		if !errors.Is(err, syscall.ENOSPC) || rep == nil {
			t.Fatalf("stop in %q: error %v, want ENOSPC with a report", stop, err)
		}
		var got []string
		for j, f := range rep.Files {
			got = append(got, f.Name)
			switch {
			case j < i && (f.Err != nil || (f.Name == "m") != (len(f.Holes) > 0) || sink[f.Name] == nil):
				t.Errorf("stop in %q: %q, before it: err %v, holes %+v, copied %v; want copied, a hole only in m", stop, f.Name, f.Err, f.Holes, sink[f.Name] != nil)
			case j == i && (!errors.Is(f.Err, syscall.ENOSPC) || len(f.Holes) > 0):
				t.Errorf("stop in %q: its entry err %v, holes %+v; want ENOSPC, no holes", stop, f.Err, f.Holes)
			case j > i && (!errors.Is(f.Err, errNotReached) || len(f.Holes) > 0 || sink[f.Name] != nil):
				t.Errorf("stop in %q: %q, after it: err %v, holes %+v; want not reached, never created", stop, f.Name, f.Err, f.Holes)
			}
		}
		if !slices.Equal(got, sorted) {
			t.Errorf("stop in %q: the report lists %q, want every file once in name order %q", stop, got, sorted)
		}
	}
}
