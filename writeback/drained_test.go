package writeback

import (
	"context"
	"testing"

	"github.com/zonefold/zonefold/cache"
)

// sizeStore is a holdStore that notes the bytes of each chain.
type sizeStore struct {
	holdStore
	chains []int64
}

func (s *sizeStore) WriteExtents(file uint64, exts []cache.Extent, p Pending) error {
	var n int64
	for _, e := range exts {
		n += int64(len(e.Data))
	}
	s.mu.Lock()
	s.chains = append(s.chains, n)
	s.mu.Unlock()
	return s.holdStore.WriteExtents(file, exts, p)
}

// TestFillWaitsForDrainedFile: the background flusher gives a file whose
// chain in flight took all it had dirty no second chain until that one
// is retired, so that what the file dirties meanwhile goes in one record
// (one header) instead of one per pass: 16 writes of 8 KiB between two
// passes make one chain of 128 KiB, not a chain per pass. A file with
// more than a chain dirty keeps its chains pipelined (TestRunPipelines).
func TestFillWaitsForDrainedFile(t *testing.T) {
	store := &sizeStore{holdStore: holdStore{calls: make(chan struct{}, 64)}}
	const chain = 8 << 20 // a second chain at 256 KiB dirty
	w, c := newTestWriteback(t, store, Config{MaxChain: chain, Background: 1})
	ctx := context.Background()
	fh := c.File(1)
	write := func(off int64) {
		t.Helper()
		if _, err := c.Write(ctx, fh, off, make([]byte, 8<<10), nil); err != nil {
			t.Fatal(err)
		}
	}
	p := &pipe{w: w}
	write(0)
	files, err := w.fill(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Writes come between the flusher's passes while the first chain
	// is in flight: each pass would have taken the one before it.
	for i := range 16 {
		write(int64(i+1) * 64 << 10)
		if files, err = w.fill(p, files); err != nil {
			t.Fatal(err)
		}
	}
	store.mu.Lock()
	n := len(store.chains)
	store.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d chains started while the file's first one (all it had dirty) was in flight; want 1", n)
	}
	store.release()
	if err := p.retire(); err != nil {
		t.Fatal(err)
	}
	if files, err = w.fill(p, files); err != nil {
		t.Fatal(err)
	}
	store.release()
	for !p.empty() {
		if err := p.retire(); err != nil {
			t.Fatal(err)
		}
	}
	if want := []int64{8 << 10, 16 * 8 << 10}; len(store.chains) != 2 || store.chains[0] != want[0] || store.chains[1] != want[1] {
		t.Errorf("chains of %v bytes; want %v", store.chains, want)
	}
	if d := c.DirtyBytes(); d != 0 {
		t.Errorf("%d bytes still dirty", d)
	}

	// With MaxChain/minChainDiv dirty again the file gets a second
	// chain while its first is in flight: one file alone keeps chains
	// in flight.
	write(0)
	if files, err = w.fill(p, files); err != nil {
		t.Fatal(err)
	}
	for i := range chain / minChainDiv / (8 << 10) {
		write(int64(i+1) * 64 << 10)
	}
	if files, err = w.fill(p, files); err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	n = len(store.held)
	store.mu.Unlock()
	if n != 2 {
		t.Errorf("%d chains in flight with %d bytes dirty beside the first; want 2", n, chain/minChainDiv)
	}
	store.release()
	for !p.empty() {
		if err := p.retire(); err != nil {
			t.Fatal(err)
		}
	}
}
