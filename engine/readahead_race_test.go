package engine

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"sync"
	"testing"
)

// TestReadaheadRacingOverwriteRenameRemove: sequential readers (so
// readahead windows in flight) race overwrites written back and evicted,
// shrinks and grows, a rename over the file and its removal; once each
// round's mutation and windows end, the file reads as the model says,
// and once every file is gone the cache holds nothing.
func TestReadaheadRacingOverwriteRenameRemove(t *testing.T) {
	const K, size = 1 << 10, 2 << 20
	cfg := smallConfig()
	cfg.CacheBytes = 32 << 20
	e, f, data := coldFile(t, cfg, size)
	model := append([]byte(nil), data...)
	pat := func(r int) []byte {
		p := make([]byte, size)
		for i := range p {
			p[i] = byte(r*37+i>>9) | 0x80
		}
		return p
	}
	read := func(h *File, stop <-chan struct{}) {
		p := make([]byte, 64*K)
		for {
			for off := int64(0); off < size; off += 64 * K {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := h.ReadAt(p, off); err != nil && !errors.Is(err, io.EOF) {
					if errors.Is(err, fs.ErrNotExist) {
						return
					}
					t.Errorf("read at %d: %v", off, err)
					return
				}
			}
		}
	}
	check := func(round int, what string, h *File) {
		t.Helper()
		raIdle(t, h)
		got := make([]byte, len(model))
		n, err := h.ReadAt(got, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			t.Fatalf("round %d %s: %v", round, what, err)
		}
		if n != len(model) || !bytes.Equal(got, model) {
			i := 0
			for i < n && got[i] == model[i] {
				i++
			}
			t.Fatalf("round %d %s: read %d bytes (want %d); first difference at %d", round, what, n, len(model), i)
		}
	}
	for round := range 12 {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		r1, err := e.Open("a")
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { read(r1, stop) })
		wg.Go(func() { read(f, stop) })
		switch round % 3 {
		case 0: // overwrite a middle range, write it back, evict
			p := pat(round)
			lo, hi := int64(300*K+round*4*K), int64(size-200*K)
			if _, err := f.WriteAt(p[lo:hi], lo); err != nil {
				t.Fatal(err)
			}
			copy(model[lo:hi], p[lo:hi])
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			e.cache.EvictClean(1 << 30)
		case 1: // shrink into a block, grow back
			cut := int64(size/3 + round*1000 + 17)
			if err := f.Truncate(cut); err != nil {
				t.Fatal(err)
			}
			if err := f.Truncate(size); err != nil {
				t.Fatal(err)
			}
			clear(model[cut:])
			e.cache.EvictClean(1 << 30)
		case 2: // a new file renamed over "a"
			g := mustCreate(t, e, "b")
			p := pat(round)
			if _, err := g.WriteAt(p, 0); err != nil {
				t.Fatal(err)
			}
			if err := g.Sync(); err != nil {
				t.Fatal(err)
			}
			e.cache.EvictClean(1 << 30)
			if err := e.Rename("b", "a"); err != nil {
				t.Fatal(err)
			}
			close(stop)
			wg.Wait()
			raIdle(t, f)
			raIdle(t, r1)
			f.Close()
			f = g
			copy(model, p)
			stop = make(chan struct{})
			wg.Go(func() { read(f, stop) })
		}
		close(stop)
		wg.Wait()
		raIdle(t, r1)
		r1.Close()
		check(round, "after the race", f)
		e.cache.EvictClean(1 << 30)
		check(round, "cold", f)
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		e.cache.EvictClean(1 << 30)
	}
	// Readers in flight while the file is removed.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { read(f, stop) })
	if err := e.Remove("a"); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	raIdle(t, f)
	f.Close()
	if st := e.Stats().Cache; st.CachedBytes != 0 || st.DirtyBytes != 0 {
		t.Fatalf("every file removed, yet the cache holds %d bytes (%d dirty)", st.CachedBytes, st.DirtyBytes)
	}
}
