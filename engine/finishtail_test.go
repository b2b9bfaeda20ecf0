package engine

import (
	"testing"
)

// A file closed with less room left in its zone than FinishTail gives the
// zone up: the next file gets a zone of its own (no share), and the
// finished zone holds the first file's data alone. With more room left,
// or FinishTail negative, the next file starts in the first one's tail,
// as before. A zone given up so counts as filled (Stats.ZonesFilled).
func TestFinishTailGivesTheNextFileItsOwnZone(t *testing.T) {
	const zoneCap = 256 << 10
	for _, c := range []struct {
		name       string
		finishTail int64
		written    int64 // by the first file
		finished   int64 // zones given up at its close
	}{
		{"short tail finished", 0, 200 << 10, 1},
		{"long tail shared", 0, 96 << 10, 0},
		{"never", -1, 200 << 10, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			// One data zone open at a time: the second file can have a
			// zone of its own only if the first one's is given up.
			cfg := Config{CacheBytes: 2 << 20, Policy: PolicyMRU, OpenZones: 1, FinishTail: c.finishTail}
			e := formatOpen(t, emuDevice(t, 24, "256K", "&max_open=4&max_active=4"), cfg)
			defer e.Close()
			write := func(name string, n int64) {
				t.Helper()
				writeWholeFile(t, e, name, n, LifeNotSet)
			}
			write("a", c.written)
			write("b", 16<<10)
			st := e.Stats()
			if st.ZonesTailFinished != c.finished {
				t.Errorf("%d zones finished at a close; want %d", st.ZonesTailFinished, c.finished)
			}
			// A zone finished at a close is filled: it leaves the open
			// set full, as one appends fill does (before, it was not
			// counted, and zones_filled fell short of the full zones).
			if st.ZonesFilled != c.finished {
				t.Errorf("%d zones filled; want %d", st.ZonesFilled, c.finished)
			}
			if want := 1 - c.finished; st.ZonesShared != want {
				t.Errorf("the second file shared a zone %d times; want %d", st.ZonesShared, want)
			}
			// Where a's zone was finished, it is full and holds a's bytes
			// alone; b's are elsewhere.
			var full int
			for _, z := range e.ZoneValidity() {
				if z.State == "full" {
					full++
					if z.Valid != c.written {
						t.Errorf("finished zone %d holds %d valid bytes; want a's %d", z.Zone, z.Valid, c.written)
					}
				}
			}
			if int64(full) != c.finished {
				t.Errorf("%d full zones; want %d", full, c.finished)
			}
		})
	}
}

// writeWholeFile creates name with hint life, writes n zero bytes, syncs
// and closes it.
func writeWholeFile(t *testing.T, e *Engine, name string, n int64, life WriteLife) {
	t.Helper()
	f, err := e.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.SetWriteLife(life); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, n), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
