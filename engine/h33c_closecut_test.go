package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"testing"
)

// TestH33cCutInsideClose cuts the power at every device operation of a
// clean Close (its writeback of data never fsynced, the device flush,
// the closing checkpoint) over the h26b workload, every operation of it
// acknowledged durable: a kill -9 or power cut during shutdown. After
// the cut: fsck clean, every acknowledged byte, size, name and remove as
// the model says, and of the file written without an fsync, only whole
// blocks of what was written (or zeros where nothing landed) — then the
// h26b checks after (two checkpoints, another cut).
func TestH33cCutInsideClose(t *testing.T) {
	h26bQuiet(t)
	h26bSeeds(t, func(t *testing.T, seed uint64) {
		for _, g := range h26bGeometries {
			t.Run(g.name, func(t *testing.T) {
				for at := int64(1); ; at++ {
					if !h33cCloseCut(t, g.zoneSize, seed, at) {
						t.Logf("%d device operations in Close", at-1)
						return
					}
				}
			})
		}
	})
}

// h33cCloseCut runs the workload and a Close cut at its at-th device
// operation; it reports whether the cut came inside Close.
func h33cCloseCut(t *testing.T, zoneSize string, seed uint64, at int64) bool {
	r := h26bOpenFormatted(t, h26bDevice(t, zoneSize), rand.New(rand.NewPCG(seed, 33)))
	r.workload(30)
	r.names(10)
	// Never fsynced: Close writes it back.
	h, err := r.e.Create("unsynced")
	r.must(err, "create unsynced")
	unsynced := r.data(40 << 10)
	_, err = h.WriteAt(unsynced, 0)
	r.must(err, "write unsynced")
	r.must(h.Close(), "close unsynced")
	if r.e.cache.DirtyBytes() == 0 {
		t.Fatal("set-up: nothing dirty for Close to write back")
	}
	r.dev.n.Store(0)
	r.dev.at.Store(at)
	err = r.e.Close() // closes the device too: what it did not flush is lost
	r.e = nil
	if !r.dev.cut.Load() {
		r.must(err, "close without a cut")
		return false
	}
	when := fmt.Sprintf("cut at op %d of Close, %s (err %v)", at, r.events()[0], err)
	r.fsck(when)
	r.must(r.open(false, 0), when+": reopen")
	if h, err := r.e.Open("unsynced"); err == nil {
		got := make([]byte, len(unsynced))
		n, _ := h.ReadAt(got, 0)
		h.Close()
		for off := 0; off < n; off += BlockSize {
			end := min(off+BlockSize, n)
			if b := got[off:end]; !isZero(b) && string(b) != string(unsynced[off:end]) {
				t.Fatalf("%s: the unsynced file's block at %d holds bytes never written there", when, off)
			}
		}
		r.must(r.e.Remove("unsynced"), "remove unsynced")
	} else if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s: open unsynced: %v", when, err)
	}
	r.after(when)
	return true
}
