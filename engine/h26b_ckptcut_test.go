package engine

// h26b: power cuts inside a checkpoint's own device writes. A seeded
// workload (creates, overwrites, truncates down and up, renames over
// files, removes: every one acknowledged durable, by fsync or by the
// operation itself) runs with no checkpoint after it; then the power is
// cut at the K-th device operation of the next checkpoint (the other
// half's resets, the old half's finish, the data flush, each write of
// the record, max_append 8 KiB so that it takes several, the last
// flush), for every K, the last write possibly torn to a block prefix.
// After the cut: fsck clean, every acknowledged byte, size, name and
// remove as the model says, and two more checkpoints (the second
// switches halves back) that work and leave a device a further power
// cut recovers, fsck clean, with the writes acknowledged after them.
//
// Cases: the first checkpoint of a freshly formatted device (the other
// half holds only the superblock copy Format finished there), a switch
// into each half after earlier checkpoints (the half being reset holds
// the older checkpoint; once it is reset, the active half's is the only
// valid one, and the cut lands there), and recovery's own checkpoint
// (the cut lands while Open writes it, then again inside the next
// recovery's).
//
// Mutants tried (each fails at once, so no bug found here means the
// test can see one): File.Sync a no-op (acknowledged bytes gone at the
// first cut); recovery preferring the lower-numbered checkpoint
// (acknowledged operations gone); readSuperblock reading only the first
// metadata zone's copy (a cut right after half 0's reset, half 1 then
// the only valid one: "not formatted").

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

type h26bCkpt struct {
	t       *testing.T
	devName string
	cfg     Config
	dev     *cutDev
	e       *Engine
	m       map[string][]byte // acknowledged durable contents
	rng     *rand.Rand
	n       int
}

func (r *h26bCkpt) openDev() *zns.Emu {
	d, err := zns.Open(r.devName, zns.Options{})
	if err != nil {
		r.t.Fatal(err)
	}
	return d.(*zns.Emu)
}

// h26bOpenFormatted formats devName and opens the engine on it (the
// set-up's config), for a run drawing from rng.
func h26bOpenFormatted(t *testing.T, devName string, rng *rand.Rand) *h26bCkpt {
	t.Helper()
	r := &h26bCkpt{t: t, devName: devName, rng: rng,
		cfg: Config{CacheBytes: 2 << 20, DirtyLimit: 512 << 10, MaxOrder: 4}, m: map[string][]byte{}}
	d := r.openDev()
	if _, err := Format(d, FormatOptions{}); err != nil {
		t.Fatal(err)
	}
	d.Close()
	r.must(r.open(false, 0), "open")
	return r
}

// open opens the engine on the device behind a cutDev that cuts at its
// at-th operation (0: never).
func (r *h26bCkpt) open(fresh bool, at int64) error {
	r.dev = &cutDev{Emu: r.openDev()}
	r.dev.at.Store(at)
	var err error
	if fresh {
		r.e, err = FormatAndOpen(r.dev, r.cfg)
	} else {
		r.e, err = OpenDevice(r.dev, r.cfg)
	}
	if err != nil {
		r.e = nil
	}
	return err
}

// ckpt writes a checkpoint as a switch does, with no GC pass running
// (collector.mu, above nsMu in the lock order): the device operations
// counted from its start are its own, the same in every run of a seed.
func (r *h26bCkpt) ckpt() error {
	r.e.gc.mu.Lock()
	defer r.e.gc.mu.Unlock()
	r.e.nsMu.Lock()
	defer r.e.nsMu.Unlock()
	return r.e.checkpoint()
}

// crash stops the engine as a killed process stops, tears the last write
// to keep blocks (keep < 0: none torn) or cuts the power, and closes the
// device. It reports whether the write was torn.
func (r *h26bCkpt) crash(keep int) bool {
	if r.e != nil {
		r.e.crashForTest()
		r.e = nil
	}
	r.dev.cut.Store(true)
	emu := r.dev.Emu
	torn := keep >= 0 && emu.TearLastWrite(int64(keep)*BlockSize) == nil
	if !torn {
		if err := emu.PowerCut(); err != nil {
			r.t.Fatal(err)
		}
	}
	emu.Close()
	return torn
}

