package bench

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zonefold/zonefold/engine"
)

// h45dDevice is a fresh emu device of 16 1 MiB zones: 14 data zones,
// 12 MiB of them outside GC's reserve (the room for files).
func h45dDevice(t *testing.T) (*engine.Engine, int64) {
	t.Helper()
	e, release, err := OpenFormatted("emu:"+filepath.Join(t.TempDir(), "dev")+"?zone_size=1M&zones=16", engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(); release() })
	room := e.Available()
	if room != 12<<20 || e.Capacity() != 14<<20 {
		t.Fatalf("room %d of capacity %d; the test assumes 12 MiB of 14", room, e.Capacity())
	}
	return e, room
}

// TestH45dCheckFitsBoundary: checkFits refuses exactly the workloads
// whose files hold more of the engine's blocks than the room for files,
// whatever they write: overwrites (--loops) take no more room, and
// randwrite holds only the blocks its draws hit.
func TestH45dCheckFitsBoundary(t *testing.T) {
	e, room := h45dDevice(t)
	for _, tc := range []struct {
		name string
		w    Workload
		fits bool
		says string
	}{
		// The data alone fits; with its record headers and pads it
		// does not (h46c: it met ENOSPC near its end).
		{"exactly the room", Workload{Files: 2, BS: 4096, IODepth: 1, Size: room / 2, RW: "write"}, false,
			"2 files x 6 MiB (12 MiB) need 12488 KiB with the engine's record headers and pads, more than the 12 MiB"},
		{"the room less what records take", Workload{Files: 2, BS: 4096, IODepth: 1, Size: 6044 << 10, RW: "write"}, true, ""},
		{"a block more", Workload{Files: 2, BS: 4096, IODepth: 1, Size: room/2 + 4096, RW: "write"}, false,
			"2 files x 6148 KiB (12296 KiB) need more than the 12 MiB"},
		{"reads lay the files out", Workload{Files: 1, BS: 4096, IODepth: 1, Size: room + 4096, RW: "randread"}, false, "1 file of"},
		{"overwrites of what fits", Workload{Files: 2, BS: 4096, IODepth: 1, Size: 6036 << 10, RW: "write", Loops: 5}, true, ""},
		// 5 x 2515000 B is under 12 MiB, but each file's last
		// block is a whole one: 5 x 615 blocks > 3072.
		{"whole blocks", Workload{Files: 5, BS: 1000, IODepth: 1, Size: 2515000, RW: "write"}, false,
			"in the engine's 4 KiB blocks"},
		{"random draws that fit", Workload{Files: 1, BS: 4096, IODepth: 4, Size: 16 << 20, RW: "randwrite"}, true, ""},
		{"random draws that do not", Workload{Files: 1, BS: 4096, IODepth: 4, Size: 16 << 20, RW: "randwrite", Loops: 3}, false,
			"whose random writes land on more than 12 MiB of it"},
	} {
		err := checkFits(tc.w, h46cLayout(t, e), false)
		var bad *OptionError
		switch {
		case tc.fits && err != nil:
			t.Errorf("%s: %v; want it to fit", tc.name, err)
		case !tc.fits && (!errors.As(err, &bad) || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), "--size")):
			t.Errorf("%s: %v; want an option error saying %q and naming --size", tc.name, err, tc.says)
		}
	}
}

// TestH45dCheckFitsCountsTheDrawsTheRunMakes: the blocks checkFits
// counts for randwrite are those the run's own draws leave live on the
// device (the room it took once everything is written back), and the
// run of a randwrite larger than the room that checkFits lets through
// completes.
func TestH45dCheckFitsCountsTheDrawsTheRunMakes(t *testing.T) {
	e, room := h45dDevice(t)
	w := Workload{Files: 2, BS: 8192, IODepth: 3, Size: 8 << 20, RW: "randwrite", Seed: 7}
	held, _ := w.blocksHeld(room / engine.BlockSize)
	if held*engine.BlockSize >= int64(w.Files)*w.Size || checkFits(w, h46cLayout(t, e), false) != nil {
		t.Fatalf("%d blocks held of 16 MiB, checkFits %v: the test wants draws that hit under the room", held, checkFits(w, h46cLayout(t, e), false))
	}
	if _, err := RunWorkload(t.Context(), e, w); err != nil {
		t.Fatal(err)
	}
	if live := room - e.Available(); live != held*engine.BlockSize {
		t.Errorf("the run left %d bytes live; checkFits counted %d", live, held*engine.BlockSize)
	}
}
