package engine

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// Random small overwrites fragment extent maps until a checkpoint of the
// namespace no longer fits one metadata zone. Before the fix every
// metadata operation from then on failed ("log operation: ... zone is
// full", or a checkpoint that "does not fit a metadata zone") on a device
// with room to spare: `zonefold bench gc --workload hotcold` on 1 MiB
// zones ended so after 4-6 capacities of overwrites. The metadata log must
// keep working, and a checkpoint, a clean reopen and a power cut must all
// give the data back.
func TestFragmentedCheckpointOutgrowsAMetadataZone(t *testing.T) {
	// 128 KiB zones hold 3,200 checkpoint extents; the files below hold
	// 4,096 blocks, every other one overwritten on its own.
	devName := emuDevice(t, 192, "128K", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	const files, blocks = 4, 1024 // 4 MiB per file
	rng := rand.New(rand.NewSource(5))
	model := make([][]byte, files)
	for i := range files {
		f := mustCreate(t, e, fmt.Sprintf("f%d", i))
		model[i] = make([]byte, blocks*BlockSize)
		rng.Read(model[i])
		if _, err := f.WriteAt(model[i], 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	// overwrite gives block b of file i new random bytes, in the model too.
	overwrite := func(e *Engine, i, b int) (*File, error) {
		f, err := e.Open(fmt.Sprintf("f%d", i))
		if err != nil {
			return nil, err
		}
		p := model[i][b*BlockSize : (b+1)*BlockSize]
		rng.Read(p)
		if _, err := f.WriteAt(p, int64(b)*BlockSize); err != nil {
			return nil, fmt.Errorf("overwrite of f%d block %d: %w", i, b, err)
		}
		return f, nil
	}
	// Every other block, in a random order, twice: the second round
	// runs GC over the zones the first left half garbage.
	for round := range 2 {
		for _, k := range rng.Perm(files * blocks / 2) {
			if _, err := overwrite(e, k%files, 2*(k/files)); err != nil {
				t.Fatalf("round %d: %v (checkpoints %d)", round, err, e.Stats().Checkpoints)
			}
		}
		for i := range files {
			f, err := e.Open(fmt.Sprintf("f%d", i))
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatalf("round %d: sync f%d: %v", round, i, err)
			}
		}
		if err := e.checkpoint(); err != nil {
			t.Fatalf("round %d: checkpoint: %v", round, err)
		}
		if _, err := e.Create(fmt.Sprintf("after%d", round)); err != nil {
			t.Fatalf("round %d: create after the checkpoint: %v", round, err)
		}
	}
	n := 0
	for _, f := range e.snapshot().files {
		n += len(f.ext)
	}
	if n*ckptExtSize <= int(e.geo.ZoneCap) {
		t.Fatalf("only %d extents (%d bytes): the test wants a checkpoint larger than a %d-byte zone", n, n*ckptExtSize, e.geo.ZoneCap)
	}
	check := func(e *Engine, when string) {
		t.Helper()
		for i := range files {
			if got := readAll(t, e, fmt.Sprintf("f%d", i)); !bytes.Equal(got, model[i]) {
				t.Fatalf("%s: f%d differs", when, i)
			}
		}
	}
	check(e, "before reopen")
	if err := e.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	e = reopen(t, devName, cfg)
	check(e, "after reopen")
	checkFsck(t, devName)
	// A sync, then more fragmenting overwrites that are synced too, then
	// a power cut: recovery reads the big checkpoint and the log after it.
	for _, k := range rng.Perm(files * blocks / 2)[:512] {
		f, err := overwrite(e, k%files, 2*(k/files)+1)
		if err == nil {
			err = f.Sync()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	e = powerCutReopen(t, e, devName, cfg)
	defer e.Close()
	check(e, "after the power cut")
}

// A namespace that outgrows its metadata half anyway (files without data,
// beyond what Format allows for) is a clear ENOSPC from the create that
// would overflow it, never a write past a zone; removes still work and
// make room, and a reopen finds exactly the files whose create succeeded.
func TestNamespaceFullIsENOSPCAndRemovesStillWork(t *testing.T) {
	devName := emuDevice(t, 16, "256K", "")
	cfg := smallConfig()
	e := formatOpen(t, devName, cfg)
	pad := strings.Repeat("n", 200)
	live := map[string]bool{}
	var full error
	for i := 0; i < 10000 && full == nil; i++ {
		name := fmt.Sprintf("%05d-%s", i, pad)
		if _, err := e.Create(name); err != nil {
			full = err
			break
		}
		live[name] = true
	}
	if !errors.Is(full, syscall.ENOSPC) {
		t.Fatalf("creating empty files ended with %v after %d, want ENOSPC", full, len(live))
	}
	if len(live) < 500 {
		t.Fatalf("only %d files fit a %d-byte metadata half", len(live), e.sb.metaHalfCap())
	}
	removed := 0
	for name := range live {
		if err := e.Remove(name); err != nil {
			t.Fatalf("remove %d of a full namespace: %v", removed, err)
		}
		delete(live, name)
		if removed++; removed == 64 {
			break
		}
	}
	if _, err := e.Create("again"); err != nil {
		t.Fatalf("create after removes: %v", err)
	}
	live["again"] = true
	if err := e.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	e = reopen(t, devName, cfg)
	defer e.Close()
	got := map[string]bool{}
	for _, fi := range e.List() {
		got[fi.Name] = true
	}
	if !maps.Equal(got, live) {
		t.Fatalf("after reopen %d files, want %d", len(got), len(live))
	}
}

// rewriteSuperblocks applies change to the superblock copy at the start
// of each metadata half of a closed device.
func rewriteSuperblocks(t *testing.T, devName string, mz [2]int, change func(i int, blk []byte)) {
	t.Helper()
	d, err := zns.Open(devName, zns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	g := d.Geometry()
	offs := []int64{d.(*zns.Emu).FileOffset(int64(mz[0]) * g.ZoneSize), d.(*zns.Emu).FileOffset(int64(mz[1]) * g.ZoneSize)}
	d.Close()
	fh, err := os.OpenFile(strings.TrimPrefix(devName[:strings.IndexByte(devName, '?')], "emu:"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	for i, at := range offs {
		blk := make([]byte, BlockSize)
		if _, err := fh.ReadAt(blk, at); err != nil {
			t.Fatal(err)
		}
		change(i, blk)
		if _, err := fh.WriteAt(blk, at); err != nil {
			t.Fatal(err)
		}
	}
}

// A superblock written before metadata halves grew has zeros where the
// group size is: it reads as one zone per half, the layout it was
// written with. And a device with halves of several zones still opens
// from the second half's superblock copy when the first is damaged.
func TestMetaGroupSuperblock(t *testing.T) {
	for _, c := range []struct {
		zones    int
		zoneSize string
		multi    bool // halves of more than one zone
	}{{16, "1M", false}, {192, "128K", true}} {
		t.Run(fmt.Sprintf("%dx%s", c.zones, c.zoneSize), func(t *testing.T) {
			devName := emuDevice(t, c.zones, c.zoneSize, "")
			e := formatOpen(t, devName, smallConfig())
			k := e.sb.MetaGroup
			if (k > 1) != c.multi {
				t.Fatalf("metadata halves of %d zones", k)
			}
			want := bytes.Repeat([]byte("meta"), 3000)
			f, err := e.Create("a")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(want, 0); err != nil {
				t.Fatal(err)
			}
			mz := e.sb.MetaZones
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			rewriteSuperblocks(t, devName, mz, func(i int, blk []byte) {
				if k == 1 {
					clear(blk[60:64]) // as written before halves grew
					binaryPutCRC(blk)
				} else if i == 0 {
					blk[100] ^= 1 // damaged: its checksum fails
				}
			})
			e = reopen(t, devName, smallConfig())
			defer e.Close()
			if e.sb.MetaGroup != k || e.sb.MetaZones != mz {
				t.Fatalf("reopened with halves %v of %d zones, want %v of %d", e.sb.MetaZones, e.sb.MetaGroup, mz, k)
			}
			if got := readAll(t, e, "a"); !bytes.Equal(got, want) {
				t.Fatalf("a: %d bytes back, want %d", len(got), len(want))
			}
		})
	}
}