func (r *h26bCkpt) fsck(when string) {
	r.t.Helper()
	d := r.openDev()
	rep, err := Fsck(d)
	d.Close()
	if err != nil || len(rep.Problems) > 0 {
		r.t.Fatalf("fsck %s: %v %v\ncut: %v", when, err, rep, r.events())
	}
}

func (r *h26bCkpt) events() []string {
	r.dev.mu.Lock()
	defer r.dev.mu.Unlock()
	return slices.Clone(r.dev.events)
}

func (r *h26bCkpt) data(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.rng.IntN(255) + 1)
	}
	return b
}

func (r *h26bCkpt) must(err error, what string) {
	r.t.Helper()
	if err != nil {
		r.t.Fatalf("%s: %v", what, err)
	}
}

// write writes p at off of name (created if new) and fsyncs it.
func (r *h26bCkpt) write(name string, p []byte, off int) {
	h, err := r.e.OpenFile(name, OCreate)
	r.must(err, "open "+name)
	_, err = h.WriteAt(p, int64(off))
	r.must(err, "write "+name)
	r.must(h.Sync(), "fsync "+name)
	r.must(h.Close(), "close "+name)
	old := r.m[name]
	if len(old) < off+len(p) {
		old = append(old, make([]byte, off+len(p)-len(old))...)
	}
	copy(old[off:], p)
	r.m[name] = old
}

func (r *h26bCkpt) truncate(name string, size int) {
	h, err := r.e.Open(name)
	r.must(err, "open "+name)
	r.must(h.Truncate(int64(size)), "truncate "+name)
	r.must(h.Close(), "close "+name)
	old := r.m[name]
	if size < len(old) {
		r.m[name] = old[:size:size]
	} else {
		r.m[name] = append(old, make([]byte, size-len(old))...)
	}
}

func (r *h26bCkpt) pick() string {
	ns := make([]string, 0, len(r.m))
	for n := range r.m {
		ns = append(ns, n)
	}
	slices.Sort(ns)
	return ns[r.rng.IntN(len(ns))]
}

// workload runs ops acknowledged operations, every one durable when it
// returns.
func (r *h26bCkpt) workload(ops int) {
	for range ops {
		r.n++
		if len(r.m) < 6 {
			r.write(fmt.Sprintf("f%d", r.n), r.data(1+r.rng.IntN(24<<10)), 0)
			continue
		}
		switch op := r.rng.IntN(10); {
		case op < 3:
			r.write(fmt.Sprintf("f%d", r.n), r.data(1+r.rng.IntN(24<<10)), 0)
		case op < 5:
			name := r.pick()
			r.write(name, r.data(1+r.rng.IntN(8<<10)), r.rng.IntN(len(r.m[name])+4096))
		case op < 7:
			name := r.pick()
			r.truncate(name, r.rng.IntN(len(r.m[name])+16<<10))
		case op < 8:
			from, to := r.pick(), r.pick()
			if from != to {
				r.must(r.e.Rename(from, to), "rename")
				r.m[to] = r.m[from]
				delete(r.m, from)
			}
		default:
			name := r.pick()
			r.must(r.e.Remove(name), "remove "+name)
			delete(r.m, name)
		}
	}
}

func (r *h26bCkpt) verify(when string) {
	r.t.Helper()
	var probs []string
	have := map[string]bool{}
	for _, fi := range r.e.List() {
		have[fi.Name] = true
		if _, ok := r.m[fi.Name]; !ok {
			probs = append(probs, fmt.Sprintf("%s exists, acknowledged removed or never made", fi.Name))
		}
	}
	for name, want := range r.m {
		if !have[name] {
			probs = append(probs, name+" is gone")
			continue
		}
		h, err := r.e.Open(name)
		if err != nil {
			probs = append(probs, fmt.Sprintf("open %s: %v", name, err))
			continue
		}
		got := make([]byte, len(want)+4096)
		n, err := h.ReadAt(got, 0)
		size := h.Size()
		h.Close()
		if err != nil && !errors.Is(err, io.EOF) {
			probs = append(probs, fmt.Sprintf("read %s: %v", name, err))
			continue
		}
		if size != int64(len(want)) || n != len(want) || !bytes.Equal(got[:n], want) {
			at := 0
			for at < min(n, len(want)) && got[at] == want[at] {
				at++
			}
			probs = append(probs, fmt.Sprintf("%s: size %d (read %d), want %d; first difference at %d", name, size, n, len(want), at))
		}
	}
	if len(probs) > 0 {
		slices.Sort(probs)
		r.t.Fatalf("%s: %d problems:\n  %v\ncut: %v", when, len(probs), probs, r.events())
	}
}

