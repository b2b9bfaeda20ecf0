package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"sync"
	"testing"
)

// Durable namespace operations of several clients on the same few names,
// each depending on what the others just did (a create of a name just
// removed, a rename onto a name being renamed or removed, a grow of a
// file just renamed), all waiting for shared flushes: no deadlock, no
// data race (run with -race), and what Close leaves is what the clients
// saw, by name and size, fsck clean; so is what a power cut leaves once
// every operation has returned (each was durable when it did).
func TestH40fSharedNamesChurnWithGroupCommit(t *testing.T) {
	for _, cut := range []bool{false, true} {
		t.Run(map[bool]string{false: "close", true: "powercut"}[cut], func(t *testing.T) { h40fChurn(t, cut) })
	}
}

func h40fChurn(t *testing.T, cut bool) {
	devName := emuDevice(t, 16, "1M", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	const clients, ops, names = 6, 200, 5
	name := func(r *rand.Rand) string { return fmt.Sprintf("n%d", r.IntN(names)) }
	var wg sync.WaitGroup
	errc := make(chan error, clients)
	for c := range clients {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(c), 40))
			for range ops {
				var err error
				switch r.IntN(6) {
				case 0:
					err = e.Rename(name(r), name(r))
				case 1:
					err = e.Remove(name(r))
				case 2:
					var f *File
					if f, err = e.OpenFile(name(r), OCreate); err == nil {
						err = f.Close()
					}
				case 3:
					var f *File
					if f, err = e.OpenFile(name(r), OCreate|ODeferSync); err == nil {
						err = errors.Join(f.Grow(int64(1+r.IntN(8))*BlockSize), f.Close())
					}
				case 4:
					var f *File
					if f, err = e.Open(name(r)); err == nil {
						err = errors.Join(f.Truncate(int64(r.IntN(3))*BlockSize+int64(r.IntN(2))), f.Close())
					}
				default:
					err = e.SyncNamespace()
				}
				if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, errRemoved) {
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	t.Logf("device flushes %d, callers another's flush served %d", e.flushes.flushes.Load(), e.flushes.joined.Load())
	want := map[string]int64{}
	for _, fi := range e.List() {
		want[fi.Name] = fi.Size
	}
	if cut {
		if err := emuOf(t, e).PowerCut(); err != nil {
			t.Fatal(err)
		}
		e.crashForTest()
	} else if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	checkFsck(t, devName)
	e = reopen(t, devName, cfg)
	defer e.Close()
	got := map[string]int64{}
	for _, fi := range e.List() {
		got[fi.Name] = fi.Size
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after a stop (power cut %v) and reopen: %v, want %v", cut, got, want)
	}
}
