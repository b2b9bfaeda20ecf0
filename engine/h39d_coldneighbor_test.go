package engine

import (
	"bytes"
	"errors"
	"syscall"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// TestH39dColdReadBesideABadBlock: a bad block at 128 KiB of a cold
// file; reads of the ranges beside it, which do not touch it, must
// return their bytes; a read of the block fails with EIO.
func TestH39dColdReadBesideABadBlock(t *testing.T) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := Config{CacheBytes: 8 << 20, DirtyLimit: 4 << 20}
	e := formatOpen(t, devName, cfg)
	a := pattern(512<<10, 3)
	createSynced(t, e, "a", a).Close()
	x := devOf(t, e, "a", 128<<10)
	blk := x.dev + (128<<10 - x.off)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ off, n int64 }{{0, 128 << 10}, {0, 4096}, {124 << 10, 4096}, {132 << 10, 124 << 10}, {256 << 10, 256 << 10}, {128 << 10, 4096}}
	for i, c := range cases {
		// Each read cold, and after a read of the bad block first.
		first := cases[len(cases)-1]
		if i == len(cases)-1 {
			first = cases[0]
		}
		dev, err := zns.Open(devName, zns.Options{})
		if err != nil {
			t.Fatal(err)
		}
		bz := &badZones{Device: dev, bad: map[int]bool{}, ranges: [][2]int64{{blk, blk + BlockSize}}}
		e, err := OpenDevice(bz, cfg)
		if err != nil {
			dev.Close()
			t.Fatal(err)
		}
		if _, err := readRange(e, "a", first.off, int(first.n)); err != nil {
			t.Logf("first read [%d,+%d): %v", first.off, first.n, err)
		}
		got, err := readRange(e, "a", c.off, int(c.n))
		touches := c.off < 128<<10+4096 && 128<<10 < c.off+c.n
		switch {
		case touches && !errors.Is(err, syscall.EIO):
			t.Errorf("cold read [%d,+%d) over the bad block: %v, want EIO", c.off, c.n, err)
		case !touches && (err != nil || !bytes.Equal(got, a[c.off:c.off+c.n])):
			t.Errorf("cold read [%d,+%d) beside the bad block: %v, equal %v", c.off, c.n, err, bytes.Equal(got, a[c.off:c.off+c.n]))
		}
		e.Close()
	}
}
