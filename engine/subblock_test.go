package engine

import (
	"bytes"
	"sync"
	"testing"
)

// TestConcurrentSubBlockWritesKeepEveryByte: writes that do not overlap
// but share 4 KiB blocks (odd sizes at odd offsets, as fio's bs=3333
// blockalign=1 makes), run concurrently, must all land: none may be lost
// to another's read-modify-write of the block they share.
func TestConcurrentSubBlockWritesKeepEveryByte(t *testing.T) {
	devName := emuDevice(t, 24, "1M", "")
	e := formatOpen(t, devName, smallConfig())
	defer e.Close()
	f, err := e.Create("a")
	if err != nil {
		t.Fatal(err)
	}
	const piece, pieces = 3333, 600
	want := make([]byte, piece*pieces)
	for i := range want {
		want[i] = byte(i/piece + 1)
	}
	var wg sync.WaitGroup
	const workers = 8
	for w := range workers {
		wg.Go(func() {
			for i := w; i < pieces; i += workers {
				if _, err := f.WriteAt(want[i*piece:(i+1)*piece], int64(i*piece)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	got := make([]byte, len(want))
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		i := 0
		for got[i] == want[i] {
			i++
		}
		t.Fatalf("byte %d (piece %d) is %d, want %d: a concurrent write to the same block lost it", i, i/piece, got[i], want[i])
	}
}
