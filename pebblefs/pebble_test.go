package pebblefs

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/errors/oserror"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/vfstest"

	"github.com/zonefold/zonefold/engine"
)

// model is what the DB must hold: key → value, merges being
// concatenations (Pebble's default merger).
type model map[string][]byte

// workload drives a DB with random sets, deletes, merges, batches of
// them and ingested tables, keeping the model in step.
type workload struct {
	t      *testing.T
	rng    *rand.Rand
	db     *pebble.DB
	fs     vfs.FS
	m      model
	keys   int
	ingest int // tables ingested so far
	wo     *pebble.WriteOptions
}

func (w *workload) key() []byte { return fmt.Appendf(nil, "k%06d", w.rng.IntN(w.keys)) }

func (w *workload) value() []byte { return w.bytes(w.rng.IntN(2048)) }

func (w *workload) bytes(n int) []byte {
	v := make([]byte, n)
	for i := range v {
		v[i] = byte(w.rng.Uint32())
	}
	return v
}

// step runs one random operation.
func (w *workload) step() {
	t := w.t
	switch k := w.rng.IntN(100); {
	case k < 45:
		key, v := w.key(), w.value()
		if err := w.db.Set(key, v, w.wo); err != nil {
			t.Fatalf("set: %v", err)
		}
		w.m[string(key)] = v
	case k < 60:
		key := w.key()
		if err := w.db.Delete(key, w.wo); err != nil {
			t.Fatalf("delete: %v", err)
		}
		delete(w.m, string(key))
	case k < 70:
		key, v := w.key(), w.bytes(w.rng.IntN(64))
		if err := w.db.Merge(key, v, w.wo); err != nil {
			t.Fatalf("merge: %v", err)
		}
		w.m[string(key)] = append(slices.Clip(w.m[string(key)]), v...)
	case k < 95:
		b := w.db.NewBatch()
		staged := model{}
		gone := map[string]bool{}
		for range 1 + w.rng.IntN(20) {
			key := w.key()
			switch w.rng.IntN(3) {
			case 0:
				v := w.value()
				_ = b.Set(key, v, nil)
				staged[string(key)], gone[string(key)] = v, false
			case 1:
				_ = b.Delete(key, nil)
				delete(staged, string(key))
				gone[string(key)] = true
			default:
				v := w.bytes(w.rng.IntN(64))
				_ = b.Merge(key, v, nil)
				old, ok := staged[string(key)]
				if !ok && !gone[string(key)] {
					old = w.m[string(key)]
				}
				staged[string(key)], gone[string(key)] = append(slices.Clip(old), v...), false
			}
		}
		if err := b.Commit(w.wo); err != nil {
			t.Fatalf("batch: %v", err)
		}
		_ = b.Close()
		for k, g := range gone {
			if g {
				delete(w.m, k)
			}
		}
		for k, v := range staged {
			w.m[k] = v
		}
	default:
		w.ingestTable()
	}
}

