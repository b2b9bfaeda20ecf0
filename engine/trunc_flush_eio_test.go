package engine

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
)

// TestTruncateFlushEIOThenDurablePoint: a truncate into a block appends
// its tail's zeros in a record that carries the new size, then flushes
// the device. When that flush fails, the truncate returns EIO and the file
// must stay as it was, in memory and after a crash, whatever makes the
// device durable next: the file's fsync, another file's fsync or a
// checkpoint. The zeros' record is on the device all the same, and the
// next flush makes it durable; recovery replays its size and cuts every
// extent past the tail block. Before, only the tail block was written
// again (and only by the file's own fsync): after the file's fsync and a
// crash, its fsynced bytes past the tail block read zeros; after another
// file's fsync, it came back cut to the failed truncate's size; after a
// checkpoint, the tail block's bytes past the new size read zeros.
func TestTruncateFlushEIOThenDurablePoint(t *testing.T) {
	type layout struct {
		name  string
		spans [][2]int // the file's written ranges; the rest is a hole
	}
	layouts := []layout{
		{"10000-bytes", [][2]int{{0, 10000}}},
		// Past the tail block, more than one of a write's pieces
		// (writePiece), and a hole that must read zeros again.
		{"sparse-610000-bytes", [][2]int{{0, 10000}, {20000, 300000}, {600000, 610000}}},
	}
	points := []struct {
		name    string
		durable func(t *testing.T, e *Engine, f *File) error
	}{
		{"fsync-of-the-file", func(_ *testing.T, _ *Engine, f *File) error { return f.Sync() }},
		{"fsync-of-another-file", func(t *testing.T, e *Engine, _ *File) error {
			createSynced(t, e, "b", []byte("b"))
			return nil
		}},
		{"checkpoint", func(_ *testing.T, e *Engine, _ *File) error { return e.checkpoint() }},
	}
	for _, l := range layouts {
		for _, p := range points {
			t.Run(l.name+"/"+p.name, func(t *testing.T) {
				devName, cfg, e, f := fileWithoutGC(t)
				defer func() { e.Close() }()
				want := make([]byte, l.spans[len(l.spans)-1][1])
				for _, s := range l.spans {
					for i := s[0]; i < s[1]; i++ {
						want[i] = byte(i%251 + 1)
					}
					if _, err := f.WriteAt(want[s[0]:s[1]], int64(s[0])); err != nil {
						t.Fatal(err)
					}
				}
				if err := f.Sync(); err != nil {
					t.Fatal(err)
				}
				emuOf(t, e).FailFlush(1)
				if err := f.Truncate(5000); !errors.Is(err, syscall.EIO) {
					t.Fatalf("truncate with its flush failing: %v, want EIO", err)
				}
				sameBytes(t, "after the failed truncate", readAll(t, e, "a"), want)
				if err := p.durable(t, e, f); err != nil {
					t.Fatal(err)
				}
				e.crashForTest()
				e = reopen(t, devName, cfg)
				sameBytes(t, "after "+p.name+" and a crash", readAll(t, e, "a"), want)
			})
		}
	}
}

// sameBytes fails the test if got is not want, naming the first byte
// that differs.
func sameBytes(t *testing.T, when string, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	first := min(len(got), len(want))
	for i := range first {
		if got[i] != want[i] {
			first = i
			break
		}
	}
	t.Fatalf("%s: %d bytes (want %d), the first difference at %d", when, len(got), len(want), first)
}
