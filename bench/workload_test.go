package bench

import (
	"testing"

	"github.com/zonefold/zonefold/engine"
	"github.com/zonefold/zonefold/zns"
)

// A fill phase then an overwrite phase of a given length: Keep leaves the
// filled files in place, Ops sets the operations per file.
func TestWorkloadKeepAndOps(t *testing.T) {
	dev, err := zns.Open("null:?size=64M&zone_size=4M", zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.FormatAndOpen(dev, engine.Config{CacheBytes: 8 << 20, DirtyLimit: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	fill := Workload{Files: 2, BS: 8192, IODepth: 2, Size: 1 << 20, RW: "write", Seed: 1}
	if _, err := RunWorkload(t.Context(), e, fill); err != nil {
		t.Fatal(err)
	}
	over := fill
	over.RW, over.Keep, over.Ops = "randwrite", true, 10
	res, err := RunWorkload(t.Context(), e, over)
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops != 2*10 || res.Bytes != 2*10*8192 {
		t.Errorf("overwrite phase did %d ops, %d bytes; want 20 ops of 8192", res.Ops, res.Bytes)
	}
	for _, fi := range e.List() {
		if fi.Size != 1<<20 {
			t.Errorf("%s: size %d after the overwrite phase; want the filled 1 MiB kept", fi.Name, fi.Size)
		}
	}
}
