package engine

// The handle model: the model test's random operations (model_test.go),
// but through handles held across namespace changes, as a daemon's
// clients hold them. A file renamed over or removed while open keeps
// working through its handles and vanishes at a crash; creates may be
// exclusive or deferred (ODeferSync), removes deferred (RemoveDeferred)
// or refused while open and done at the last close (RemoveUnused),
// truncates may only grow (Grow); and the power cuts are every kind the
// power-cut loop draws (torn last write, zones keeping some unflushed
// writes, mid-flight), each followed by fsck. TestModelEmu opens a
// handle per operation, so none of this met a crash there, and the
// power-cut loop's clients never rename over or remove a file they hold.
//
// A name a deferred operation touched since the last flush of the
// metadata log is uncertain until the next one: after a cut it may hold
// any of the files it held meanwhile, or none (hmRun.maybe). Every other
// name must hold its file, with every fsynced byte.
//
// ZONEFOLD_HANDLEMODEL_SEEDS=FIRST-LAST runs those seeds instead of the
// few CI runs.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"testing"

	"github.com/zonefold/zonefold/zns"
)

// hmSpan is how far into a file the model writes: 8 files of up to
// hmSpan on a 4 MiB device keep GC busy.
const hmSpan = 200 << 10

// hmInode is a file of the model: its bytes, whether a name holds it,
// and whether RemoveUnused asked its last close to remove it.
type hmInode struct {
	m       *modelFile
	named   bool
	id      int
	atClose bool
}

// hmHandle is an open handle and the file it has open.
type hmHandle struct {
	f   *File
	ino *hmInode
}

// hmRun drives an engine and the model; modelRun's files are used only
// to check (checkAll) at the end.
type hmRun struct {
	*modelRun
	names   map[string]*hmInode
	handles []*hmHandle
	nextID  int
	maybe   map[string][]*hmInode // names a deferred op left uncertain: nil is absent
}

// durableOp notes an operation that flushed the metadata log: every
// deferred create and remove before it is durable now.
func (r *hmRun) durableOp() { r.maybe = map[string][]*hmInode{} }

// candidates is what name may hold after a cut: its file, or if it is
// uncertain, any it held since the last flush (nil: none).
func (r *hmRun) candidates(name string) []*hmInode {
	if c, ok := r.maybe[name]; ok {
		return c
	}
	return []*hmInode{r.names[name]}
}

// closeHandle forgets a closed handle; if it was its file's last and
// RemoveUnused asked for it, the file loses its name, durably from the
// next flush (removeAtClose).
func (r *hmRun) closeHandle(h *hmHandle) {
	for i, x := range r.handles {
		if x == h {
			r.handles = append(r.handles[:i], r.handles[i+1:]...)
			break
		}
	}
	for _, x := range r.handles {
		if x.ino == h.ino {
			return
		}
	}
	if h.ino.atClose && h.ino.named {
		for n, ino := range r.names {
			if ino == h.ino {
				r.maybe[n] = append(r.candidates(n), nil)
				delete(r.names, n)
				ino.named = false
				r.logf("  removed at close: %s", n)
			}
		}
	}
}

func (r *hmRun) pickName() string {
	return fmt.Sprintf("f%d", r.rng.IntN(8))
}

func (r *hmRun) pickHandle() *hmHandle {
	if len(r.handles) == 0 {
		return nil
	}
	return r.handles[r.rng.IntN(len(r.handles))]
}