// after checks the recovered engine, then runs two more checkpoints (the
// second switches back) among acknowledged writes, cuts the power once
// more, and checks again.
func (r *h26bCkpt) after(when string) {
	r.t.Helper()
	r.verify(when)
	before := r.e.Stats().Checkpoints
	r.workload(3)
	r.must(r.ckpt(), when+": next checkpoint")
	r.workload(3)
	r.must(r.ckpt(), when+": the checkpoint after it")
	if got := r.e.Stats().Checkpoints - before; got != 2 {
		r.t.Fatalf("%s: %d checkpoints counted, want 2", when, got)
	}
	r.workload(3)
	r.crash(-1)
	r.fsck(when + ", then two checkpoints and a power cut")
	r.must(r.open(false, 0), when+": reopen after two more checkpoints")
	r.verify(when + ", then two checkpoints and a power cut")
	r.must(r.e.Close(), "close")
	r.e = nil
}

// h26bGeometries: one zone per metadata half, and two (a half's
// checkpoint then spans writes into its first zone, and recovery reads a
// two-zone log).
var h26bGeometries = []struct{ name, zoneSize string }{
	{"k1", "256K"},
	{"k2", "64K"},
}

func h26bDevice(t *testing.T, zoneSize string) string {
	zones := 24
	if zoneSize == "64K" {
		zones = 64
	}
	return memDevice(t, zones, zoneSize) + "&max_append=8K"
}

// cutCheckpoint runs ckpt with the power cut at its at-th device
// operation, then crashes the engine (the write before the cut torn to
// keep blocks, keep >= 0): whether the cut came inside it, the first
// operation refused, whether a write was torn, and ckpt's error. A
// checkpoint that fails without a cut fails the test.
func (r *h26bCkpt) cutCheckpoint(ckpt func() error, at int64, keep int) (cutIn bool, where string, torn bool, err error) {
	r.dev.n.Store(0)
	r.dev.at.Store(at)
	err = ckpt()
	cutIn = r.dev.cut.Load()
	if !cutIn && err != nil {
		r.t.Fatalf("checkpoint failed without a cut: %v", err)
	}
	if cutIn {
		where = r.events()[0]
	}
	return cutIn, where, r.crash(keep), err
}

// h26bCase runs one cut: setup brings the engine to the checkpoint
// whose K-th device operation the power fails at.
func h26bCase(t *testing.T, zoneSize string, seed uint64, fresh bool, earlier int, at int64, keep int) (cutIn, torn bool, where string) {
	r := &h26bCkpt{t: t, devName: h26bDevice(t, zoneSize), rng: rand.New(rand.NewPCG(seed, 26)),
		cfg: Config{CacheBytes: 2 << 20, DirtyLimit: 512 << 10, MaxOrder: 4}, m: map[string][]byte{}}
	if !fresh {
		d := r.openDev()
		if _, err := Format(d, FormatOptions{}); err != nil {
			t.Fatal(err)
		}
		d.Close()
	}
	r.must(r.open(fresh, 0), "open")
	for range earlier {
		r.workload(8)
		r.must(r.ckpt(), "earlier checkpoint")
	}
	if fresh {
		// Few enough operations that the log needs no switch: the
		// checkpoint cut is the device's first.
		r.workload(8)
		r.names(14)
		if n := r.e.Stats().Checkpoints; n != 0 {
			t.Fatalf("%d checkpoints before the first", n)
		}
	} else {
		r.workload(40)
		r.names(60)
	}
	active := r.e.meta.active
	cutIn, where, torn, err := r.cutCheckpoint(r.ckpt, at, keep)
	when := fmt.Sprintf("cut at op %d of a checkpoint into half %d (torn %v, err %v)", at, 1-active, torn, err)
	r.fsck(when)
	r.must(r.open(false, 0), when+": reopen")
	r.after(when)
	return cutIn, torn, where
}

// names creates n small files with long names, so that the checkpoint
// takes several writes.
func (r *h26bCkpt) names(n int) {
	for i := range n {
		r.n++
		r.write(fmt.Sprintf("%d-a-name-long-enough-to-make-the-checkpoint-take-several-writes-%d", i, r.n), r.data(1+r.rng.IntN(600)), 0)
	}
}

