package pebblefs

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// TestH25DCheckpointWhileWriting takes checkpoints while two writers
// commit with pebble.Sync: Checkpoint copies the live WAL (vfs.CopyAcrossFS,
// a sequential handle) as Pebble's LogWriter appends to it, so every
// byte the copy read must be the WAL's (never zeros of a write in
// flight), and each checkpoint must open (read-only) and hold every key
// a writer had acknowledged before it began.
func TestH25DCheckpointWhileWriting(t *testing.T) {
	e := formatOpen(t, emuDevice(t, 64, "2M"), 0, testConfig())
	defer e.Close()
	y := New(e)
	o := smallOptions(y)
	o.MemTableSize = 4 << 20
	db, err := pebble.Open("db", o)
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var acked [2]atomic.Int64 // keys each writer has acknowledged
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 25))
			for i := 0; !stop.Load(); i++ {
				v := make([]byte, 1+rng.IntN(1<<rng.IntN(17)))
				for j := range v {
					v[j] = byte(rng.Uint32())
				}
				if err := db.Set(fmt.Appendf(nil, "w%d-%07d", w, i), v, pebble.Sync); err != nil {
					t.Error(err)
					return
				}
				acked[w].Store(int64(i + 1))
			}
		})
	}
	defer func() {
		stop.Store(true)
		wg.Wait()
		db.Close()
	}()
	for c := range 12 {
		name := fmt.Sprintf("ck%03d", c)
		before := [2]int64{acked[0].Load(), acked[1].Load()}
		if err := db.Checkpoint(name); err != nil {
			t.Fatal(err)
		}
		l, err := y.List(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range l {
			if !strings.HasSuffix(f, ".log") {
				continue
			}
			ck := readFile(t, y, name+"/"+f)
			src, err := y.Open("db/" + f)
			if err != nil {
				continue // recycled since
			}
			b := make([]byte, len(ck))
			n, _ := src.ReadAt(b, 0)
			src.Close()
			for i := range n {
				if ck[i] != b[i] {
					t.Fatalf("checkpoint %s: %s: byte %d of the %d copied is %#x, the WAL holds %#x", name, f, i, len(ck), ck[i], b[i])
				}
			}
		}
		ro := smallOptions(y)
		ro.ReadOnly = true
		cdb, err := pebble.Open(name, ro)
		if err != nil {
			t.Fatalf("checkpoint %s does not open: %v", name, err)
		}
		for w, n := range before {
			if n == 0 {
				continue
			}
			k := fmt.Appendf(nil, "w%d-%07d", w, n-1)
			if _, closer, err := cdb.Get(k); err != nil {
				t.Fatalf("checkpoint %s: %s, acknowledged before it began: %v", name, k, err)
			} else {
				closer.Close()
			}
		}
		if err := cdb.CheckLevels(nil); err != nil {
			t.Fatalf("checkpoint %s: CheckLevels: %v", name, err)
		}
		cdb.Close()
		if err := y.RemoveAll(name); err != nil {
			t.Fatal(err)
		}
	}
}