// step runs one random operation on the engine and the model.
func (r *hmRun) step() {
	e := r.e
	op := r.rng.IntN(100)
	h := r.pickHandle()
	if h == nil && op >= 16 && op < 80 {
		op = 0
	}
	switch {
	case op < 8:
		name := r.pickName()
		flags := OCreate
		if r.rng.IntN(2) == 0 {
			flags |= OTrunc
		}
		if r.rng.IntN(2) == 0 {
			flags |= ODeferSync
		}
		if r.rng.IntN(4) == 0 {
			flags |= OExcl
		}
		r.logf("create %s flags %#x", name, flags)
		f, err := e.OpenFile(name, flags)
		ino := r.names[name]
		if flags&OExcl != 0 && ino != nil {
			if !errors.Is(err, fs.ErrExist) {
				r.fatalf("exclusive create of existing %s: %v", name, err)
			}
			return
		}
		if err != nil {
			r.fatalf("create %s: %v", name, err)
		}
		if ino != nil {
			ino.atClose = false
			if flags&OTrunc != 0 {
				ino.m.data = ino.m.data[:0]
				ino.m.synced()
				r.durableOp()
			}
		} else if flags&ODeferSync != 0 {
			r.nextID++
			ino = &hmInode{m: &modelFile{}, named: true, id: r.nextID}
			r.maybe[name] = append(r.candidates(name), ino)
			r.names[name] = ino
		} else {
			r.durableOp()
			r.nextID++
			ino = &hmInode{m: &modelFile{}, named: true, id: r.nextID}
			r.names[name] = ino
		}
		r.handles = append(r.handles, &hmHandle{f, ino})
	case op < 16:
		name := r.pickName()
		ino := r.names[name]
		if ino == nil {
			return
		}
		r.logf("open %s (ino %d)", name, ino.id)
		f, err := e.Open(name)
		if err != nil {
			r.fatalf("open %s: %v", name, err)
		}
		ino.atClose = false
		r.handles = append(r.handles, &hmHandle{f, ino})
	case op < 45:
		m := h.ino.m
		p, off := r.randomWrite(hmSpan)
		n := len(p)
		r.logf("write ino %d at %d, %d bytes", h.ino.id, off, n)
		if k, err := h.f.WriteAt(p, int64(off)); err != nil || k != n {
			r.fatalf("write: %d, %v", k, err)
		}
		m.write(p, off)
	case op < 60:
		m := h.ino.m
		off := r.rng.IntN(len(m.data) + 10)
		n := 1 + r.rng.IntN(4*BlockSize)
		r.logf("read ino %d at %d, %d bytes", h.ino.id, off, n)
		got := make([]byte, n)
		k, err := h.f.ReadAt(got, int64(off))
		want := []byte{}
		if off < len(m.data) {
			want = m.data[off:min(off+n, len(m.data))]
		}
		if k != len(want) || (k < n && err == nil) {
			r.fatalf("read ino %d [%d,+%d): %d bytes, %v; model %d", h.ino.id, off, n, k, err, len(want))
		}
		for i := range k {
			if got[i] != want[i] {
				r.fatalf("read ino %d byte %d is %#x, model %#x", h.ino.id, off+i, got[i], want[i])
			}
		}
	case op < 68:
		m := h.ino.m
		size := r.rng.IntN(len(m.data) + 2*BlockSize)
		grow := r.rng.IntN(4) == 0
		r.logf("truncate ino %d to %d (grow %v)", h.ino.id, size, grow)
		var err error
		if grow {
			err = h.f.Grow(int64(size))
			if size < len(m.data) {
				size = len(m.data)
			}
		} else {
			err = h.f.Truncate(int64(size))
		}
		if err != nil {
			r.fatalf("truncate: %v", err)
		}
		if size == len(m.data) && grow {
			return
		}
		r.durableOp()
		m.truncated(size)
	case op < 76:
		r.logf("fsync ino %d", h.ino.id)
		if err := h.f.Sync(); err != nil {
			r.fatalf("fsync: %v", err)
		}
		h.ino.m.synced()
		r.durableOp()
	case op < 80:
		r.logf("close ino %d", h.ino.id)
		if err := h.f.Close(); err != nil {
			r.fatalf("close: %v", err)
		}
		r.closeHandle(h)
	case op < 86:
		from, to := r.pickName(), r.pickName()
		ino := r.names[from]
		if ino == nil || from == to {
			return
		}
		r.logf("rename %s (ino %d) to %s", from, ino.id, to)
		if err := e.Rename(from, to); err != nil {
			r.fatalf("rename: %v", err)
		}
		r.durableOp()
		ino.atClose = false // a rename keeps a file RemoveUnused marked
		if old := r.names[to]; old != nil {
			old.named = false
		}
		delete(r.names, from)
		r.names[to] = ino
	case op < 90:
		name := r.pickName()
		ino := r.names[name]
		if ino == nil {
			return
		}
		kind := r.rng.IntN(3)
		r.logf("remove %s (ino %d) kind %d", name, ino.id, kind)
		open := false
		for _, x := range r.handles {
			open = open || x.ino == ino
		}
		var err error
		switch kind {
		case 0:
			err = e.Remove(name)
		case 1:
			err = e.RemoveDeferred(name)
		case 2:
			err = e.RemoveUnused(name)
			if open {
				if !errors.Is(err, ErrInUse) {
					r.fatalf("remove unused of open file: %v", err)
				}
				ino.atClose = true
				return
			}
		}
		if err != nil {
			r.fatalf("remove: %v", err)
		}
		if kind == 1 {
			r.maybe[name] = append(r.candidates(name), nil)
		}
		ino.named = false
		delete(r.names, name)
		if kind != 1 {
			r.durableOp()
		}
	case op < 93:
		r.logf("sync all")
		if err := e.Sync(r.t.Context()); err != nil {
			r.fatalf("sync: %v", err)
		}
		for _, h := range r.handles {
			h.ino.m.synced()
		}
		for _, ino := range r.names {
			ino.m.synced()
		}
		r.durableOp()
	default:
		r.crash()
	}
}

