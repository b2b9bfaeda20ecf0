package engine

import (
	"bytes"
	"testing"
)

// TestStatsCountUnnamedFilesUntilTheirLastClose: Stats shows the files
// removed or renamed over while open, and their sizes, from the remove
// until their last handle closes (what lsof +L1 shows of a kernel file
// system), so a user can see what holds space no name accounts for, and
// a test can see an unnamed file outlive its handles.
func TestStatsCountUnnamedFilesUntilTheirLastClose(t *testing.T) {
	for _, how := range []string{"remove", "rename over"} {
		t.Run(how, func(t *testing.T) {
			e := formatOpen(t, memDevice(t, 24, "1M"), Config{CacheBytes: 4 << 20})
			defer e.Close()
			h := createSynced(t, e, "f", bytes.Repeat([]byte{1}, 300<<10))
			h2, err := e.Open("f")
			if err != nil {
				t.Fatal(err)
			}
			want := func(files int, size int64, when string) {
				t.Helper()
				st := e.Stats()
				if st.UnnamedFiles != files || st.UnnamedBytes != size {
					t.Errorf("%s: stats say %d unnamed file(s) of %d bytes, want %d of %d",
						when, st.UnnamedFiles, st.UnnamedBytes, files, size)
				}
			}
			want(0, 0, "named and open")
			switch how {
			case "remove":
				if err := e.Remove("f"); err != nil {
					t.Fatal(err)
				}
			case "rename over":
				g := createSynced(t, e, "g", []byte("newer"))
				if err := g.Close(); err != nil {
					t.Fatal(err)
				}
				if err := e.Rename("g", "f"); err != nil {
					t.Fatal(err)
				}
			}
			want(1, 300<<10, "after the "+how)
			if _, err := h.WriteAt(bytes.Repeat([]byte{2}, 100<<10), 300<<10); err != nil {
				t.Fatal(err)
			}
			want(1, 400<<10, "after a write through a handle")
			if err := h.Close(); err != nil {
				t.Fatal(err)
			}
			want(1, 400<<10, "with one handle left")
			if err := h2.Close(); err != nil {
				t.Fatal(err)
			}
			want(0, 0, "after the last close")
		})
	}
}