func h26bQuiet(t *testing.T) {
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
}

// TestH26bCutInsideCheckpoint cuts at every device operation of a
// checkpoint: the first of a fresh device, and switches into either
// half after earlier ones. ZONEFOLD_H26B_SEEDS=FIRST-LAST runs the
// workloads of those seeds instead of seed 1 (h26bSeeds).
func TestH26bCutInsideCheckpoint(t *testing.T) {
	h26bQuiet(t)
	h26bSeeds(t, func(t *testing.T, seed uint64) { h26bCutInsideCheckpoint(t, seed) })
}

// h26bSeeds runs f with the workload seed 1, or with each seed of
// ZONEFOLD_H26B_SEEDS=FIRST-LAST (a subtest each), for soaks: the seeds
// change the workload and so the checkpoint's records and what the cut
// lands on.
func h26bSeeds(t *testing.T, f func(t *testing.T, seed uint64)) {
	seeds := envSeeds(t, "ZONEFOLD_H26B_SEEDS")
	if seeds == nil {
		f(t, 1)
		return
	}
	for _, s := range seeds {
		t.Run(fmt.Sprintf("seed%d", s), func(t *testing.T) { f(t, s) })
	}
}

func h26bCutInsideCheckpoint(t *testing.T, seed uint64) {
	for _, g := range h26bGeometries {
		for _, c := range []struct {
			name    string
			fresh   bool
			earlier int
		}{{"fresh", true, 0}, {"into-0", false, 0}, {"into-1", false, 1}} {
			t.Run(g.name+"/"+c.name, func(t *testing.T) {
				tears, afterWrite := 0, false
				for at := int64(1); ; at++ {
					keeps := []int{-1}
					if afterWrite {
						// The operation before the cut wrote: tear it
						// to no block and to one.
						keeps = append(keeps, 0, 1)
					}
					for _, keep := range keeps {
						cut, torn, where := h26bCase(t, g.zoneSize, seed, c.fresh, c.earlier, at, keep)
						if !cut {
							t.Logf("%d device operations in the checkpoint, %d cuts tore the write before", at-1, tears)
							return
						}
						if keep < 0 {
							t.Logf("%s", where)
							afterWrite = strings.Contains(where, ": write ")
						}
						if torn {
							tears++
						}
					}
				}
			})
		}
	}
}

// TestH26bCutInsideRecoveryCheckpoint cuts the power inside the
// checkpoint recovery writes (at every device operation of Open after a
// crash that left the log to replay), then once more inside the next
// recovery's. ZONEFOLD_H26B_SEEDS as for TestH26bCutInsideCheckpoint.
func TestH26bCutInsideRecoveryCheckpoint(t *testing.T) {
	h26bQuiet(t)
	h26bSeeds(t, func(t *testing.T, seed uint64) { h26bCutInsideRecoveryCheckpoint(t, seed) })
}

func h26bCutInsideRecoveryCheckpoint(t *testing.T, seed uint64) {
	for _, g := range h26bGeometries {
		t.Run(g.name, func(t *testing.T) {
			for at := int64(1); ; at++ {
				r := &h26bCkpt{t: t, devName: h26bDevice(t, g.zoneSize), rng: rand.New(rand.NewPCG(seed, 27)),
					cfg: Config{CacheBytes: 2 << 20, DirtyLimit: 512 << 10, MaxOrder: 4}, m: map[string][]byte{}}
				r.must(r.open(true, 0), "open")
				r.workload(8)
				r.must(r.ckpt(), "checkpoint")
				r.workload(40)
				r.names(60)
				r.crash(-1)
				err := r.open(false, at)
				cut := r.dev.cut.Load()
				r.dev.at.Store(0)
				if !cut {
					r.must(err, "recovery without a cut")
					r.after("no cut")
					t.Logf("%d device operations in recovery", at-1)
					return
				}
				r.crash(0)
				when := fmt.Sprintf("cut at op %d of recovery (err %v)", at, err)
				r.fsck(when)
				// And inside the next recovery's checkpoint.
				err = r.open(false, at/2+1)
				r.dev.at.Store(0)
				if !r.dev.cut.Load() {
					r.must(err, when+": reopen")
				} else {
					r.crash(1)
					r.fsck(when + ", and again")
					r.must(r.open(false, 0), when+": reopen")
				}
				r.after(when)
			}
		})
	}
}
