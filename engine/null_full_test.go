package engine

import (
	"errors"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// TestNullDeviceFullSaysWhy: a null: device stores nothing, so GC cannot
// read back the record headers of the zones it would reclaim, and
// overwrites fail with ENOSPC once free zones run out (about 60% full
// under `serve null:`). The error must still be ENOSPC, and say why: a
// bare "no space left" on a device holding a fraction of its capacity
// in live data read as a bug.
func TestNullDeviceFullSaysWhy(t *testing.T) {
	dev, err := zns.Open("null:?size=32M&zone_size=1M", zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := FormatAndOpen(dev, Config{CacheBytes: 1 << 20, DirtyLimit: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if !e.KeepsNoData() {
		t.Fatal("an engine on null: does not know that the device keeps no data")
	}
	h, err := e.Create("f")
	if err != nil {
		t.Fatal(err)
	}
	// Random 8 KiB overwrites of half the capacity leave every zone
	// partly live: only GC, which copies, can free one.
	buf := make([]byte, 8<<10)
	live := e.Capacity() / 2 / int64(len(buf))
	rng := rand.New(rand.NewPCG(1, 2))
	var werr error
	for off := int64(0); off < live && werr == nil; off++ {
		_, werr = h.WriteAt(buf, off*int64(len(buf)))
	}
	for i := int64(0); i < 8*live && werr == nil; i++ {
		_, werr = h.WriteAt(buf, rng.Int64N(live)*int64(len(buf)))
		if werr == nil && i%64 == 63 {
			werr = h.Sync()
		}
	}
	if werr == nil {
		t.Fatal("4 capacities of random overwrites on null: succeeded: GC reclaims there now; this test's premise is gone")
	}
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("overwrites on null: failed with %v, want ENOSPC", werr)
	}
	if !strings.Contains(werr.Error(), "null") || !strings.Contains(werr.Error(), "keeps no data") {
		t.Fatalf("ENOSPC on null: does not say why: %v", werr)
	}
}