// ingestTable writes a table of sets, deletes and merges on the FS and
// ingests it.
func (w *workload) ingestTable() {
	t := w.t
	w.ingest++
	name := fmt.Sprintf("ingest/%06d.sst", w.ingest)
	f, err := w.fs.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	tw := sstable.NewWriter(objstorageprovider.NewFileWritable(f), sstable.WriterOptions{TableFormat: w.db.TableFormat()})
	var keys []string
	seen := map[string]bool{}
	for range 1 + w.rng.IntN(40) {
		k := string(w.key())
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		switch w.rng.IntN(4) {
		case 0:
			if err := tw.Delete([]byte(k)); err != nil {
				t.Fatal(err)
			}
			delete(w.m, k)
		case 1:
			v := w.bytes(w.rng.IntN(64))
			if err := tw.Merge([]byte(k), v); err != nil {
				t.Fatal(err)
			}
			w.m[k] = append(slices.Clip(w.m[k]), v...)
		default:
			v := w.value()
			if err := tw.Set([]byte(k), v); err != nil {
				t.Fatal(err)
			}
			w.m[k] = v
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatalf("write %s: %v", name, err)
	}
	if err := w.db.Ingest(context.Background(), []string{name}); err != nil {
		t.Fatalf("ingest %s: %v", name, err)
	}
	// Pebble moves an ingested table in: a copy here, as there are no
	// hard links, and the original is removed.
	if _, err := w.fs.Stat(name); !oserror.IsNotExist(err) {
		t.Fatalf("%s after ingesting it: %v, want it gone", name, err)
	}
}

// verify compares the whole DB with the model, by iteration and by Get,
// and runs Pebble's own consistency check of its levels.
func verify(t *testing.T, db *pebble.DB, m model) {
	t.Helper()
	it, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		k := string(it.Key())
		want, in := m[k]
		if !in {
			t.Fatalf("key %q in the DB, not in the model", k)
		}
		if !bytes.Equal(it.Value(), want) {
			t.Fatalf("key %q: %d bytes in the DB, model has %d", k, len(it.Value()), len(want))
		}
		n++
	}
	if err := it.Close(); err != nil {
		t.Fatalf("iterate: %v", err)
	}
	if n != len(m) {
		t.Fatalf("DB has %d keys, model %d", n, len(m))
	}
	checked := 0
	for k, want := range m {
		if checked == 200 {
			break
		}
		got, closer, err := db.Get([]byte(k))
		if err != nil {
			t.Fatalf("get %q: %v", k, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("get %q: %d bytes, model has %d", k, len(got), len(want))
		}
		closer.Close()
		checked++
	}
	if err := db.CheckLevels(nil); err != nil {
		t.Fatalf("CheckLevels: %v", err)
	}
}

func openDB(t *testing.T, o *pebble.Options) *pebble.DB {
	t.Helper()
	db, err := pebble.Open("db", o)
	if err != nil {
		t.Fatalf("open Pebble: %v", err)
	}
	return db
}

// pebbleRun runs the workload on devName: a fresh DB, ops operations
// with checks along the way, then a close and reopen of Pebble and of
// the engine, checked again.
func pebbleRun(t *testing.T, devName string, formatZones int, cfg engine.Config, ops int) {
	e := formatOpen(t, devName, formatZones, cfg)
	tracked, openFiles := vfstest.WithOpenFileTracking(New(e))
	y := tracked
	if err := y.MkdirAll("ingest", 0o755); err != nil {
		t.Fatal(err)
	}
	o := smallOptions(New(e))
	o.FS = y
	db := openDB(t, o)
	w := &workload{t: t, rng: rand.New(rand.NewPCG(1, 2)), db: db, fs: y, m: model{}, keys: 3000, wo: pebble.NoSync}
	for i := range ops {
		w.step()
		if i%(ops/4) == ops/4-1 {
			verify(t, db, w.m)
			if err := db.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := db.Compact(context.Background(), []byte("k"), []byte("l"), true); err != nil {
		t.Fatalf("compact: %v", err)
	}
	verify(t, db, w.m)
	met := db.Metrics()
	st := e.Stats()
	t.Logf("pebble: %d keys, write amp %.2f, %d compactions, %d flushes; engine: %d MiB written by Pebble, device WAF %.3f, %d GC resets",
		len(w.m), writeAmp(met), met.Compact.Count, met.Flush.Count, st.HostWritten>>20, st.WAF(), st.GCResets)
	if met.Compact.Count == 0 || met.Flush.Count == 0 {
		t.Fatalf("the workload ran %d compactions and %d flushes: it tests too little", met.Compact.Count, met.Flush.Count)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("close Pebble: %v", err)
	}
	var leaks strings.Builder
	openFiles(&leaks)
	if leaks.Len() > 0 {
		t.Fatalf("files left open after Pebble closed:\n%s", leaks.String())
	}
	if err := e.Close(); err != nil {
		t.Fatalf("close engine: %v", err)
	}

	// Reopen everything from the device and check again, then write on.
	e = reopenEngine(t, devName, cfg)
	defer e.Close()
	o = smallOptions(New(e))
	db = openDB(t, o)
	verify(t, db, w.m)
	w.db, w.fs = db, o.FS
	for range ops / 4 {
		w.step()
	}
	verify(t, db, w.m)
	if err := db.Close(); err != nil {
		t.Fatalf("close Pebble: %v", err)
	}
}

func TestPebbleModel(t *testing.T) {
	pebbleRun(t, emuDevice(t, 64, "2M"), 0, testConfig(), 4000)
}

// TestPebbleRealDevices runs the model workload on the zoned devices the
// VM harness names (make vmtest), on a slice of each.
func TestPebbleRealDevices(t *testing.T) {
	list := os.Getenv("ZONEFOLD_TEST_DEVICES")
	if list == "" {
		t.Skip("ZONEFOLD_TEST_DEVICES is not set (make vmtest sets it in the VM)")
	}
	for _, dev := range strings.Split(list, ",") {
		t.Run(strings.TrimPrefix(dev, "/dev/"), func(t *testing.T) {
			pebbleRun(t, dev, 24, testConfig(), 1200)
		})
	}
}

func writeAmp(m *pebble.Metrics) float64 {
	total := m.Total()
	return total.WriteAmp()
}
