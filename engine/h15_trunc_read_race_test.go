package engine

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestH15ShrinkRacingColdReadNeverResurrectsCutBytes: Truncate's doc
// says bytes past a shrunk end read as zeros if the file grows again. A
// reader that checked the file's size before a shrink and fills the
// cache from the device after cache.Truncate dropped the file's folios
// but before the extent map is cut puts the cut bytes back into the
// cache, past the new end, clean and uptodate; a Grow then makes them
// readable, and a write into such a block makes them durable.
//
// A regression of b55523f (a miss reads Backing without the file's
// lock, per run): at b55523f~1 this test passes for its 10 s; before the fix
// it fails within a few dozen iterations (under a second).
func TestH15ShrinkRacingColdReadNeverResurrectsCutBytes(t *testing.T) {
	devName := emuDevice(t, 32, "4M", "")
	e := formatOpen(t, devName, Config{CacheBytes: 32 << 20, DirtyLimit: 8 << 20})
	defer func() { e.Close() }()
	const size, cut = 4 << 20, 4096
	old := bytes.Repeat([]byte{0xaa}, size)
	buf := make([]byte, size)
	deadline := time.Now().Add(10 * time.Second)
	for iter := 0; time.Now().Before(deadline); iter++ {
		f := mustCreate(t, e, fmt.Sprintf("f%d", iter))
		if _, err := f.WriteAt(old, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		e.cache.EvictClean(1 << 40)
		r, err := e.OpenFile(f.Name(), 0)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			r.ReadAt(buf, 0) // a cold read of the whole file, racing the shrink
		})
		time.Sleep(time.Duration(iter%50) * 20 * time.Microsecond)
		if err := f.Truncate(cut); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		r.Close()
		if err := f.Truncate(size); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, size)
		if _, err := f.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		if i := bytes.IndexByte(got[cut:], 0xaa); i >= 0 {
			t.Errorf("iteration %d: after Truncate(%d) and Truncate(%d) (grow), byte %d reads 0x%02x, a cut byte, not zero",
				iter, cut, size, cut+i, got[cut+i])
			// A write into that block makes the cut bytes durable.
			at := int64(cut + i + 1)
			if _, err := f.WriteAt([]byte{0x01}, at); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			name := f.Name()
			f.Close()
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			e = reopen(t, devName, Config{CacheBytes: 32 << 20, DirtyLimit: 8 << 20})
			g, err := e.OpenFile(name, 0)
			if err != nil {
				t.Fatal(err)
			}
			blk := make([]byte, BlockSize)
			if _, err := g.ReadAt(blk, at&^(BlockSize-1)); err != nil {
				t.Fatal(err)
			}
			if j := bytes.IndexByte(blk, 0xaa); j >= 0 {
				t.Errorf("after a 1-byte write at %d, an fsync and a reopen, byte %d of the file is still 0xaa: the cut bytes are durable",
					at, at&^(BlockSize-1)+int64(j))
			}
			g.Close()
			return
		}
		f.Close()
		if err := e.Remove(f.Name()); err != nil {
			t.Fatal(err)
		}
		if iter%200 == 0 {
			t.Logf("iteration %d", iter)
		}
	}
}
