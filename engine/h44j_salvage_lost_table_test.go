package engine

import (
	"bytes"
	"fmt"
	"io"
	"math/rand"
	"os"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// h44jFillHoles writes every block of the file at path back in place,
// zeros included: the file as `cp --sparse=never` or dd leaves it, with
// no hole for SEEK_HOLE to report.
func h44jFillHoles(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for off := int64(0); ; off += int64(len(buf)) {
		n, err := f.ReadAt(buf, off)
		if n > 0 {
			if _, werr := f.WriteAt(buf[:n], off); werr != nil {
				t.Fatal(werr)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// A crash after GC reset zones since the checkpoint and refilled them
// shorter: records newer than the checkpoint lie past the real write
// pointers, inside the inferred ones. Replayed in sequence order with
// the resets and overwrites logged after them, they cost nothing:
// every synced file is copied as last written, a removed one not at all.
func TestSalvageLostZoneTableCrashAfterResets(t *testing.T) {
	for _, seed := range []int64{1, 2, 3} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			devName := emuDevice(t, 20, "1M", "")
			e := formatOpen(t, devName, smallConfig())
			path := emuOf(t, e).Path()
			rng := rand.New(rand.NewSource(seed))
			want := map[string][]byte{}
			write := func(name string, off int64, n int) { writeSyncedModel(t, e, rng, want, name, off, n) }
			resets := e.Stats().GCResets
			for round := range 6 {
				write("big", 0, 2<<20+777-round*300<<10)
				for i := range 20 {
					write(fmt.Sprintf("dir/f%d", i%4), int64(rng.Intn(300))*1000, 1+rng.Intn(30<<10))
				}
				if round == 3 {
					if err := e.Remove("dir/f1"); err != nil {
						t.Fatal(err)
					}
					delete(want, "dir/f1")
				}
				gcThenCheckpoint(t, e, round == 0)
			}
			if e.Stats().GCResets == resets {
				t.Fatal("set-up: GC reset no zone")
			}
			if err := e.Sync(t.Context()); err != nil {
				t.Fatal(err)
			}
			e.crashForTest()
			emuOf(t, e).Close()
			real := h44hReport(t, devName, zns.Options{})
			h44hZeroTable(t, path)
			inferred := h44hReport(t, devName, zns.Options{Existing: true, InferLostTable: true})
			stale := false
			for i, z := range real {
				stale = stale || (z.Cond != zns.CondFull && inferred[i].WP > z.WP)
			}
			if !stale {
				t.Fatal("set-up: no zone holds data past its real write pointer")
			}
			rep, sink := h44hSalvageLost(t, devName, path)
			h44jAllWhole(t, rep)
			checkCopies(t, sink, want)
		})
	}
}

// h44jDigHoles punches every all-zero 4 KiB block of the file at path,
// as fallocate --dig-holes, cp --sparse=always or rsync -S leave it.
func h44jDigHoles(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	zero := make([]byte, 4096)
	for off := 0; off+4096 <= len(b); off += 4096 {
		if bytes.Equal(b[off:off+4096], zero) {
			h44hPunch(t, path, int64(off), 4096)
		}
	}
}

// h44jAllWhole checks that the salvage recovered every file whole.
func h44jAllWhole(t *testing.T, rep *SalvageReport) {
	t.Helper()
	for _, f := range rep.Files {
		if len(f.Holes) > 0 || f.Err != nil {
			t.Errorf("%s: not recovered whole: %+v", f.Name, f)
		}
	}
}