// crash cuts power and checks each name against its candidates.
func (r *hmRun) crash() {
	r.t.Helper()
	emu := r.e.dev.(*zns.Emu)
	if r.rng.IntN(3) == 0 {
		_ = r.e.wb.SyncAll(r.t.Context())
	}
	kind := cutKindOf(r.rng.IntN(5))
	r.logf("power cut kind %d", kind)
	powerCut(r.t, r.e, emu, kind, func() {}, func() int64 { return int64(r.rng.IntN(4)) * BlockSize },
		func(zone int, n int64) int64 { return keepDrawn(r.rng, n) })
	if err := fsckAfterCut(r.t, r.devName); err != nil {
		r.fatalf("fsck after the cut: %v", err)
	}
	r.e = reopen(r.t, r.devName, r.cfg)
	r.handles = nil
	present := map[string]FileInfo{}
	for _, fi := range r.e.List() {
		present[fi.Name] = fi
	}
	all := map[string]bool{}
	for n := range r.names {
		all[n] = true
	}
	for n := range r.maybe {
		all[n] = true
	}
	for n := range present {
		if !all[n] {
			r.fatalf("after power cut: unexpected file %q", n)
		}
	}
	newNames := map[string]*hmInode{}
	for n := range all {
		cands := r.candidates(n)
		fi, ok := present[n]
		if !ok {
			if !slices.Contains(cands, nil) {
				r.fatalf("after power cut: %q is gone", n)
			}
			continue
		}
		f, _ := r.e.Open(n)
		got := make([]byte, fi.Size)
		if k, err := f.ReadAt(got, 0); int64(k) != fi.Size || (err != nil && err != io.EOF) {
			r.fatalf("after power cut: read %q: %d, %v", n, k, err)
		}
		f.Close()
		var why []string
		matched := false
		for _, c := range cands {
			if c == nil {
				continue
			}
			if msg := c.m.mismatch(got); msg != "" {
				why = append(why, fmt.Sprintf("ino %d: %s", c.id, msg))
				continue
			}
			matched = true
		}
		if !matched {
			r.fatalf("after power cut: %q matches no candidate: %v", n, why)
		}
		r.nextID++
		m := &modelFile{data: got}
		m.synced()
		newNames[n] = &hmInode{m: m, named: true, id: r.nextID}
	}
	r.names = newNames
	r.maybe = map[string][]*hmInode{}
}

// TestHandleModelPowerCuts runs the handle model on a small device,
// with and without zone limits, and checks every file after it.
func TestHandleModelPowerCuts(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4, 5, 6}
	if testing.Short() || raceEnabled {
		seeds = seeds[:2]
	}
	if s := envSeeds(t, "ZONEFOLD_HANDLEMODEL_SEEDS"); s != nil {
		seeds = s
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			cfg := Config{CacheBytes: 1 << 20, DirtyLimit: 256 << 10, MaxOrder: 4}
			extra := ""
			if seed%2 == 1 {
				extra = "&max_open=4&max_active=5&max_append=16K"
			}
			devName := emuDevice(t, 16, "256K", extra)
			base := newModelRun(t, devName, cfg, seed)
			base.e = formatOpen(t, devName, cfg)
			r := &hmRun{modelRun: base, names: map[string]*hmInode{}, maybe: map[string][]*hmInode{}}
			for range 1500 {
				r.step()
			}
			r.files = map[string]*modelFile{}
			for n, ino := range r.names {
				r.files[n] = ino.m
			}
			r.checkAll()
			for _, h := range r.handles {
				h.f.Close()
			}
			if err := r.e.Close(); err != nil {
				t.Fatal(err)
			}
			checkFsck(t, devName)
		})
	}
}
