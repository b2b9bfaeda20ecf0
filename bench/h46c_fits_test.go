package bench

import (
	"errors"
	"testing"

	"github.com/zonefold/zonefold/engine"
)

// h46cLayout is e's Layout (fresh, as FreshLayout gives it before the
// format).
func h46cLayout(t *testing.T, e *engine.Engine) engine.Layout {
	t.Helper()
	l := e.Layout()
	if l.Room != e.Available() || l.Capacity != e.Capacity() {
		t.Fatalf("layout room %d of %d; the engine %d of %d", l.Room, l.Capacity, e.Available(), e.Capacity())
	}
	return l
}

// TestH46cFitsLimitRunsAndABlockMoreDoesNot: checkFits counted the
// files' data blocks alone, and a workload within the record headers
// and pads of the room passed it, then met ENOSPC near its end. Now it
// counts what admission counts (engine.Layout.Need). For each shape
// (one file or several, whole or partial blocks per write, large
// writes, a read run's layout, overwrites), the largest size checkFits lets through
// runs to completion, the next is refused; and for one file of 4 KiB
// writes, where admission's count is exact, that next size (the old
// check let it through) meets ENOSPC when run regardless.
func TestH46cFitsLimitRunsAndABlockMoreDoesNot(t *testing.T) {
	for _, tc := range []struct {
		w      Workload
		step   int64
		enospc bool // the refused size meets ENOSPC when run
	}{
		{Workload{Files: 1, BS: 4096, IODepth: 1, RW: "write"}, 4096, true},
		{Workload{Files: 3, BS: 1000, IODepth: 2, RW: "write"}, 1000, false},
		{Workload{Files: 1, BS: 256 << 10, IODepth: 2, RW: "write"}, 256 << 10, false},
		{Workload{Files: 2, BS: 8192, IODepth: 4, RW: "randread"}, 8192, false},
		{Workload{Files: 1, BS: 4096, IODepth: 1, RW: "write", Loops: 2}, 4096, false},
		{Workload{Files: 2, BS: 4096, IODepth: 3, RW: "write", Loops: 3}, 4096, false},
		{Workload{Files: 2, BS: 8192, IODepth: 4, RW: "randwrite", Loops: 4, Seed: 5}, 1 << 20, false},
	} {
		e, _ := h45dDevice(t)
		l := h46cLayout(t, e)
		w := tc.w
		w.Size = tc.step
		for checkFits(w, l, false) == nil {
			w.Size += tc.step
		}
		over := w
		w.Size -= tc.step
		if held, _ := w.blocksHeld(l.Room / engine.BlockSize); held*engine.BlockSize > l.Room-4*engine.BlockSize*int64(w.Files) {
			t.Logf("%d x %d %s: the limit leaves %d data blocks", w.Files, w.Size, w.RW, held)
		}
		if _, err := RunWorkload(t.Context(), e, w); err != nil {
			t.Errorf("%d files x %d, %s, bs %d: the largest size checkFits lets through failed: %v", w.Files, w.Size, w.RW, w.BS, err)
		}
		var bad *OptionError
		if err := checkFits(over, l, false); !errors.As(err, &bad) {
			t.Errorf("%d files x %d: %v; want an option error", over.Files, over.Size, err)
		}
		if !tc.enospc {
			continue
		}
		e2, _ := h45dDevice(t)
		if _, err := RunWorkload(t.Context(), e2, over); !errors.Is(err, engine.ErrNoSpace) {
			t.Errorf("%d files x %d, %s, bs %d: %v; want ENOSPC (the size the check now refuses)", over.Files, over.Size, over.RW, over.BS, err)
		}
	}
}
