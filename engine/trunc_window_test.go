package engine

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
)

// A shrinking truncate into a block sets the file's new size before its
// tail's zeros reach the device. Until they are durable nothing durable
// may carry that size: a checkpoint or a GC record of the file taken in
// that window, with the zeros then lost (a kill -9, a power cut, an EIO),
// brought the file back cut to the new size over the block's old bytes,
// which a later grow showed where zeros belong. The kill -9 loop found it
// (seed 2: "first difference at 15953" after a truncate in flight at a
// kill was settled as done and the file then grew).
//
// Each case runs a checkpoint or a GC pass over the file's zone in that
// window, then fails the tail's append (EIO): the truncate fails, and
// after a power cut the file must be as it was.
func TestTruncateWindowDurableSize(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, e *Engine, f *File)
	}{
		{"checkpoint", func(t *testing.T, e *Engine, _ *File) {
			if err := e.checkpoint(); err != nil {
				t.Error(err)
			}
		}},
		{"gc", func(t *testing.T, e *Engine, f *File) {
			e.gc.mu.Lock()
			defer e.gc.mu.Unlock()
			if ok, err := e.gc.collectSealed(fileZone(t, e, f), minGCGain); err != nil || !ok {
				t.Errorf("collect the file's zone: %v, %v", ok, err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			devName, cfg, e, f := fileWithoutGC(t)
			defer func() { e.Close() }()
			want := bytes.Repeat([]byte("truncate"), 10000/8)
			for range 2 { // the second copy makes the first garbage, for GC
				if _, err := f.WriteAt(want, 0); err != nil {
					t.Fatal(err)
				}
				if err := f.Sync(); err != nil {
					t.Fatal(err)
				}
			}
			ran := false
			testHookTruncateTail = func(e *Engine) {
				ran = true
				tc.run(t, e, f)
				emuOf(t, e).FailWrite(1) // the tail's zeros
			}
			t.Cleanup(func() { testHookTruncateTail = nil })
			if err := f.Truncate(5000); !errors.Is(err, syscall.EIO) {
				t.Fatalf("truncate with its tail's write failing: %v, want EIO", err)
			}
			testHookTruncateTail = nil
			if !ran {
				t.Fatal("the truncate never wrote its tail")
			}
			e = powerCutReopen(t, e, devName, cfg)
			if got := readAll(t, e, "a"); !bytes.Equal(got, want) {
				t.Fatalf("after the failed truncate and a power cut: %d bytes, want the %d before it (first difference at %d)",
					len(got), len(want), firstDiff(got, want))
			}
		})
	}
}

// fileZone is the zone that holds f's first block.
func fileZone(t *testing.T, e *Engine, f *File) *zone {
	t.Helper()
	var z *zone
	f.f.mu.RLock()
	f.f.ext.lookup(0, BlockSize, func(x extent) { z = e.zoneAt(x.dev) })
	f.f.mu.RUnlock()
	if z == nil {
		t.Fatal("the file's first block is not mapped")
	}
	return z
}

// TestShrinkThenGrowReadsZeros: a file shrunk to a size inside a block
// and grown again reads zeros past the cut, at once and after a power
// cut, whatever happened between the two: nothing, a checkpoint, a GC
// pass that moved the tail block, a power cut (recovery), a power cut
// and a checkpoint, a clean reopen.
func TestShrinkThenGrowReadsZeros(t *testing.T) {
	for _, between := range []string{"nothing", "checkpoint", "gc", "power cut", "power cut, checkpoint", "reopen"} {
		t.Run(between, func(t *testing.T) {
			devName, cfg, e, f := fileWithoutGC(t)
			defer func() { e.Close() }()
			data := bytes.Repeat([]byte("shrink, grow "), 30000/13+1)[:30000]
			for range 2 { // the second copy makes the first garbage, for GC
				if _, err := f.WriteAt(data, 0); err != nil {
					t.Fatal(err)
				}
				if err := f.Sync(); err != nil {
					t.Fatal(err)
				}
			}
			if err := f.Truncate(15953); err != nil {
				t.Fatal(err)
			}
			switch between {
			case "checkpoint":
				if err := e.checkpoint(); err != nil {
					t.Fatal(err)
				}
			case "gc":
				e.gc.mu.Lock()
				ok, err := e.gc.collectSealed(fileZone(t, e, f), minGCGain)
				e.gc.mu.Unlock()
				if err != nil || !ok {
					t.Fatalf("collect the file's zone: %v, %v", ok, err)
				}
			case "power cut", "power cut, checkpoint":
				e = powerCutReopen(t, e, devName, cfg)
				if between == "power cut, checkpoint" {
					if err := e.checkpoint(); err != nil {
						t.Fatal(err)
					}
				}
			case "reopen":
				if err := e.Close(); err != nil {
					t.Fatal(err)
				}
				e = reopen(t, devName, cfg)
			}
			var err error
			if f, err = e.Open("a"); err != nil {
				t.Fatal(err)
			}
			if err := f.Truncate(22834); err != nil {
				t.Fatal(err)
			}
			want := append(data[:15953:15953], make([]byte, 22834-15953)...)
			if got := readAll(t, e, "a"); !bytes.Equal(got, want) {
				t.Fatalf("after the grow: %d bytes, first difference at %d", len(got), firstDiff(got, want))
			}
			e = powerCutReopen(t, e, devName, cfg)
			if got := readAll(t, e, "a"); !bytes.Equal(got, want) {
				t.Fatalf("after the grow and a power cut: %d bytes, first difference at %d", len(got), firstDiff(got, want))
			}
		})
	}
}
