package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestColdReadsRaceRemoveWritesAndCloseStress: cold reads begun the
// daemon's way (StartRead under a plug) race writes of the same bytes
// (which hold the cache's lock of the file, so some reads go to the
// cold-read finisher, and move the file's gen, so some are read again),
// removes and re-creates of the files, cache evictions, and at last a
// Close while reads are still being begun. Every read begun must end
// exactly once, with the bytes of the file its handle opened, again, or
// an error saying the file was removed; Close must return nil and stop
// the finisher. Run it with -race.
func TestColdReadsRaceRemoveWritesAndCloseStress(t *testing.T) {
	const (
		files = 3
		bs    = 64 << 10
		size  = 16 * bs
	)
	rounds := 40
	if testing.Short() {
		rounds = 10
	}
	cfg := smallConfig()
	cfg.ReadaheadMax = -1
	e := formatOpen(t, emuDevice(t, 16, "4M", ""), cfg)
	var mu sync.Mutex
	byID := map[uint64][]byte{} // every file's bytes, by id: a handle's file
	create := func(name string, seed byte) {
		data := pattern(size, seed)
		h := createSynced(t, e, name, data)
		mu.Lock()
		byID[h.f.id] = data
		mu.Unlock()
		h.Close()
	}
	for i := range files {
		create(fmt.Sprint("f", i), byte(i))
	}
	// open opens one of the files at random and returns its bytes; nil
	// if it was removed just now, or created and not yet recorded, or
	// the engine is closing.
	open := func(rng *rand.Rand) (*File, []byte) {
		h, err := e.Open(fmt.Sprint("f", rng.IntN(files)))
		if err != nil {
			return nil, nil
		}
		mu.Lock()
		want := byID[h.f.id]
		mu.Unlock()
		if want == nil {
			h.Close()
			return nil, nil
		}
		return h, want
	}
	stop := make(chan struct{})
	var began, ended atomic.Int64
	var errMu sync.Mutex
	var errList []error
	report := func(err error) {
		errMu.Lock()
		if len(errList) < 10 {
			errList = append(errList, err)
		}
		errMu.Unlock()
	}
	var wg sync.WaitGroup
	// worker runs body on a file opened at random until stop is closed
	// or body says to stop; body closes the handle.
	worker := func(seed uint64, body func(rng *rand.Rand, h *File, want []byte) bool) {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, 34))
			for {
				select {
				case <-stop:
					return
				default:
				}
				if h, want := open(rng); h != nil && !body(rng, h, want) {
					return
				}
			}
		})
	}
	// Readers: batches of cold reads, each waited for.
	for r := range 2 {
		d := readDone{make(chan readEnd, 4)}
		bufs := make([][]byte, 4)
		for i := range bufs {
			bufs[i] = make([]byte, bs)
		}
		offs := make([]int64, 4)
		worker(uint64(r), func(rng *rand.Rand, h *File, want []byte) bool {
			defer h.Close()
			for i := range offs {
				offs[i] = int64(rng.IntN(size/bs)) * bs
			}
			// As startReads, minding which began.
			var begun [4]bool
			n := 0
			e.PlugReads()
			for i, p := range bufs {
				clear(p)
				if h.StartRead(p, offs[i], d) {
					begun[i] = true
					n++
				}
			}
			e.UnplugReads()
			began.Add(int64(n))
			for range n {
				select {
				case end := <-d.ch:
					ended.Add(1)
					if end.err != nil && !errors.Is(end.err, fs.ErrNotExist) && !errors.Is(end.err, ErrClosed) {
						report(fmt.Errorf("a cold read ended with %w", end.err))
					}
				case <-time.After(30 * time.Second):
					report(errors.New("a cold read did not end in 30 s"))
					return false
				}
			}
			for i, p := range bufs {
				if begun[i] && !bytes.Equal(p, make([]byte, bs)) && !bytes.Equal(p, want[offs[i]:offs[i]+bs]) {
					report(fmt.Errorf("a cold read of %d at %d returned bytes that are not its file's: %s", h.f.id, offs[i], h34aWhose(&mu, byID, p, offs[i], want)))
				}
			}
			return true
		})
	}
	// A writer of the files' own bytes: holds the cache's lock of the
	// file, moves its gen, gives writeback work.
	worker(7, func(rng *rand.Rand, h *File, want []byte) bool {
		off := int64(rng.IntN(size/BlockSize)) * BlockSize
		_, _ = h.WriteAt(want[off:off+BlockSize], off)
		h.Close()
		e.cache.EvictClean(1 << 20)
		return true
	})
	// Removes and re-creates.
	for round := range rounds {
		name := fmt.Sprint("f", round%files)
		if err := e.Remove(name); err != nil {
			t.Fatal(err)
		}
		create(name, byte(10+round))
		e.cache.EvictClean(1 << 40)
	}
	// Close while readers still begin reads.
	cerr := e.Close()
	close(stop)
	wg.Wait()
	for _, err := range errList {
		t.Error(err)
	}
	if cerr != nil {
		t.Fatalf("Close: %v", cerr)
	}
	select {
	case <-e.coldDone:
	default:
		t.Fatal("the cold-read finisher outlived Close")
	}
	if b, n := began.Load(), ended.Load(); b != n || b == 0 {
		t.Fatalf("%d cold reads began, %d ended", b, n)
	}
	s := e.Stats()
	t.Logf("cold reads %d, late (finisher) %d, again %d", s.ColdReads, s.ColdReadsLate, s.ColdReadsAgain)
}

// h34aWhose says what a read's wrong bytes are: where they first differ
// and whose they are (another file's at the same offset, zeros).
func h34aWhose(mu *sync.Mutex, byID map[uint64][]byte, p []byte, off int64, want []byte) string {
	i := 0
	for i < len(p) && p[i] == want[off+int64(i)] {
		i++
	}
	blk := p[i&^(BlockSize-1):][:BlockSize]
	what := fmt.Sprintf("differs from byte %d (block %d)", i, i/BlockSize)
	if bytes.Equal(blk, make([]byte, BlockSize)) {
		return what + ", zeros"
	}
	mu.Lock()
	defer mu.Unlock()
	for id, d := range byID {
		for o := int64(0); o+BlockSize <= int64(len(d)); o += BlockSize {
			if bytes.Equal(d[o:o+BlockSize], blk) {
				return fmt.Sprintf("%s, file %d's block at %d", what, id, o)
			}
		}
	}
	return what + fmt.Sprintf(", unknown bytes %x", blk[:16])
}
