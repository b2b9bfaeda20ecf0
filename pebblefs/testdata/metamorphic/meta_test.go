// Package meta runs Pebble's own metamorphic test against pebblefs. It
// is a module of its own, under testdata, so that the metamorphic
// package's dependencies (testify and others) stay out of zonefold's
// go.mod and out of make test; run it by hand:
//
//	cd pebblefs/testdata/metamorphic
//	go test -ldflags=-checklinkname=0 -v .                       # 2 seeds, 2000 ops
//	H37B_META_SEEDS=40 H37B_META_OPS=5000 H37B_META_SEED=100 \
//	    go test -ldflags=-checklinkname=0 -timeout 30m -v .      # a soak
//
// Options that need a MemFS of Pebble's own (strict mode's crash
// clones, disk, shared or external storage) are skipped: the seeds that
// draw them are passed over.
package meta

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"

	"github.com/cockroachdb/pebble/v2/metamorphic"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/pebblefs"
	"github.com/zonefold/zonefold/zns"
)

// TestH37BMetamorphic runs Pebble's own metamorphic test (its exported
// driver: random options, random operations) once on vfs.NewMem and once
// on pebblefs, with the same options and operations, and wants the same
// history: every operation's result alike.
func TestH37BMetamorphic(t *testing.T) {
	seeds, ops := 2, uint64(2000)
	if s := os.Getenv("H37B_META_SEEDS"); s != "" {
		seeds, _ = strconv.Atoi(s)
	}
	if s := os.Getenv("H37B_META_OPS"); s != "" {
		ops, _ = strconv.ParseUint(s, 10, 64)
	}
	first := uint64(1)
	if s := os.Getenv("H37B_META_SEED"); s != "" {
		first, _ = strconv.ParseUint(s, 10, 64)
	}
	kf := metamorphic.TestkeysKeyFormat
	cfg := metamorphic.RandomOptionsCfg{NoRemoteStorage: true, NoWALFailover: true}
	ran := 0
	for seed := first; ran < seeds; seed++ {
		opts := func() *metamorphic.TestOptions {
			return metamorphic.RandomOptions(rand.New(rand.NewPCG(seed, seed)), kf, cfg)
		}
		probe := reflect.ValueOf(opts()).Elem()
		skip := false
		for _, f := range []string{"useDisk", "strictFS", "sharedStorageEnabled", "externalStorageEnabled", "initialStatePath"} {
			v := probe.FieldByName(f)
			if (v.Kind() == reflect.Bool && v.Bool()) || (v.Kind() == reflect.String && v.String() != "") {
				skip = true
			}
		}
		if skip {
			continue
		}
		ran++
		gen := metamorphic.GenerateOps(rand.New(rand.NewPCG(seed, 1)), ops, kf, metamorphic.DefaultOpConfig())
		dir := t.TempDir()
		var paths []string
		for _, which := range []string{"mem", "pebblefs"} {
			to := opts()
			to.Threads = min(to.Threads, 2)
			to.Opts.BytesPerSync = pebblefs.NoPeriodicSync
			if which == "pebblefs" {
				dev, err := zns.Open("emu:"+filepath.Join(t.TempDir(), "dev")+"?zone_size=4M&zones=64", zns.Options{})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := engine.Format(dev, engine.FormatOptions{Force: true}); err != nil {
					t.Fatal(err)
				}
				e, err := engine.OpenDevice(dev, engine.Config{CacheBytes: 32 << 20, DirtyLimit: 16 << 20})
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				to.Opts.FS = pebblefs.New(e)
			} else {
				to.Opts.FS = vfs.NewMem()
			}
			p := filepath.Join(dir, which+".history")
			f, err := os.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			m, err := metamorphic.New(gen, to, "db", f)
			if err != nil {
				t.Fatalf("seed %d %s: %v", seed, which, err)
			}
			if err := metamorphic.Execute(m); err != nil {
				t.Fatalf("seed %d %s: %v", seed, which, err)
			}
			f.Close()
			paths = append(paths, p)
		}
		if i, diff := metamorphic.CompareHistories(t, paths); i != 0 {
			t.Fatalf("seed %d: pebblefs's history differs from MemFS's:\n%s", seed, diff)
		}
		t.Logf("seed %d: %d operations, histories alike", seed, ops)
	}
}
