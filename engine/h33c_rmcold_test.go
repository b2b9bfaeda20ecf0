package engine

import (
	"bytes"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// TestH33cRemoveWithAColdReadInFlightThenCrash: a cold read of a (the
// daemon's StartRead) is in the device when a is removed, a new a is
// created and fsynced, and GC runs; the read then ends, and the daemon
// is killed (power cut). The read ends with a's old bytes or an error,
// never the new file's or zeros; after the cut the new a reads whole
// and fsck is clean.
func TestH33cRemoveWithAColdReadInFlightThenCrash(t *testing.T) {
	const bs = 64 << 10
	old := pattern(8*bs, 5)
	e, dev := openWithHeldReads(t, "a", old)
	h, p, d, release := heldColdRead(t, e, dev, "a", bs)
	dev.armed.Store(false)
	if err := e.Remove("a"); err != nil {
		t.Fatal(err)
	}
	fresh := pattern(3*bs, 9)
	createSynced(t, e, "a", fresh).Close()
	e.gc.reclaim(func() bool { return true }, 0) // the old a's zone is garbage now, but pinned by the read
	release()
	end := <-d.ch
	if end.err == nil && !bytes.Equal(p[:end.n], old[:end.n]) {
		t.Fatalf("the cold read begun before the remove ended with %d bytes that are not the old file's", end.n)
	}
	t.Logf("the read in flight at the remove: %d bytes, %v", end.n, end.err)
	h.Close()
	emu := dev.Device.(*zns.Emu)
	e.crashForTest()
	if err := emu.PowerCut(); err != nil {
		t.Fatal(err)
	}
	path := emu.Path()
	emu.Close()
	rep := fsckOf(t, "emu:"+path)
	if len(rep.Problems) > 0 {
		t.Fatalf("fsck after the cut: %q", rep.Problems)
	}
	e = reopen(t, "emu:"+path, smallConfig())
	defer e.Close()
	if got := readAll(t, e, "a"); !bytes.Equal(got, fresh) {
		t.Fatalf("a after the cut: %d bytes, want the %d of the new file", len(got), len(fresh))
	}
}
