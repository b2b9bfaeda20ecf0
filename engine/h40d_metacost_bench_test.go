package engine

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestH40dMetaCost measures what durable metadata operations cost when
// clients run them concurrently, and prints it (it asserts nothing: it
// is a measurement, run only with ZONEFOLD_H40D_BENCH set, the rounds
// there, on an emu device in $TMPDIR, whose flush is an fdatasync).
// Cases, each with G goroutines (ZONEFOLD_H40D_G, default 16) of
// ZONEFOLD_H40D_OPS each (default 64):
//
//   - cwf: create a file, write 4 KiB, fsync it (durable create)
//   - grow: create a file deferred, grow it to 4 KiB, fsync it, close
//     (the fio engine's layout of a small file)
//   - tmpren: create a temporary deferred, grow it, rename it over its
//     name (the fio engine's layout of a file laid out anew)
//   - rm: remove a file (durable)
//   - dcw: create a file deferred, write 4 KiB, close; one SyncNamespace
//     and Engine.Sync after the burst (small files without an fsync each)
//
// Each case runs on a device of each format in ZONEFOLD_H40D_FORMATS
// (default "2,3": format 2 logs a block per operation, format 3 packs
// held operations, metaPack), so one run gives the A/B.
//
// Per case: wall time, device flushes and device bytes (data, record
// headers, metadata log) per operation.
//
//	ZONEFOLD_H40D_BENCH=5 go test -ldflags=-checklinkname=0 -run TestH40dMetaCost -v ./engine/
func TestH40dMetaCost(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("ZONEFOLD_H40D_BENCH"))
	if rounds <= 0 {
		t.Skip("a measurement: set ZONEFOLD_H40D_BENCH=rounds")
	}
	g := envInt("ZONEFOLD_H40D_G", 16)
	ops := envInt("ZONEFOLD_H40D_OPS", 64)
	only := os.Getenv("ZONEFOLD_H40D_CASE")
	formats := []int{superMinVersion, superPackVersion}
	if f := os.Getenv("ZONEFOLD_H40D_FORMATS"); f != "" {
		formats = nil
		for _, v := range strings.Split(f, ",") {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			formats = append(formats, n)
		}
	}
	old := formatVersion
	defer func() { formatVersion = old }()
	for r := range rounds {
		for _, c := range []string{"cwf", "grow", "tmpren", "rm", "dcw"} {
			if only != "" && only != c {
				continue
			}
			for _, v := range formats {
				formatVersion = v
				metaCostRound(t, r, c, g, ops)
			}
		}
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func metaCostRound(t *testing.T, round int, c string, g, ops int) {
	devName := emuDevice(t, 64, "4M", "")
	e := formatOpen(t, devName, Config{CacheBytes: 64 << 20, DirtyLimit: 32 << 20})
	defer e.Close()
	blk := make([]byte, BlockSize)
	for i := range blk {
		blk[i] = byte(i)
	}
	name := func(w, i int) string { return fmt.Sprintf("w%d.%d", w, i) }
	if c == "rm" {
		for w := range g {
			for i := range ops {
				f, err := e.OpenFile(name(w, i), OCreate|ODeferSync)
				if err != nil {
					t.Fatal(err)
				}
				f.Close()
			}
		}
		if err := e.SyncNamespace(); err != nil {
			t.Fatal(err)
		}
	}
	s0 := e.Stats()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, g)
	for w := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ops {
				if err := metaCostOp(e, c, name(w, i), blk); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	if c == "dcw" {
		if err := e.SyncNamespace(); err != nil {
			t.Fatal(err)
		}
		if err := e.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	el := time.Since(start)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	d := e.Stats().Sub(s0)
	n := float64(g * ops)
	t.Logf("H40D case=%s format=%d round=%d ops=%d metaBlocks/op=%.3f secs=%.3f us/op=%.1f flushes/op=%.3f devB/op=%.0f metaB/op=%.0f dataB/op=%.0f hdrB/op=%.0f ckpts=%d",
		c, e.sb.Version, round, g*ops, float64(d.DevMeta-d.DevCheckpoint)/BlockSize/n, el.Seconds(), float64(el.Microseconds())/n, float64(d.Flushes)/n,
		float64(d.DevData+d.DevHeaders+d.DevPad+d.DevMeta)/n, float64(d.DevMeta)/n, float64(d.DevData)/n, float64(d.DevHeaders)/n, d.Checkpoints)
}

func metaCostOp(e *Engine, c, name string, blk []byte) error {
	switch c {
	case "cwf":
		f, err := e.Create(name)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := f.WriteAt(blk, 0); err != nil {
			return err
		}
		return f.Sync()
	case "grow":
		f, err := e.OpenFile(name, OCreate|ODeferSync)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := f.Grow(BlockSize); err != nil {
			return err
		}
		return f.Sync()
	case "tmpren":
		f, err := e.OpenFile(".tmp."+name, OCreate|OExcl|ODeferSync)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := f.Grow(BlockSize); err != nil {
			return err
		}
		return e.Rename(".tmp."+name, name)
	case "rm":
		return e.Remove(name)
	case "dcw":
		f, err := e.OpenFile(name, OCreate|ODeferSync)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = f.WriteAt(blk, 0)
		return err
	}
	return fmt.Errorf("no case %q", c)
}
